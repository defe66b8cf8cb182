"""Options of ``npukit experiment omnimoe`` (stdlib only: the CLI imports this to build --help)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

MAX_STEPS = 1_000_000


@dataclass(frozen=True)
class Config:
    """``quick``: small sweeps and a short training run; ``steps``: training steps per LM (None: 24
    quick, 600 full); ``threads``: torch CPU threads (None: 1 with ``quick``, else torch's default)."""

    quick: bool = False
    steps: int | None = None
    threads: int | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The experiment's own flags (``--quick``, ``--out`` and the executor flags come from the CLI)."""
    parser.add_argument("--steps", type=int, default=None, metavar="S",
                        help="training steps per model (default 24 quick, 600 full)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch CPU threads (default 1 with --quick: small ops on a shared machine run fastest "
                        "single-threaded; else torch's default)")


def config_from_args(args: argparse.Namespace) -> Config:
    """Every option checked before any work (ConfigError otherwise): ``--steps``, ``--threads``,
    ``--out``, the executor flags, and that the python3-doc corpus is installed."""
    from npukit.models.corpus import docs_root

    from .._options import MAX_THREADS, check_common, int_option

    quick = bool(getattr(args, "quick", False))
    steps = int_option(getattr(args, "steps", None), "--steps", 1, MAX_STEPS, " (training steps per model)")
    threads = int_option(getattr(args, "threads", None), "--threads", 1, MAX_THREADS)
    check_common(args, "out/experiment/omnimoe")
    docs_root()
    return Config(quick=quick, steps=steps, threads=threads)
