"""Search over a sweep spec's space instead of the whole grid (public API of :mod:`npukit.sweeps._search`),
and the ``npukit sweep`` flags that ask for one (:func:`add_search_arguments`, :func:`check_search_arguments`)."""

from __future__ import annotations

import argparse

from ..sim.errors import ConfigError
from ._search import (
    METHODS,
    OBJECTIVES,
    SearchSummary,
    check_objectives,
    config_points,
    objective_values,
    run_search,
    study_name,
)

__all__ = ["METHODS", "OBJECTIVES", "SearchSummary", "add_search_arguments", "check_objectives", "check_search_arguments",
           "config_points", "objective_values", "run_search", "study_name"]


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """``--search``, ``--budget``, ``--seed``, ``--objectives``, ``--batch``."""
    g = p.add_argument_group("search (instead of the whole grid; Optuna study stored in the sweep database)")
    g.add_argument("--search", choices=("nsga2", "tpe"), default=None,
                   help="multi-objective search over the grid's values: NSGA-II or TPE (Optuna)")
    g.add_argument("--budget", type=int, default=100, metavar="N", help="complete trials (configurations) to reach (default 100)")
    g.add_argument("--seed", type=int, default=0, metavar="S", help="sampler seed (default 0)")
    g.add_argument("--objectives", default="energy,latency,area", metavar="LIST",
                   help="comma-separated, minimised: energy, latency, area, edp (default energy,latency,area)")
    g.add_argument("--batch", type=int, default=None, metavar="N",
                   help="trials asked and simulated at once (default: the workers); fix it for reproducible runs")


def check_search_arguments(args: argparse.Namespace) -> None:
    """Bad search options exit 2 with one line before anything runs."""
    if args.search is None:
        return
    if args.budget < 1:
        raise ConfigError(f"--budget must be a positive integer, got {args.budget}")
    if args.batch is not None and args.batch < 1:
        raise ConfigError(f"--batch must be a positive integer, got {args.batch}")
    if args.seed is not None and not 0 <= args.seed < 2**32:  # the samplers' numpy generators take 32 bits
        raise ConfigError(f"--seed must be an integer from 0 to {2**32 - 1}, got {args.seed}")
    args.objectives = check_objectives(args.objectives.split(","))
