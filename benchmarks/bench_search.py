"""Search vs the exhaustive grid: Pareto hypervolume reached against evaluations.

The space (10,800 configurations, each simulated on ResNet-18 and one Llama-3-8B prefill layer at
2,048 tokens): rows and cols in {16, 32, 64, 128, 256}, dataflow ws/os/is, ifmap (= filter = ofmap)
SRAM in {128, 512, 2048, 8192} KiB, psum buffer in {64, 256, 1024, 4096} KiB, DRAM bandwidth
{16, 64, 256} bytes/cycle and psum-buffer width {16, 24, 32} bits. Objectives (minimised): energy
(pJ, dynamic + static, summed over both workloads), latency (s, summed) and area (mm^2).

The exhaustive grid is swept once into ``--out``/bench_search.sqlite (kept: a rerun only computes what
is missing); every search runs on the same database (its points are then cached, so a search's cost is
its number of trials = configurations evaluated). Hypervolume: each objective in log10, normalised to
[0, 1] by the grid's own minimum and maximum, reference point 1.1 in each; a search's hypervolume after
n trials is that of the first n trials' points, as a fraction of the whole grid's. Target: >= 95 % of
the exhaustive hypervolume with <= 5 % of the evaluations (540 trials).

That space is ``--full`` (the exhaustive grid alone takes many minutes on 2 cores). The default is a reduced
space of the same kind for a run of a few minutes: rows, cols {16, 64, 256}, SRAM {128, 2048} KiB, psum buffer
{64, 1024} KiB, DRAM {16, 256} bytes/cycle, width {16, 32} bits (432 configurations, budget 5 % = 22 trials).
Each search runs once per seed; the spread over seeds (min / median / max hypervolume) is printed per method.

    python benchmarks/bench_search.py [--out out/bench] [--full] [--workers 2] [--seeds 0,1,2] [--budget N]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from npukit.benchmarks._timing import spread
from npukit.sim import format_table, prepare_out_dir, write_csv
from npukit.sweeps import expand_points, parse_sweep_spec, read_rows, run_points
from npukit.sweeps.search import objective_values, run_search

SPEC: dict[str, Any] = {
    "sweep": {"name": "bench-search", "arch": "npu128",
              "workloads": ["resnet18", "llama3-8b-layer:seq=2048,phase=prefill"]},
    "grid": {
        "rows": [16, 32, 64, 128, 256],
        "cols": [16, 32, 64, 128, 256],
        "dataflow": ["ws", "os", "is"],
        "sram_kib.ifmap": [128, 512, 2048, 8192],
        "sram_kib.psum": [64, 256, 1024, 4096],
        "dram_bandwidth_bytes_per_cycle": [16, 64, 256],
        "bits.psum_buffer": [16, 24, 32],
    },
    "derived": {"sram_kib.filter": "sram_kib.ifmap", "sram_kib.ofmap": "sram_kib.ifmap"},
}
SMALL_GRID: dict[str, list[Any]] = {
    "rows": [16, 64, 256], "cols": [16, 64, 256], "dataflow": ["ws", "os", "is"], "sram_kib.ifmap": [128, 2048],
    "sram_kib.psum": [64, 1024], "dram_bandwidth_bytes_per_cycle": [16, 256], "bits.psum_buffer": [16, 32],
}
OBJECTIVES = ("energy", "latency", "area")
TARGET_HV = 0.95
TARGET_FRACTION = 0.05


def pareto(points: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """The non-dominated points (minimisation), duplicates removed."""
    pts = sorted(set(points))
    front: list[tuple[float, ...]] = []
    for p in pts:
        if not any(all(q[i] <= p[i] for i in range(len(p))) and q != p for q in front):
            front = [q for q in front if not (all(p[i] <= q[i] for i in range(len(p))) and p != q)] + [p]
    return front


def hv2(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Hypervolume of 2-D points below ``ref`` (minimisation)."""
    area, best_y = 0.0, ref[1]
    for x, y in sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1]):
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return area


