"""``npukit sweep``: run a design-space sweep into SQLite, and export a sweep database to CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from npukit.sim import add_executor_arguments, executor_from_args

if TYPE_CHECKING:
    from npukit.sim.sweep import Executor, SweepPoint, SweepSpec

_EPILOG = """\
spec file (TOML):
  [sweep]
  name = "psum-study"                 # optional
  arch = "npu128"                     # built-in, .toml or SCALE-Sim .cfg (relative to the spec file)
  workloads = ["resnet18", "gemm:M=512,N=512,K=512"]   # workload specs or topology CSV paths
  [grid]                              # Arch fields or dotted sub-fields; the cartesian product
  rows = [64, 128]
  dataflow = ["ws", "os", "is"]
  "bits.psum" = [8, 16, 32]

Points already in the database (same arch, workload and npukit version) are not recomputed, so a
killed sweep resumes where it stopped.

backends (same spec, same results, same database; the database stays on this machine):
  --workers N                local process pool (default: CPU count; 1 = in-process)
  --dask-local N             a Dask LocalCluster of N worker processes on this machine
  --scheduler tcp://H:P      an existing Dask cluster; its workers need the same npukit version

export:
  npukit sweep export DB [--csv OUT.csv]   write every row of a sweep database to CSV
                                           (default: DB with a .csv suffix)
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run a design-space sweep (grid x workloads) into SQLite; 'sweep export DB' writes CSV",
        description="Run every point of a sweep spec (arch grid x workloads) on a process pool; each point\n"
        "becomes one SQLite row (cycles, utilization, energy per component in pJ, latency in s).\n"
        "Usage: npukit sweep SPEC.toml [options]  |  npukit sweep export DB [--csv OUT.csv]",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec file (or the word 'export' followed by DB)")
    p.add_argument("export_db", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--out", default="out/sweep", metavar="DIR", help="output folder for the defaults below (default out/sweep)")
    p.add_argument("--db", metavar="PATH", help="SQLite database (default DIR/sweep.sqlite); reused across runs")
    p.add_argument("--csv", metavar="PATH", help="CSV of this spec's points (default DIR/sweep.csv)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="worker processes (default: CPU count; 1 = in-process)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="refuse grids with more points than N (default 1,000,000)")
    add_executor_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from npukit.sim.errors import ConfigError

    if args.spec == "export" and args.export_db is not None:
        return _export(args)
    if args.spec == "export" and not Path("export").exists():
        raise ConfigError("npukit sweep export needs a database: npukit sweep export DB [--csv OUT.csv]")
    if args.export_db is not None:
        raise ConfigError(f"unexpected argument '{args.export_db}'; use npukit sweep SPEC.toml or npukit sweep export DB")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be 1 or more, got {args.workers}")

    from npukit.sim.sweep import MAX_POINTS, check_store, expand_points, load_sweep_spec

    limit = MAX_POINTS if args.max_points is None else args.max_points
    if limit < 1:
        raise ConfigError(f"--max-points must be a positive integer, got {limit}")
    from npukit.sim import check_out_dir, check_writable_file

    spec = load_sweep_spec(args.spec)
    points = expand_points(spec, limit)  # every point validated before anything is written
    out = check_out_dir(args.out)  # an empty --out is refused, not taken as the current folder
    # a bad --csv/--db fails now, not after every point is computed; an empty one is refused
    csv_path = check_writable_file(args.csv, "--csv") if args.csv is not None else out / "sweep.csv"
    db = check_writable_file(args.db, "--db") if args.db is not None else out / "sweep.sqlite"
    check_store(db)  # a database that is not ours is refused read-only, before any folder is made
    executor = executor_from_args(args)  # Dask: scheduler reached and versions checked before anything is written
    try:
        return _run(args, spec, points, executor, db, csv_path)
    finally:
        executor.close()


def _run(
    args: argparse.Namespace, spec: SweepSpec, points: list[SweepPoint], executor: Executor, db: Path, csv_path: Path
) -> int:
    from npukit.sim import prepare_out_dir
    from npukit.sim.sweep import export_csv, run_points

    for folder in {db.parent, csv_path.parent}:
        prepare_out_dir(folder)
    where = getattr(executor, "address", None)
    if where is not None:
        print(f"Dask cluster {where}: {executor.workers} worker threads", flush=True)

    bar = None

    def progress(n: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm

            tqdm.monitor_interval = 0  # no monitor thread: the worker pool may then start by fork
            bar = tqdm(total=total, unit="pt", desc=f"sweep {spec.name}", file=sys.stderr, disable=args.no_progress or not total)
        bar.update(n)

    try:
        summary = run_points(points, db, executor=executor, progress=progress, name=spec.name)
    finally:
        if bar is not None:
            bar.close()
    export_csv(db, csv_path, summary.keys)
    print(f"wrote {db}")
    print(f"wrote {csv_path}")
    print(summary.line())
    return 0


def _export(args: argparse.Namespace) -> int:
    from npukit.sim import check_writable_file
    from npukit.sim.errors import ConfigError
    from npukit.sim.sweep import export_csv

    db = Path(args.export_db)
    if db.is_dir():
        raise ConfigError(f"sweep database '{db}' is a folder; pass the .sqlite file npukit sweep wrote")
    if not db.is_file():
        raise ConfigError(f"sweep database '{db}' does not exist; pass the .sqlite file npukit sweep wrote")
    csv_path = check_writable_file(db.with_suffix(".csv") if args.csv is None else args.csv, "--csv")
    if csv_path.resolve() == db.resolve():
        raise ConfigError(f"--csv '{csv_path}' is the database itself; pass another file path")
    # export_csv reads the database (read-only) before it creates the CSV's folder or any file
    export_csv(db, csv_path)
    print(f"wrote {csv_path}")
    return 0
