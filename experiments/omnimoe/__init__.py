"""OmniMoE experiment (``npukit experiment omnimoe``): router cost against N, expert- vs token-centric
crossover, and LM quality of dense vs OmniMoE vs PEER MLPs in a byte-level Llama at matched active
parameters. The plug-in contract of :mod:`npukit.experiments`; heavy imports happen inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._config import Config, add_arguments, config_from_args

__all__ = ["Config", "add_arguments", "config_from_args", "run_experiment"]


def run_experiment(out_dir: str | Path, config: Config, *, executor: Any = None, progress: bool = True) -> list[Path]:
    """See :func:`npukit.experiments.omnimoe.run.run_experiment`."""
    from .run import run_experiment as _run

    return _run(out_dir, config, executor=executor, progress=progress)
