"""``npukit sweep``: run a design-space sweep into SQLite, and export a sweep database to CSV."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from npukit.sweeps.executor_flags import add_executor_arguments, executor_from_args

if TYPE_CHECKING:
    from npukit.sweeps import Executor, SweepPoint, SweepSpec

_SPEC_HELP = """\
spec file (TOML):
  [sweep]
  name = "psum-study"                 # optional
  arch = "npu128"                     # built-in, .toml or SCALE-Sim .cfg (relative to the spec file)
  workloads = ["resnet18", "gemm:M=512,N=512,K=512"]   # any npukit sim --workload string but FILE.py:FACTORY
  [grid]                              # Arch fields or dotted sub-fields; the cartesian product
  rows = [64, 128]
  dataflow = ["ws", "os", "is"]
  "bits.psum_buffer" = [8, 16, 32]
  [derived]                           # optional: keys computed from others (docs/ppa.md)
  cols = "rows"
  "sram_kib.filter" = "sram_kib.ifmap / 2"

A multi-core arch (quad128, hetero4, tpu_v4 or a TOML with [[core]] tables) also takes the chip's keys:
  "chip.mac_cores" = [1, 2, 4]        # chip.objective, chip.layer_cores, interconnect.*, shared_memory.*, dram.*, bus.*
  interconnect.bandwidth_bytes_per_cycle = [16.0, 64.0]
  (other keys set every MAC core; each point runs the multi-core schedule search; docs/multicore.md)

search instead of the whole grid: --search nsga2|tpe --budget N --seed S [--objectives energy,latency,area]

Points already in the database (same arch, workload and npukit version; files such as an energy table
by their bytes) are not recomputed, so a killed sweep resumes where it stopped. A point the simulator
refuses stops the sweep with one line naming it, and none of that run's points is kept.

backends (same spec, same results, same database; the database stays on this machine):
  --workers N                local process pool (default: CPU count; 1 = in-process; at most 256)
  --dask-local N             a Dask LocalCluster of N worker processes on this machine
  --scheduler tcp://H:P      an existing Dask cluster; its workers need the same npukit version
