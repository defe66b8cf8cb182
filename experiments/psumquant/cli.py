"""Entry point of ``npukit experiment psumquant`` (called by ``npukit._cli_experiment``)."""

from __future__ import annotations

import argparse

from .run import make_plan, run_energy_only, run_experiment


def cli_main(args: argparse.Namespace) -> int:
    """Validate the flags (ConfigError -> exit 2), run the experiment, print what was written."""
    from npukit._cli_sweep import executor_from_args

    plan = make_plan(args.quick, getattr(args, "policies", None), getattr(args, "bits", None))
    if getattr(args, "energy_only", False):
        run_energy_only(args.out)
        return 0
    distributed = getattr(args, "scheduler", None) or getattr(args, "dask_local", None)
    executor = executor_from_args(args, local_workers=1) if distributed else None  # connects before anything is written
    try:
        run_experiment(args.out, plan, progress=not args.no_progress, executor=executor)
    finally:
        if executor is not None:
            executor.close()
    return 0
