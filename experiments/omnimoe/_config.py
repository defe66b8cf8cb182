"""Options of ``npukit experiment omnimoe`` (stdlib only: the CLI imports this to build --help)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

MAX_STEPS = 1_000_000
MAX_SEEDS = 100
RECIPES = ("uniform", "sparse")  # as _quality.RECIPES (kept here: this module imports no torch)


@dataclass(frozen=True)
class Config:
    """``quick``: small sweeps and a short training run; ``steps``: training steps per LM (None: 24
    quick, 600 full); ``threads``: torch CPU threads (None: 1 with ``quick``, else torch's default);
    ``seeds``: models per kind (seeds 0..seeds-1; None: 1 quick, 3 full, so a full run's verdict has an
    across-seed interval); ``recipe`` / ``expert_lr``: the optimizer recipe
    (see ``_quality.py``) and the expert tables' learning-rate factor under ``sparse``; ``arch``: the NPU
    arch (name or file) of the modelled expert- vs token-centric cycles and energy."""

    quick: bool = False
    steps: int | None = None
    threads: int | None = None
    seeds: int | None = None
    recipe: str = "sparse"
    expert_lr: float = 3.0
    arch: str = "npu128"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The experiment's own flags (``--quick``, ``--out`` and the executor flags come from the CLI)."""
    parser.add_argument("--steps", type=int, default=None, metavar="S",
                        help="training steps per model (default 24 quick, 600 full)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch CPU threads (default 1 with --quick: small ops on a shared machine run fastest "
                        "single-threaded; else torch's default)")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="train every model with seeds 0..N-1 and report each, their mean and the across-seed 95%% interval "
                             "of the difference to dense (default 3; 1 with --quick)")
    parser.add_argument("--recipe", default=None, choices=RECIPES,
                        help="optimizer recipe, the same for every model: sparse (default: weight decay only on dense "
                        "weight matrices, expert tables and product keys at --expert-lr times the rate) or uniform "
                        "(one AdamW group, weight decay on everything)")
    parser.add_argument("--arch", default="npu128",
                        help="NPU arch of the modelled expert- vs token-centric cost: a built-in (npu128, npu32, or the "
                             "multi-core quad128, hetero4, tpu_v4), a .toml, a SCALE-Sim .cfg or stream:CHIP.yaml "
                             "(default npu128)")
    parser.add_argument("--expert-lr", type=float, default=None, metavar="X",
                        help="learning-rate factor of the expert tables and product keys with --recipe sparse (default 3)")


def config_from_args(args: argparse.Namespace) -> Config:
    """Every option checked before any work (ConfigError otherwise): ``--steps``, ``--threads``,
    ``--seeds``, ``--recipe``, ``--expert-lr``, ``--out``, the executor flags, and that the python3-doc
    corpus is installed."""
    from npukit.models.corpus import docs_root
    from npukit.sim.errors import ConfigError

    from .._options import MAX_THREADS, check_common, float_option, int_option

    quick = bool(getattr(args, "quick", False))
    steps = int_option(getattr(args, "steps", None), "--steps", 1, MAX_STEPS, " (training steps per model)")
    threads = int_option(getattr(args, "threads", None), "--threads", 1, MAX_THREADS)
    seeds = int_option(getattr(args, "seeds", None), "--seeds", 1, MAX_SEEDS, " (models per kind)")
    recipe = getattr(args, "recipe", None) or "sparse"
    if recipe not in RECIPES:
        raise ConfigError(f"--recipe must be one of {', '.join(RECIPES)}, got {recipe!r}")
    expert_lr = float_option(getattr(args, "expert_lr", None), "--expert-lr", 0.0, 100.0, lo_open=True,
                             hint=" (learning-rate factor)")
    check_common(args, "out/experiment/omnimoe")
    arch = getattr(args, "arch", None)
    arch = "npu128" if arch is None else arch  # an empty --arch is refused, not taken for the default
    from npukit.sim import chip_table, load_chip

    chip_table(load_chip(arch))  # an unknown or malformed --arch fails here, before any work
    docs_root()
    return Config(quick=quick, steps=steps, threads=threads, seeds=seeds or (1 if quick else 3), recipe=recipe,
                  expert_lr=3.0 if expert_lr is None else expert_lr, arch=arch)
