"""PsumQuant experiment (``npukit experiment psumquant``): accuracy of psum-quantized real models and
the NPU energy saved. The plug-in contract of :mod:`npukit.experiments` (``Config``, ``add_arguments``,
``config_from_args``, ``run_experiment``), plus ``digits_demo_summary(out_dir)``, which gives
``npukit demo`` the digits CNN top-1 at 32- vs 8-bit psums. Heavy imports (torch, matplotlib) happen
inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._cache import check_cache_dir
from ._config import Config, add_arguments, config_from_args

__all__ = ["Config", "add_arguments", "check_cache_dir", "config_from_args", "digits_demo_summary", "run_experiment"]


def run_experiment(out_dir: str | Path, config: Config | None = None, *, executor: Any = None,
                   progress: bool = True) -> list[Path]:
    """Every family of the plan ``config`` selects (None: the full plan), or with ``energy_only`` the
    NPU energy table alone; writes CSVs, plots and summary.md into ``out_dir``, returns their paths.
    ``executor``: the model families run as jobs on it (None: one after another in this process)."""
    from . import run

    config = config or Config()
    if config.energy_only:
        return run.run_energy_only(out_dir, arch=config.arch)
    plan = run.plan_of(config)
    return run.run_experiment(out_dir, plan, progress=progress, executor=executor, arch=config.arch)


def digits_demo_summary(out_dir: str | Path, epochs: int | None = None) -> str:
    """See :func:`npukit.experiments.psumquant.run.digits_demo_summary` (``epochs`` None: the full
    experiment's CNN, shared through the cache)."""
    from .run import FULL
    from .run import digits_demo_summary as _demo

    return _demo(out_dir, epochs or FULL.digits_epochs)