"""
_COMMANDS = ("run", "export")


def _default_to_run(parser_cls: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """``parser_cls`` whose argument list gets ``run`` in front when it starts with neither a subcommand nor
    ``-h``: ``npukit sweep SPEC.toml ...`` is ``npukit sweep run SPEC.toml ...``."""

    class SweepParser(parser_cls):  # type: ignore[valid-type,misc]
        def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def,override]
            args = list(args or [])
            if not args:
                self.error("needs a sweep spec or a command: npukit sweep SPEC.toml [options] | "
                           "npukit sweep export DB [--csv OUT.csv]")
            if args[0] not in (*_COMMANDS, "-h", "--help"):
                args.insert(0, "run")
            return super().parse_known_args(args, namespace)

    return SweepParser


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run a design-space sweep (grid x workloads) into SQLite ('sweep export DB' writes CSV)",
        description="Design-space sweeps into SQLite.\n"
        "  npukit sweep [run] SPEC.toml [options]     run every point of a spec (run is the default)\n"
        "  npukit sweep export DB [--csv OUT.csv]     write every row of a sweep database to CSV\n"
        "See npukit sweep run --help and npukit sweep export --help.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    base = type(p)  # the CLI's one-line-error parser: the subcommands get it as it is
    p.__class__ = _default_to_run(base)
    sub = p.add_subparsers(dest="sweep_command", metavar="COMMAND", parser_class=base)
    sub.required = True
    r = sub.add_parser(
        "run",
        help="run a sweep spec into SQLite and CSV (the default command)",
        description="Run every point of a sweep spec (arch grid x workloads) on a process pool; each point\n"
        "becomes one SQLite row (compute_cycles, stall_cycles, total_cycles, utilization, energy per\n"
        "component in pJ, latency in s). 'npukit sweep SPEC.toml' is the same as 'npukit sweep run SPEC.toml'.",
        epilog=_SPEC_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("spec", metavar="SPEC.toml", help="sweep spec file")
    r.add_argument("--out", default="out/sweep", metavar="DIR", help="output folder for the defaults below (default out/sweep)")
    r.add_argument("--db", metavar="PATH", help="SQLite database (default DIR/sweep.sqlite); reused across runs")
    r.add_argument("--csv", metavar="PATH", help="CSV of this spec's points (default DIR/sweep.csv)")
    r.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes (default: CPU count; 1 = in-process; 1 to 256, no more than the points)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace a CSV that holds other points: another sweep's, or this spec's before a file it "
                   "names changed (default: refuse, exit 2)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    r.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="refuse grids with more points than N (default 1,000,000)")
    add_executor_arguments(r)
    from npukit.sweeps.search import add_search_arguments

    add_search_arguments(r)
    r.set_defaults(func=run)
    e = sub.add_parser(
        "export",
        help="write every row of a sweep database to CSV",
        description="Write every row of a sweep database (every spec run into it) to one CSV file.",
    )
    e.add_argument("db", metavar="DB", help="the .sqlite file npukit sweep wrote")
    e.add_argument("--csv", metavar="OUT.csv", help="CSV to write (default: DB with a .csv suffix)")
    e.add_argument("--overwrite", action="store_true", help="replace --csv even when it is not a sweep CSV")
    e.set_defaults(func=export)


def run(args: argparse.Namespace) -> int:
    """``npukit sweep [run] SPEC.toml``: every point of the spec into the database, then the CSV."""
    from npukit.sim.errors import ConfigError
    from npukit.sweeps import MAX_WORKERS

    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError(f"--workers must be 1 to {MAX_WORKERS} (this machine has {os.cpu_count() or 1} CPUs), "
                          f"got {args.workers}")

    from npukit.sweeps import MAX_POINTS, check_store, expand_points, load_sweep_spec

    limit = MAX_POINTS if args.max_points is None else args.max_points
    if limit < 1:
        raise ConfigError(f"--max-points must be a positive integer, got {limit}")
    from npukit.sim import check_out_dir, check_writable_file
    from npukit.sweeps.search import check_search_arguments

    check_search_arguments(args)
    spec = load_sweep_spec(args.spec, limit)  # the point limit first, before any per-value check
    points = expand_points(spec, limit)  # every point validated before anything is written
    out = check_out_dir(args.out)  # an empty --out is refused, not taken as the current folder
    # a bad --csv/--db fails now, not after every point is computed; an empty one is refused
    csv_path = check_writable_file(args.csv, "--csv") if args.csv is not None else out / "sweep.csv"
    db = check_writable_file(args.db, "--db") if args.db is not None else out / "sweep.sqlite"
    _not_the_database(csv_path, db)
    check_store(db, spec.multicore)  # a database not ours (or of the other kind) is refused read-only, before any folder
    if not args.overwrite:
        _refuse_foreign_csv(csv_path, points)
    if args.workers is not None and args.search is None:  # no more processes than points
        args.workers = min(args.workers, max(1, len(points)))
    executor = executor_from_args(args)  # Dask: scheduler reached and versions checked before anything is written
    try:
        with _removed_if_left_empty(db, {db.parent, csv_path.parent}):
            if args.search is not None:
                return _run_search(args, spec, executor, db, csv_path)
            return _run(args, spec, points, executor, db, csv_path)
    finally:
        executor.close()


@contextlib.contextmanager
def _removed_if_left_empty(db: Path, folders: set[Path]) -> Iterator[None]:
    """A run that fails before its first point is stored (a model error on the first batch, an interrupt) removes the
    database it created and the folders it made for it, so that nothing is left half-written; a database that existed
    before, or holds points, stays."""
    new = not db.exists()
    made = [f for f in sorted(folders, key=lambda p: len(p.parts)) if not f.exists()]
    try:
        yield
    except BaseException:
        if new and db.is_file() and _no_points(db):
            for extra in ("", "-wal", "-shm", "-journal"):
                db.with_name(db.name + extra).unlink(missing_ok=True)
            for f in reversed(made):
                with contextlib.suppress(OSError):
                    f.rmdir()  # only if empty
        raise


def _no_points(db: Path) -> bool:
    from npukit.sim.errors import ConfigError
    from npukit.sweeps import read_rows

    try:
        return not read_rows(db)
    except ConfigError:  # not a usable sweep database: leave it be
        return False


def _not_the_database(csv_path: Path, db: Path) -> None:
    """ConfigError when ``csv_path`` is the database ``db`` or one of SQLite's files beside it (its write-ahead log
    holds committed points until a checkpoint): writing the CSV there would destroy the points."""
    from npukit.sim.errors import ConfigError

    target = csv_path.resolve()
    base = db.resolve()
    if target == base or target in {base.with_name(base.name + x) for x in ("-wal", "-shm", "-journal")}:
        raise ConfigError(f"--csv '{csv_path}' is the sweep database '{db}' or one of its files; pass another file path")


def _refuse_other_file(csv_path: Path) -> None:
    """ConfigError when ``csv_path`` exists and is not a sweep CSV (its header has no ``key`` column): ``sweep
    export`` replaces an earlier export, never another file, unless ``--overwrite``."""
    import csv

    from npukit.sim.errors import ConfigError

    if not csv_path.exists():
        return
    try:
        with csv_path.open(newline="", encoding="utf-8") as f:
            head = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        head = []
    if "key" not in head:
        raise ConfigError(f"refusing to overwrite '{csv_path}': it is not a sweep CSV; pass another --csv or --overwrite")


def _refuse_foreign_csv(csv_path: Path, points: list[SweepPoint]) -> None:
    """ConfigError when ``csv_path`` exists and holds a point the spec does not give now (a key not among the
    ``points``'): rerunning a spec rewrites its own CSV, another spec into the same --out never replaces it silently.
    A CSV of as many rows over the same workloads is taken for this spec's before a file it names changed (an arch or
    energy table file, a workload file; or the npukit version), and the message says so."""
    import csv
    from collections import Counter

    from npukit.sim.errors import ConfigError

    if not csv_path.is_file():
        return
    keys = {p.key for p in points}
    try:
        with csv_path.open(newline="", encoding="utf-8") as f:
            rows = [(row.get("key"), row.get("workload")) for row in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error):
        rows = [(None, None)]
    if all(k in keys for k, _ in rows):
        return
    if Counter(w for _, w in rows) == Counter(p.workload for p in points):
        raise ConfigError(f"refusing to overwrite '{csv_path}': its points changed since it was written (a file the "
                          "spec names, such as an arch, energy table or workload file, or the grid or the npukit "
                          "version changed); pass --overwrite to replace it, or --csv PATH or another --out to keep it")
    raise ConfigError(f"refusing to overwrite '{csv_path}': it holds another sweep's points (or this spec's before its "
                      "grid or a file it names changed); pass --csv PATH, another --out, or --overwrite")


def _run(
    args: argparse.Namespace, spec: SweepSpec, points: list[SweepPoint], executor: Executor, db: Path, csv_path: Path
) -> int:
    from npukit.sim import prepare_out_dir
    from npukit.sweeps import export_csv, run_points

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


def _run_search(args: argparse.Namespace, spec: SweepSpec, executor: Executor, db: Path, csv_path: Path) -> int:
    """Run the search into ``db``, then the CSV of the points its trials simulated."""
    from npukit.sim import prepare_out_dir
    from npukit.sweeps import export_csv
    from npukit.sweeps.search import config_points, run_search

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


def export(args: argparse.Namespace) -> int:
    """``npukit sweep export DB``: every row of the database into one CSV file."""
    from npukit.sim import check_writable_file
    from npukit.sim.errors import ConfigError
    from npukit.sweeps import export_csv

    db = Path(args.db)
    if db.is_dir():
        raise ConfigError(f"sweep database '{db}' is a folder; pass the .sqlite file npukit sweep wrote")
    if not db.is_file():
        raise ConfigError(f"sweep database '{db}' does not exist; pass the .sqlite file npukit sweep wrote")
    csv_path = check_writable_file(db.with_suffix(".csv") if args.csv is None else args.csv, "--csv")
    _not_the_database(csv_path, db)
    if not args.overwrite:
        _refuse_other_file(csv_path)
    # export_csv reads the database (read-only) before it creates the CSV's folder or any file
    export_csv(db, csv_path)
    print(f"wrote {csv_path}")
    return 0
