"""``npukit sweep``: run a design-space sweep into SQLite, and export a sweep database to CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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

    from npukit._cli_common import prepare_out_dir
    from npukit.sim.sweep import expand_points, export_csv, load_sweep_spec, run_points

    spec = load_sweep_spec(args.spec)
    points = expand_points(spec)  # every point validated before anything is written
    out = Path(args.out)
    db = Path(args.db) if args.db else out / "sweep.sqlite"
    csv_path = Path(args.csv) if args.csv else out / "sweep.csv"
    for folder in {db.parent, csv_path.parent}:
        prepare_out_dir(folder)

    bar = None

    def progress(n: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            from tqdm import tqdm

            tqdm.monitor_interval = 0  # no monitor thread: the worker pool may then start by fork
            bar = tqdm(total=total, unit="pt", desc=f"sweep {spec.name}", file=sys.stderr, disable=args.no_progress or not total)
        bar.update(n)

    try:
        summary = run_points(points, db, workers=args.workers, progress=progress, name=spec.name)
    finally:
        if bar is not None:
            bar.close()
    export_csv(db, csv_path, summary.keys)
    print(f"wrote {db}")
    print(f"wrote {csv_path}")
    print(summary.line())
    return 0


def _export(args: argparse.Namespace) -> int:
    from npukit._cli_common import prepare_out_dir
    from npukit.sim.errors import ConfigError
    from npukit.sim.sweep import export_csv

    db = Path(args.export_db)
    if not db.is_file():
        raise ConfigError(f"sweep database '{db}' does not exist; pass the .sqlite file npukit sweep wrote")
    csv_path = Path(args.csv) if args.csv else db.with_suffix(".csv")
    prepare_out_dir(csv_path.parent)
    export_csv(db, csv_path)
    print(f"wrote {csv_path}")
    return 0
