"""``npukit experiment NAME [--quick] [--arch NAME] [--out DIR]``: one command per paper that reproduces its numbers
(``--quick``: a smoke run that states no verdicts; every experiment also takes ``--arch``).

The experiments and their plug-in contract are in :mod:`npukit.experiments` (``Config``,
``add_arguments``, ``config_from_args``, ``run_experiment``). This module only adds the common flags,
validates every option (``config_from_args``) and connects the executor before any work, then prints
``wrote PATH`` for every file the experiment returns.
"""

from __future__ import annotations

import argparse
import importlib


def add_parser(sub: argparse._SubParsersAction) -> None:
    from npukit.experiments import EXPERIMENTS
    from npukit.sweeps.executor_flags import add_executor_arguments

    p = sub.add_parser("experiment", help="reproduce a paper's evaluation offline: " + ", ".join(EXPERIMENTS))
    exp = p.add_subparsers(dest="experiment", metavar="NAME")
    exp.required = True
    for name, (package, help_text) in EXPERIMENTS.items():
        q = exp.add_parser(name, help=help_text, description=help_text)
        pkg = importlib.import_module(package)
        q.add_argument("--quick", action="store_true",
                       help="smoke run: the smallest budgets that run every code path; states no verdicts")
        q.add_argument("--out", default=f"out/experiment/{name}", metavar="DIR",
                       help=f"output folder (default out/experiment/{name})")
        q.add_argument("--no-progress", action="store_true", help="no progress bars")
        pkg.add_arguments(q)
        add_executor_arguments(q)
        q.set_defaults(func=run, experiment_package=package)


def run(args: argparse.Namespace) -> int:
    from npukit.sim import prepare_out_dir
    from npukit.sweeps.executor_flags import executor_from_args

    pkg = importlib.import_module(args.experiment_package)
    config = pkg.config_from_args(args)  # every option validated before any work
    distributed = getattr(args, "scheduler", None) or getattr(args, "dask_local", None)
    executor = executor_from_args(args, local_workers=1) if distributed else None  # connects before any work
    try:
        out = prepare_out_dir(args.out)
        paths = pkg.run_experiment(out, config, executor=executor, progress=not args.no_progress)
    finally:
        if executor is not None:
            executor.close()
    for path in paths or ():
        print(f"wrote {path}")
    return 0
