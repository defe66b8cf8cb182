"""Design-space sweeps: (grid of arch overrides) x (workloads) -> one SQLite row per point.

A sweep file::

    [sweep]
    name = "psum-study"                       # optional, default: the file's stem
    arch = "npu128"                           # built-in, .toml or SCALE-Sim .cfg (relative to this file)
    workloads = ["resnet18", "gemm:M=512,N=512,K=512"]   # any load_workload string but code forms
    [grid]                                    # Arch fields or dotted sub-fields -> lists of values
    rows = [64, 128]
    dataflow = ["ws", "os", "is"]
    "bits.psum_buffer" = [8, 16, 32]

On a multi-core ``arch`` (a preset or a TOML with ``[[core]]`` tables) the grid may also vary the chip
(``chip.mac_cores``, ``interconnect.*``, ``shared_memory.*``, ``dram.*``, ...: :meth:`MultiCoreArch.with_`), each point
is :func:`~npukit.sim.multicore_sim.simulate_multicore` with its schedule search, and the database holds such points
only (:func:`multicore_point_metrics`).

:func:`run_sweep` validates every point first (nothing is written for a bad grid), skips points
whose key is already in the database, runs the rest on an :class:`Executor` in chunks (workers
compute, this process alone writes SQLite) and commits each finished chunk in its own transaction.
The numbers of a row are those of :func:`~npukit.sim.simulator.simulate` on the same point. A point whose
simulation refuses its input (a :class:`ConfigError` such as a cycle count that overflows) stops the run with one
:class:`ConfigError` line naming its grid values and workload, and the rows this run had stored are removed again, so
the database holds what it held before (an interrupted run, or lost Dask workers, keep theirs: rerun to resume).

Backends (:func:`make_executor`): in-process, the local process pool (default), or Dask
distributed (an existing scheduler ``tcp://HOST:PORT`` or a LocalCluster of N processes); the
same spec gives the same rows on each. A point's key hashes its full arch, its workload (the bytes of its
topology/ONNX/config file, and a traced model's layers) and the npukit version, so rows of another npukit version
(or of another trace) are never reused; an energy table file is keyed by its bytes, not its path. Each workload and
energy table file is loaded once per distinct spec; workers receive them with their chunk, never a path to load again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sim.arch import Arch
from ..sim.energy import BUILTIN_TABLES, EnergyTable, load_table
from ..sim.errors import ConfigError, NpukitError
from ..sim.multicore import MultiCoreArch
from ..sim.multicore_sim import MultiCoreResult, simulate_multicore
from ..sim.simulator import COMPONENTS, TRAFFIC_COLUMNS, SimResult, simulate
from ..sim.workload import Workload
from ..workloads import load_workload
from ._exec import MAX_WORKERS, Executor, LocalPoolExecutor, SerialExecutor, local_executor, make_executor
from ._spec import (
    MAX_POINTS,
    SweepPoint,
    SweepSpec,
    column_name,
    expand_points,
    grid_keys,
    load_sweep_spec,
    parse_sweep_spec,
    point_label,
)
from ._store import SweepStore, base_columns, check_store, export_csv, point_columns, read_rows
from .executor_flags import add_executor_arguments, check_scheduler_address, executor_from_args

__all__ = [
    "add_executor_arguments", "check_scheduler_address", "executor_from_args",
    "MAX_WORKERS", "Executor", "LocalPoolExecutor", "SerialExecutor", "local_executor", "make_executor",
    "MAX_POINTS", "SweepPoint", "SweepSpec", "column_name", "expand_points", "grid_keys", "load_sweep_spec", "parse_sweep_spec",
    "SweepStore", "base_columns", "check_store", "export_csv", "read_rows",
    "SweepSummary", "multicore_point_metrics", "point_metrics", "run_points", "run_sweep",
]

Progress = Callable[[int, int], None]


@dataclass
class SweepSummary:
    """What a sweep run did. ``keys``: every point's key in grid order; ``layer_points``: layers
    simulated now (points x layers); ``seconds``: wall time of the run."""

    name: str
    db: Path
    total: int
    computed: int
    present: int
    layer_points: int
    seconds: float
    keys: list[str] = field(default_factory=list)

    def line(self) -> str:
        rate = self.layer_points / self.seconds if self.seconds > 0 else 0.0
        return (
            f"sweep '{self.name}': {self.total} points, {self.computed} computed now, {self.present} already present "
            f"({self.layer_points} layer-points in {self.seconds:.2f} s, {rate:,.0f} layer-points/s)"
        )


def point_metrics(result: SimResult) -> dict[str, Any]:
    """The result columns of one simulated point (cycles in clock cycles, energies in pJ, latency in s)."""
    compute = result.compute_cycles
    row: dict[str, Any] = {
        "layers": len(result.layers),
        "macs": result.macs,
        "compute_cycles": compute,
        "stall_cycles": result.stall_cycles,
        "total_cycles": result.total_cycles,
        "utilization": result.utilization,
        "energy_total_pj": float(result.energy_pj),  # plain floats: the property returns a callable float
        "energy_onchip_pj": float(result.energy_onchip_pj),
    }
    for comp, pj in result.energy_by_component().items():
        row[f"energy_{comp}_pj"] = pj
    for col in TRAFFIC_COLUMNS:
        row[col] = sum(r.traffic_bytes.get(col, 0.0) for r in result.layers)
    row["latency_s"] = float(result.latency_s)
    row.update({k: v for k, v in result.ledger.meta.get("ppa", {}).items() if not isinstance(v, dict)})
    return row


def multicore_point_metrics(result: MultiCoreResult) -> dict[str, Any]:
    """The result columns of one point on a multi-core chip (:data:`~npukit.sweeps._store.MULTICORE_RESULT_COLUMNS`):
    cycles of the critical path (``compute_cycles`` its compute, ``stall_cycles`` the rest: DRAM stalls, vector ops'
    and interconnect waits), ``utilization`` = MACs / (all MAC cores' PEs x compute cycles), energies in pJ (a
    component of a core with other buffers as ``energy_ofmap_sram_core3_pj``), the area and power columns, the
    searched schedule, interconnect bytes and share of the latency, DRAM bytes."""
    compute = sum(r["compute_cycles"] for r in result.rows())
    total = result.total_cycles
    comps = {k: v for k, v in result.energy_components.items() if k != "total"}
    row: dict[str, Any] = {
        "layers": len(result.rows()), "macs": result.macs, "compute_cycles": round(compute),
        "stall_cycles": round(total) - round(compute), "total_cycles": round(total),
        "utilization": result.macs / (result.arch.peak_macs_per_cycle * compute) if compute else 0.0,
        "energy_total_pj": float(result.energy_pj),
        "energy_onchip_pj": float(result.energy_pj) - comps.get("dram", 0.0),
    }
    for comp, pj in comps.items():
        key = f"energy_{re.sub(r'[^0-9A-Za-z_]', '_', comp)}_pj"
        row[key] = row.get(key, 0.0) + pj
    for comp in COMPONENTS:  # every core component's column, 0 where nothing was recorded
        row.setdefault(f"energy_{comp}_pj", 0.0)
    row["latency_s"] = float(result.latency_s)
    ppa = result.ledger.meta.get("ppa")
    if not ppa:  # a loop-nest core (a Stream or ZigZag core file): no area model, so no row
        raise ConfigError(f"multi-core arch '{result.arch.name}' has no area model (a loop-nest core); a sweep row "
                          "needs its area and power")
    row.update({k: v for k, v in ppa.items() if not isinstance(v, dict)})
    row.update(schedule=result.schedule.label, interconnect_bytes=result.interconnect_bytes,
               interconnect_share=result.interconnect_share, dram_bytes=sum(r["dram_bytes"] for r in result.rows()))
    return row


# ------------------------------------------------------------------------------ worker side
#: traced workloads (id -> Workload), the (key, arch, workload id) items, energy table files (path -> EnergyTable)
Chunk = tuple[dict[str, Workload], list[tuple[str, Arch | MultiCoreArch, str]], dict[str, EnergyTable]]


class _PointFailed(ConfigError):
    """A point's simulation refused its input (worker side): ``key`` is the point's, the message the simulator's.
    :func:`run_points` turns it into a :class:`ConfigError` naming the point's grid values."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:  # pickles across processes with its key
        return type(self), (self.key, str(self))


