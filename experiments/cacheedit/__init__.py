"""CacheEdit experiment (``npukit experiment cacheedit``): the Adaptive Activation Cache on the Flux editor vs
diffusers' caches and token caching, DLE plots and the FLUX.1 Kontext-dev NPU cost (:mod:`.run`).

The plug-in contract of :mod:`npukit.experiments`; importing this package imports nothing heavy.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Config", "add_arguments", "config_from_args", "run_experiment"]

MAX_IMAGES, MAX_ROUNDS, MAX_STEPS = 10_000, 100, 1000


@dataclass(frozen=True)
class Config:
    """Every option: sessions (``images`` x ``rounds``), sessions served together per transformer call
    (``batch``), sampling ``steps``, CPU ``threads`` (0: torch's default), ``seed``, ``weights`` (None: the
    shipped Flux editor), ``quick`` (fewer knobs, DLE on 3 images)."""

    quick: bool = False
    images: int = 50
    rounds: int = 3
    steps: int = 28
    threads: int = 1
    seed: int = 0
    weights: str | None = None
    arch: str = "npu128"
    batch: int = 25


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The experiment's own flags (``--quick``, ``--out`` and the executor flags come from the CLI)."""
    p.add_argument("--images", type=int, default=None, metavar="N", help="editing sessions (default 50; --quick 4)")
    p.add_argument("--rounds", type=int, default=3, metavar="R", help="edit rounds per session (default 3)")
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="sessions served together, one transformer call per step for all of them (default 25; "
                        "--quick 4; 1: one session at a time, the latency setting)")
    p.add_argument("--steps", type=int, default=None, metavar="S", help="sampling steps (default 28; --quick 16)")
    p.add_argument("--threads", type=int, default=1, metavar="T",
                   help="torch CPU threads (default 1: timing is steadier on a shared machine; 0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", default=None, metavar="FILE", help="Flux editor weights (default: the shipped ones)")
    p.add_argument("--arch", default="npu128", help="NPU arch of the FLUX.1 Kontext-dev cost: a built-in (npu128, npu32, "
                   "or the multi-core quad128, hetero4, tpu_v4), a .toml, a SCALE-Sim .cfg or stream:CHIP.yaml "
                   "(default npu128)")


def config_from_args(args: argparse.Namespace) -> Config:
    """Every option checked (and the weights file loaded and checked) before any work; ConfigError otherwise."""
    from .._options import MAX_SEED, MAX_THREADS, check_common, int_option

    quick = bool(getattr(args, "quick", False))
    images = args.images if args.images is not None else (4 if quick else 50)
    steps = args.steps if args.steps is not None else (16 if quick else 28)
    batch = args.batch if args.batch is not None else (4 if quick else 25)
    int_option(images, "--images", 1, MAX_IMAGES)
    int_option(batch, "--batch", 1, MAX_IMAGES)
    int_option(args.rounds, "--rounds", 1, MAX_ROUNDS)
    int_option(steps, "--steps", 4, MAX_STEPS)
    int_option(args.threads, "--threads", 0, MAX_THREADS, " (0: torch's default)")
    int_option(args.seed, "--seed", 0, MAX_SEED)
    check_common(args, "out/experiment/cacheedit")
    from npukit.sim import chip_table, load_chip

    chip_table(load_chip(args.arch))  # an unknown or malformed --arch fails here
    from npukit.models.cacheedit import IMAGE, WeightsError, load_editor  # torch from here on

    editor = load_editor(args.weights)
    c = editor.cfg
    if c.image != IMAGE or c.channels != 3:
        raise WeightsError(f"--weights '{args.weights}' is a model of {c.channels}-channel {c.image}x{c.image} images; "
                           f"the experiment's sessions are 3-channel {IMAGE}x{IMAGE}")
    return Config(quick=quick, images=images, rounds=args.rounds, steps=steps, threads=args.threads, seed=args.seed,
                  weights=args.weights, arch=args.arch, batch=batch)


def run_experiment(out_dir: str | Path, config: Config, *, executor: Any = None, progress: bool = True) -> list[Path]:
    """Run it into ``out_dir``; returns the files written (see :mod:`.run`)."""
    from .run import run_experiment as _run

    return _run(out_dir, config, executor=executor, progress=progress)
