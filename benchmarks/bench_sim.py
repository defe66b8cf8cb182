"""Benchmark: ResNet-18 (224x224) on a 128x128 array, per dataflow.

Measures (1) in-process time of ``simulate`` (best of N repeats), (2) whole-process wall time of
``npukit sim --quiet`` (what a user feels: interpreter start, imports, simulation, writing files),
(3) that process's peak resident memory (ru_maxrss), for the fixed mapping (SCALE-Sim's loop order)
and the mapping search. Targets: whole process under 0.15 s per dataflow with the fixed mapping and
under 0.5 s with the search, under 300 MB. SCALE-Sim v3 needs 110-163 s and 2.9-5.1 GB for the same compute cycles
(docs/references.md, where the measurement is restated).

The processes run with Python's default bytecode cache (``__pycache__``, as a user's installation
has it after its first run), even where ``PYTHONDONTWRITEBYTECODE`` is set; ``--no-bytecode-cache``
measures every import compiled from source instead.

    python benchmarks/bench_sim.py [--out out/bench] [--repeats 20] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="compile every import from source (cold)")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="npukit_nopyc_")  # an empty cache: no .pyc read
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    from npukit.sim import load_arch, resnet18, simulate

    exe = str(Path(sys.executable).with_name("npukit"))
    rows = []
    for mapping, df in [(m, d) for m in ("fixed", "search") for d in ("ws", "os", "is")]:
        arch = load_arch("npu128").with_(dataflow=df, mapping=mapping)
        w = resnet18()
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            res = simulate(w, arch)
            best = min(best, time.perf_counter() - t0)
        wall = float("inf")
        for _ in range(3):  # best of 3 whole processes
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                pid = os.fork()
                if pid == 0:  # child: exec the CLI so ru_maxrss of the child is its own peak
                    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                    os.execve(exe, [exe, "sim", "--workload", "resnet18", "--dataflow", df, "--mapping", mapping,
                                    "--quiet", "--out", d], env)
                _, status, usage = os.wait4(pid, 0)
                wall = min(wall, time.perf_counter() - t0)
                assert os.waitstatus_to_exitcode(status) == 0
        rows.append({
            "mapping": mapping,
            "dataflow": df,
            "layers": len(w),
            "compute_cycles": res.compute_cycles,
            "simulate_s": round(best, 5),
            "process_wall_s": round(wall, 4),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        })
    hdr = list(rows[0])
    cache = "no bytecode cache" if args.no_bytecode_cache else "bytecode cache on"
    print(f"ResNet-18 224x224 on 128x128 (npu128), scalesim timing; processes with {cache}")
    print("  ".join(f"{h:>15}" for h in hdr))
    for r in rows:
        print("  ".join(f"{r[h]!s:>15}" for h in hdr))
    worst = {m: max(r["process_wall_s"] for r in rows if r["mapping"] == m) for m in ("fixed", "search")}
    print(f"targets: process < 0.15 s per dataflow with the fixed mapping (max here {worst['fixed']:.3f} s), "
          f"< 0.5 s with the search (max here {worst['search']:.3f} s), "
          f"peak < 300 MB (max here {max(r['peak_rss_mb'] for r in rows):.1f} MB)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "bench_sim.csv", "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=hdr)
        wr.writeheader()
        wr.writerows(rows)
    print(f"wrote {out / 'bench_sim.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
