"""Entry point of ``npukit experiment psumquant`` (called by ``npukit._cli_experiment``)."""

from __future__ import annotations

import argparse

from .run import make_plan, run_experiment


def cli_main(args: argparse.Namespace) -> int:
    """Validate the flags (ConfigError -> exit 2), run the experiment, print what was written."""
    plan = make_plan(args.quick, getattr(args, "policies", None), getattr(args, "bits", None))
    run_experiment(args.out, plan, progress=not args.no_progress)
    return 0
