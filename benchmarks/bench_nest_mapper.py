"""Benchmark: the loop-nest mapper's time per network and architecture (``simulate_nest``, no cache).

Every digital accelerator ZigZag 3.9.1 ships (its hardware YAML and mapping YAML, as
``bench_vs_zigzag.py --all`` pairs them) x its bundled resnet18, mobilenetv2 and alexnet ONNX files:
the CPU seconds of mapping every conv/GEMM layer in one process (``simulate_nest(..., cache=False)``,
the in-process layer cache cleared before each run) for each objective (energy, latency, EDP), the best
of ``--repeats`` runs (and the worst over the objectives), with the layer count, the distinct layer
shapes and the loop orders of LOMA's space. The ONNX lowering and the imports are outside the timing
(``bench_vs_zigzag.py --all`` times the whole process). Target: each network maps in at most 0.5 CPU
second per architecture and objective. CPU seconds move with the machine's load: the ``uptime`` load
average is printed with the table. ``--check-exhaustive`` also checks (untimed) that the pruned search
finds the best score of ``map_layer(..., exhaustive=True)`` for every distinct layer shape, architecture
and objective.

ZigZag's bundled files live in its own virtualenv (``.peers/zigzag``, see ``bench_vs_zigzag.py
--install``); without it the benchmark says so and exits 0.

    python benchmarks/bench_nest_mapper.py [--out out/bench] [--repeats 3] [--objectives energy,latency,edp]
                                          [--check-exhaustive] [--zigzag-inputs DIR]
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import sys
import time
from pathlib import Path

from npukit.sim import format_table, prepare_out_dir, write_csv

ARCHS = ("tpu_like", "edge_tpu_like", "eyeriss_like", "meta_prototype", "tesla_npu_like", "ascend_like", "gemm_l1_l3")
WORKLOADS = ("resnet18", "mobilenetv2", "alexnet")
MAPPING = {"eyeriss_like": "default", "meta_prototype": "meta_prototype_like"}
TARGET_S = 0.5
OBJECTIVES = ("energy", "latency", "edp")


def _inputs(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    found = sorted(glob.glob(".peers/zigzag/lib/python*/site-packages/zigzag/inputs"))
    return Path(found[-1]) if found else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--repeats", type=int, default=3, help="runs per pair (default 3)")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES), help="comma-separated (default: all three)")
    ap.add_argument("--check-exhaustive", action="store_true",
                    help="also check, per distinct layer shape and objective, that the pruned search finds the best "
                         "score of map_layer(..., exhaustive=True) (slower: about 2 minutes)")
    ap.add_argument("--zigzag-inputs", help="ZigZag's inputs folder (default: found in .peers/zigzag)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    objectives = args.objectives.split(",")
    if not objectives or any(o not in OBJECTIVES for o in objectives):
        ap.error(f"--objectives: each one of {', '.join(OBJECTIVES)}")
    inputs = _inputs(args.zigzag_inputs)
    if inputs is None or not (inputs / "workload" / "resnet18.onnx").is_file():
        print("ZigZag 3.9.1's bundled inputs are not installed: skipped (bench_vs_zigzag.py --install)")
        return 0
    import numpy  # noqa: F401 - imported before the timing, as the ONNX lowering imports it in a cold run

    import npukit.sim.loopnest as loopnest
    import npukit.sim.nest_mapper as nest_mapper
    from npukit.sim.nest_sim import nest_layer, parse_zigzag_spec, simulate_nest, spatial_for
    from npukit.sim.workload import Layer
    from npukit.workloads import onnx_workload

    rows = []
    mismatches = 0
    for wl in WORKLOADS:
        workload = onnx_workload(inputs / "workload" / f"{wl}.onnx")
        for arch in ARCHS:
            hw, spatial = parse_zigzag_spec(f"zigzag:{inputs}/hardware/{arch}.yaml,"
                                            f"{inputs}/mapping/{MAPPING.get(arch, arch)}.yaml")
            layers = [ly for ly in workload.layers if isinstance(ly, Layer)]
            shapes, orders = {}, 0
            for ly in layers:
                nl = nest_layer(ly)
                if nl.key() not in shapes:
                    shapes[nl.key()] = (nl, ly)
                    sm = nest_mapper.clip_spatial(hw, nl, spatial_for(spatial, ly))
                    lpfs = nest_mapper.temporal_lpfs(nl, sm)
                    sym = nest_mapper.symmetric_pairs(nl, lpfs) if nest_mapper._symmetric_spatial(sm) else []
                    orders += sum(1 for _ in nest_mapper._orders(lpfs, sym))
            row = {"arch": arch, "workload": wl, "layers": len(layers), "shapes": len(shapes), "orders": orders}
            worst = 0.0
            for objective in objectives:
                times = []
                for _ in range(args.repeats):
                    nest_mapper._CACHE.clear()
                    loopnest._CTX.clear()
                    gc.collect()
                    t0 = time.process_time()
                    simulate_nest(workload, hw, spatial, objective=objective, cache=False)
                    times.append(time.process_time() - t0)
                row[f"{objective}_cpu_s"] = round(min(times), 3)
                worst = max(worst, max(times))
            row["worst_cpu_s"] = round(worst, 3)
            row["target"] = "met" if all(row[f"{o}_cpu_s"] <= TARGET_S for o in objectives) else "NOT met"
            if args.check_exhaustive:
                same = [_score(nest_mapper.map_layer(hw, nl, spatial_for(spatial, ly), o).cost, o)
                        == _score(nest_mapper.map_layer(hw, nl, spatial_for(spatial, ly), o, exhaustive=True).cost, o)
                        for nl, ly in shapes.values() for o in objectives]
                row["pruned_eq_exhaustive"] = f"{sum(same)}/{len(same)}"
                mismatches += len(same) - sum(same)
            rows.append(row)
            print(format_table(list(rows[-1]), [list(rows[-1].values())]), flush=True)
    load = os.getloadavg()
    print(f"\nmapping CPU seconds per network, architecture and objective (best of {args.repeats}; worst: of all "
          f"runs; load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    for wl in WORKLOADS:
        v = [r[f"{o}_cpu_s"] for r in rows if r["workload"] == wl for o in objectives]
        print(f"{wl}: {min(v):.2f}-{max(v):.2f} CPU s (best of {args.repeats}); target <= {TARGET_S} s: "
              f"{sum(x <= TARGET_S for x in v)} of {len(v)} (architecture x objective)")
    out = prepare_out_dir(args.out)
    if args.check_exhaustive:
        print(f"pruned search == exhaustive (best score per distinct layer shape and objective): "
              f"{'all' if not mismatches else f'{mismatches} NOT'} equal")
    print(f"wrote {write_csv(out / 'nest_mapper.csv', rows)}")
    return 0 if all(r["target"] == "met" for r in rows) and not mismatches else 1


def _score(cost, objective: str) -> float:
    return {"energy": cost.energy_pj, "latency": cost.cycles, "edp": cost.energy_pj * cost.cycles}[objective]


if __name__ == "__main__":
    sys.exit(main())