def _compute_chunk(chunk: Chunk) -> list[tuple[str, dict[str, Any]]]:
    """Simulate the (key, arch, workload id) items of a chunk on the traced workloads and energy tables it carries;
    runs inside a worker, which never loads or traces a workload or reads a table file itself. A point the simulator
    refuses (:class:`NpukitError`) raises :class:`_PointFailed` with its key."""
    workloads, items, tables = chunk
    out = []
    for key, arch, wl in items:
        t0 = time.perf_counter()
        table = None if arch.energy_table in BUILTIN_TABLES else tables[arch.energy_table]
        try:
            if isinstance(arch, MultiCoreArch):
                row = multicore_point_metrics(simulate_multicore(workloads[wl], arch, table=table))
            else:
                row = point_metrics(simulate(workloads[wl], arch, table=table))
        except NpukitError as exc:
            raise _PointFailed(key, str(exc)) from None
        row["wall_s"] = time.perf_counter() - t0
        out.append((key, row))
    return out


# ------------------------------------------------------------------------------ parent side
def _chunks(points: Sequence[SweepPoint], workers: int) -> Iterator[Chunk]:
    """Chunks of about ``total layers / (8 x workers)`` layers (20..2000), so IPC stays small next
    to compute while every worker gets several chunks. Each chunk carries the traced workloads and energy table files
    its points use (a point without them, built by hand, has them loaded here once), so workers receive workloads
    and tables, not specs or paths."""
    total = sum(p.layers for p in points)
    target = min(2000, max(20, -(-total // (8 * workers))))
    loaded: dict[str, Workload] = {}
    tables: dict[str, EnergyTable] = {}
    chunk: Chunk = ({}, [], {})
    layers = 0
    for p in points:
        wl = p.loaded if p.loaded is not None else loaded.get(p.workload_path)
        if wl is None:
            wl = loaded[p.workload_path] = load_workload(p.workload_path)
        chunk[0][p.workload_path] = wl
        name = p.arch.energy_table
        if name not in BUILTIN_TABLES:
            table = p.table if p.table is not None else tables.get(name)
            chunk[2][name] = tables[name] = table if table is not None else load_table(name)
        chunk[1].append((p.key, p.arch, p.workload_path))
        layers += p.layers
        if layers >= target:
            yield chunk
            chunk, layers = ({}, [], {}), 0
    if chunk[1]:
        yield chunk


def run_points(
    points: Sequence[SweepPoint],
    db: str | Path,
    executor: Executor | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    name: str = "sweep",
) -> SweepSummary:
    """Compute the points missing from ``db`` and insert them; see :func:`run_sweep`."""
    t0 = time.perf_counter()
    own = executor is None
    ex = executor if executor is not None else local_executor(workers)  # checks workers before db is touched
    computed = 0
    try:
        with SweepStore(db, any(isinstance(p.arch, MultiCoreArch) for p in points)) as store:
            have = store.keys()
            missing = [p for p in points if p.key not in have]
            by_key = {p.key: p for p in missing}
            if progress is not None:
                progress(0, len(missing))
            stored: list[str] = []  # keys this run inserted (none of them was present before)
            try:
                if missing:
                    for results in ex.map_unordered(_compute_chunk, _chunks(missing, ex.workers)):
                        rows = [point_columns(by_key[k]) | metrics for k, metrics in results]
                        store.insert(rows)
                        stored += [r["key"] for r in rows]
                        computed += len(rows)
                        if progress is not None:
                            progress(len(rows), len(missing))
            except _PointFailed as exc:  # bad input: leave the database as it was (an interrupt keeps its rows)
                store.delete(stored)
                p = by_key.get(exc.key)
                where = f"grid point ({point_label(p.grid)}), workload {p.workload!r}" if p is not None else "a point"
                raise ConfigError(f"{where}: {exc}; no point of this run was stored") from None
    finally:
        if own:
            ex.close()
    return SweepSummary(
        name=name,
        db=Path(db),
        total=len(points),
        computed=computed,
        present=len(points) - len(missing),
        layer_points=sum(p.layers for p in missing),
        seconds=time.perf_counter() - t0,
        keys=[p.key for p in points],
    )


def run_sweep(
    spec: SweepSpec | str | Path,
    db: str | Path,
    workers: int | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> SweepSummary:
    """Run a sweep (a :class:`SweepSpec` or the path of its TOML file) into the SQLite file ``db``.

    Every point is validated before ``db`` is touched (:class:`ConfigError` naming the key). Points
    already in ``db`` are skipped. ``workers`` (default ``os.cpu_count()``; 1 runs in-process)
    picks the local backend unless ``executor`` is given (e.g. ``make_executor(dask_local=2)`` or
    ``make_executor(scheduler="tcp://HOST:PORT")``; the caller closes it). ``progress(n, total)`` is called with
    ``(0, missing)`` first, then with the points stored by each chunk.
    """
    if not isinstance(spec, SweepSpec):
        spec = load_sweep_spec(spec)
    points = expand_points(spec)
    return run_points(points, db, executor=executor, workers=workers, progress=progress, name=spec.name)
