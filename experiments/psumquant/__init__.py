"""PsumQuant experiments: accuracy of psum-quantized real models and the NPU energy saved.

``run_experiment(out_dir, plan)`` reproduces every number (``npukit experiment psumquant``);
``digits_demo_summary(out_dir)`` gives ``npukit demo`` the digits CNN top-1 at 32- vs 8-bit psums.
Heavy imports (torch, matplotlib) happen inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["digits_demo_summary", "run_experiment"]


def run_experiment(out_dir: str | Path, plan: Any = None, progress: bool = True) -> list[Path]:
    """See :func:`npukit.experiments.psumquant.run.run_experiment` (``plan`` None: the full plan)."""
    from .run import FULL
    from .run import run_experiment as _run

    return _run(out_dir, plan or FULL, progress=progress)


def digits_demo_summary(out_dir: str | Path, epochs: int | None = None) -> str:
    """See :func:`npukit.experiments.psumquant.run.digits_demo_summary` (``epochs`` None: the full
    experiment's CNN, shared through the cache)."""
    from .run import FULL
    from .run import digits_demo_summary as _demo

    return _demo(out_dir, epochs or FULL.digits_epochs)
