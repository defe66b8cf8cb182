"""Throughput of ``npukit sweep``: layer-points simulated and stored per second.

A 240-point grid over ResNet-18 (21 layers each: 5,040 layer-points) is swept into a fresh SQLite
file with workers=1 (in-process) and workers=2 (process pool, spawn start-up included), then
rerun with everything present (the resume overhead), once with the fixed mapping (SCALE-Sim's loop
order) and once with the mapping search (about 20 candidate mappings priced per layer). Target:
>= 2,000 layer-points/s with the fixed mapping; the search's rate is reported beside it.

    python benchmarks/bench_sweep.py [--out out/bench] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from npukit.sim import format_table, prepare_out_dir, write_csv
from npukit.sweeps import expand_points, parse_sweep_spec, run_points

TARGET = 2000.0  # layer-points per second

SPEC = {
    "sweep": {"name": "bench", "arch": "npu128", "workloads": ["resnet18"]},
    "grid": {
        "rows": [32, 64, 128, 256],
        "dataflow": ["ws", "os", "is"],
        "bits.psum_buffer": [8, 16, 24, 32],
        "sram_kib.psum": [64, 256, 1024, 4096, 16384],
    },
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/bench", help="folder for bench_sweep.csv (default out/bench)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per setting; the best is reported (default 3)")
    args = ap.parse_args(argv)
    out = prepare_out_dir(args.out)
    rows = []
    for mapping in ("fixed", "search"):
        spec = {**SPEC, "grid": {**SPEC["grid"], "mapping": [mapping]}}
        points = expand_points(parse_sweep_spec(spec, origin="bench"))
        layer_points = sum(p.layers for p in points)
        rows += _bench(points, args.repeat, mapping)
    print(f"sweep benchmark: {len(points)} points x resnet18 ({layer_points} layer-points) per mapping mode; "
          f"target >= {TARGET:,.0f} layer-points/s with the fixed mapping")
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    path = write_csv(out / "bench_sweep.csv", rows)
    print(f"wrote {path}")
    worst = min(r["layer_points_per_s"] for r in rows if r["layer_points"] and r["mapping"] == "fixed")
    verdict = "PASS" if worst >= TARGET else "BELOW TARGET"
    print(f"{verdict}: slowest fresh run with the fixed mapping {worst:,.0f} layer-points/s")
    return 0


def _bench(points: list, repeat: int, mapping: str) -> list[dict]:
    rows = []
    for workers in (1, 2):
        best = None
        for _ in range(max(1, repeat)):
            with tempfile.TemporaryDirectory() as tmp:
                db = Path(tmp) / "bench.sqlite"
                s = run_points(points, db, workers=workers)
                assert s.computed == len(points), s.line()
                again = run_points(points, db, workers=workers)
                assert again.computed == 0, again.line()
            if best is None or s.seconds < best[0].seconds:
                best = (s, again)
        assert best is not None
        s, again = best
        rows.append({
            "mapping": mapping, "case": f"fresh, workers={workers}", "workers": workers, "points": s.total,
            "layer_points": s.layer_points,
            "seconds": round(s.seconds, 4), "layer_points_per_s": round(s.layer_points / s.seconds, 1),
        })
        rows.append({
            "mapping": mapping, "case": f"rerun (all present), workers={workers}", "workers": workers, "points": again.total,
            "layer_points": 0, "seconds": round(again.seconds, 4), "layer_points_per_s": 0.0,
        })
    return rows


if __name__ == "__main__":
    sys.exit(main())
