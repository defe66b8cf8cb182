"""Benchmark: ``npukit report`` on real models, per grouping: time, HTML size and the largest figure.

Makes each ledger once with ``npukit sim`` (Llama-3.1-8B decode, one token on a 2,048-token KV cache;
Llama-3.1-8B prefill of 2,048 tokens; ResNet-18), then runs ``npukit report LEDGER --group G`` as a
whole process (interpreter start, imports, figures, files: what a user feels) ``--repeats`` times per
grouping (layer, block, op) and prints min / median / max wall time, the least CPU time (user +
system: what the report costs when other processes share the machine), the size of report.html and the
largest PNG (pixels). Targets: under 10 s and report.html under 1 MB for every row; no figure wider
than 1,400 px or higher than 1,600 px. The spread (max / min) is printed so a noisy machine shows; on a
shared machine the wall time includes waiting for a CPU, so the target is also judged on CPU time.

    python benchmarks/bench_report.py [--out out/bench] [--repeats 3] [--cases llama-decode,llama-prefill,resnet18]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "llama-decode": "llama-3.1-8b:phase=decode,kv=2048",
    "llama-prefill": "llama-3.1-8b:seq=2048",
    "resnet18": "resnet18",
}
GROUPS = ("layer", "block", "op")
TARGET_S, TARGET_HTML_BYTES = 10.0, 1_000_000


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    return struct.unpack(">II", head[16:24])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    args = ap.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or args.repeats < 1:
        print(f"bench_report: unknown case(s) {', '.join(unknown)} or --repeats < 1", file=sys.stderr)
        return 2
    exe = str(Path(sys.executable).with_name("npukit"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="npukit_bench_report_") as tmp:
        for case in cases:
            sim_dir = Path(tmp) / case
            subprocess.run([exe, "sim", "--workload", CASES[case], "--out", str(sim_dir), "--quiet"], check=True,
                           capture_output=True)
            ledger = next(sim_dir.glob("*.ledger.json"))
            layers = len(json.loads(ledger.read_text())["layers"])
            for group in GROUPS:
                times, cpu = [], []
                for k in range(args.repeats):
                    out = Path(tmp) / f"r_{case}_{group}_{k}"
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.perf_counter()
                    subprocess.run([exe, "report", str(ledger), "--group", group, "--out", str(out)], check=True,
                                   capture_output=True)
                    times.append(time.perf_counter() - t0)
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
                pngs = [png_size(p) for p in out.glob("*.png")]
                html = (out / "report.html").stat().st_size
                rows.append({
                    "case": case, "layers": layers, "group": group, "repeats": args.repeats,
                    "min_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
                    "max_s": round(max(times), 3), "spread": round(max(times) / min(times), 2),
                    "cpu_min_s": round(min(cpu), 3),
                    "html_bytes": html, "figures": len(pngs),
                    "max_width_px": max(w for w, _ in pngs), "max_height_px": max(h for _, h in pngs),
                    "ok": max(times) < TARGET_S and html < TARGET_HTML_BYTES,
                    "cpu_ok": min(cpu) < TARGET_S and html < TARGET_HTML_BYTES,
                })
                r = rows[-1]
                print(f"{case:14s} {layers:5d} layers  --group {group:5s}  {r['min_s']:6.2f} / {r['median_s']:6.2f} / "
                      f"{r['max_s']:6.2f} s (min/median/max, spread {r['spread']:.2f}x), cpu {r['cpu_min_s']:5.2f} s  "
                      f"html {html / 1e3:7.1f} kB  "
                      f"largest figure {r['max_width_px']}x{r['max_height_px']} px  "
                      f"{'ok' if r['ok'] else 'MISSES TARGET'} (on CPU time: {'ok' if r['cpu_ok'] else 'misses'})",
                      flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench_report.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