def hv3(points: list[tuple[float, float, float]], ref: tuple[float, float, float]) -> float:
    """Hypervolume of 3-D points below ``ref``: slices along the third objective."""
    pts = sorted(p for p in pareto(points) if all(p[i] < ref[i] for i in range(3)))
    pts.sort(key=lambda p: p[2])
    total = 0.0
    for i, p in enumerate(pts):
        z_next = pts[i + 1][2] if i + 1 < len(pts) else ref[2]
        if z_next > p[2]:
            total += hv2([(q[0], q[1]) for q in pts[: i + 1]], (ref[0], ref[1])) * (z_next - p[2])
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/bench", help="folder for bench_search.csv and the cached grid (default out/bench)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the exhaustive grid (default 2)")
    ap.add_argument("--seeds", default="0,1,2", help="search seeds (default 0,1,2)")
    ap.add_argument("--budget", type=int, default=None, help="trials per search (default 5 %% of the grid: 540 with --full)")
    ap.add_argument("--full", action="store_true", help="the 10,800-configuration space (many minutes on 2 cores)")
    ap.add_argument("--methods", default="nsga2,tpe", help="searches to run (default nsga2,tpe)")
    args = ap.parse_args(argv)
    out = prepare_out_dir(args.out)
    db = out / "bench_search.sqlite"
    spec = parse_sweep_spec(SPEC if args.full else dict(SPEC, grid=SMALL_GRID), origin="bench_search")
    points = expand_points(spec)
    n_configs = len(points) // len(spec.workloads)
    if args.budget is None:
        args.budget = max(1, round(TARGET_FRACTION * n_configs))
    t0 = time.perf_counter()
    summary = run_points(points, db, workers=args.workers, name=spec.name)
    print(f"exhaustive grid: {n_configs:,} configurations x {len(spec.workloads)} workloads = {len(points):,} points; "
          f"{summary.computed:,} computed now, {summary.present:,} cached, {time.perf_counter() - t0:.1f} s")
    rows = {r["key"]: r for r in read_rows(db, [p.key for p in points])}
    by_cfg: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        by_cfg.setdefault(str(sorted(p.grid.items())), []).append(rows[p.key])
    grid_vals = [tuple(objective_values(rs, OBJECTIVES)) for rs in by_cfg.values()]
    lo = [min(math.log10(v[i]) for v in grid_vals) for i in range(3)]
    hi = [max(math.log10(v[i]) for v in grid_vals) for i in range(3)]

    def norm(v: tuple[float, ...]) -> tuple[float, float, float]:
        return tuple((math.log10(v[i]) - lo[i]) / ((hi[i] - lo[i]) or 1.0) for i in range(3))  # type: ignore[return-value]

    ref = (1.1, 1.1, 1.1)
    hv_grid = hv3([norm(v) for v in grid_vals], ref)
    print(f"exhaustive Pareto front: {len(pareto(grid_vals))} configurations, normalised hypervolume {hv_grid:.4f}")
    checkpoints = sorted({max(1, round(args.budget * f)) for f in (0.1, 0.2, 0.4, 0.6, 0.8, 1.0)})
    table = []
    for method in args.methods.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            t1 = time.perf_counter()
            s = run_search(spec, db, method, args.budget, seed, OBJECTIVES, workers=1, batch=8)
            secs = time.perf_counter() - t1
            vals = _trial_values(s.study, db)
            for c in checkpoints:
                frac = hv3([norm(v) for v in vals[:c]], ref) / hv_grid
                table.append({"method": method, "seed": seed, "evaluations": c,
                              "evaluations_pct": round(100 * c / n_configs, 2), "distinct_configs": len(set(vals[:c])),
                              "hypervolume_pct": round(100 * frac, 2), "search_s": round(secs, 1)})
    print(format_table(list(table[0]), [list(r.values()) for r in table]))
    path = write_csv(out / "bench_search.csv", table)
    print(f"wrote {path}")
    at_budget = [r for r in table if r["evaluations"] == args.budget]
    for method in args.methods.split(","):
        hv = spread([r["hypervolume_pct"] for r in at_budget if r["method"] == method])
        ok = hv.min >= 100 * TARGET_HV and args.budget <= TARGET_FRACTION * n_configs
        print(f"{'PASS' if ok else 'BELOW TARGET'} {method}: min / median / max over {hv.n} seeds {hv.min:.1f} / "
              f"{hv.median:.1f} / {hv.max:.1f} % of the exhaustive hypervolume with {args.budget} evaluations "
              f"({100 * args.budget / n_configs:.1f} % of {n_configs:,})")
        if hv.wide:
            print(f"warning: {method}: the hypervolume varies over {hv.ratio:.1f}x between seeds: one seed's number "
                  "is not representative")
    return 0


def _trial_values(study_name: str, db: Any) -> list[tuple[float, ...]]:
    """The objective values of a study's complete trials, in trial order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{db.resolve()}")
    done = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    return [tuple(t.values) for t in sorted(done, key=lambda t: t.number)]


if __name__ == "__main__":
    sys.exit(main())
