"""``npukit sweep SPEC --search nsga2|tpe --budget N``: the search options of ``npukit sweep run`` and
their run (:mod:`npukit.sim._sweep_search`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npukit.sim.sweep import Executor, SweepSpec


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
    from npukit.sim._sweep_search import check_objectives
    from npukit.sim.errors import ConfigError

    if args.search is None:
        return
    if args.budget < 1:
        raise ConfigError(f"--budget must be a positive integer, got {args.budget}")
    if args.batch is not None and args.batch < 1:
        raise ConfigError(f"--batch must be a positive integer, got {args.batch}")
    args.objectives = check_objectives(args.objectives.split(","))


def run_search_cli(args: argparse.Namespace, spec: SweepSpec, executor: Executor, db: Path, csv_path: Path) -> int:
    """Run the search into ``db``, then the CSV of the points its trials simulated."""
    from npukit.sim import prepare_out_dir
    from npukit.sim._sweep_search import config_points, run_search
    from npukit.sim.sweep import export_csv

    for folder in {db.parent, csv_path.parent}:
        prepare_out_dir(folder)

    def progress(done: int, budget: int) -> None:
        if not args.no_progress:
            print(f"search {spec.name}: {done}/{budget} trials", file=sys.stderr, flush=True)

    summary = run_search(spec, db, args.search, args.budget, args.seed, args.objectives, executor=executor,
                         batch=args.batch, progress=progress)
    keys = [p.key for params, _ in summary.front for p in config_points(spec, params)]
    export_csv(db, csv_path, keys)
    print(f"wrote {db}")
    print(f"wrote {csv_path} (the Pareto front's points)")
    print(summary.line())
    for params, vals in summary.front[:20]:
        cfg = " ".join(f"{k}={v}" for k, v in params.items())
        print(f"  {cfg}: " + ", ".join(f"{o} {v:.4g}" for o, v in zip(args.objectives, vals, strict=True)))
    return 0
