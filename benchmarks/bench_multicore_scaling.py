"""Benchmark: whole models on 1, 2, 4, 8 and 16 npu128 cores (the multi-core simulator with its schedule search).

Models: Llama-3.1-70B prefill of 2048 tokens, Llama-3.1-70B decode of one token over a 2048-token KV cache, and
FLUX.1 Kontext [dev] (one transformer forward at 1024x1024 with one reference image). Each core is the built-in
``npu128`` (128x128 ws array, 1 GHz, 64 B/cycle DRAM port); the chip has a shared on-chip memory of 8 MiB, one
DRAM channel of 64 B/cycle per core (the DRAM bandwidth grows with the cores: each core keeps its single-core
bandwidth) and a 2-D mesh of 32 B/cycle links (interconnect numbers are estimates, see
``npukit.sim.interconnect``). Per run: the schedule the search picked (objective EDP), latency, energy, MAC
utilization, the share of the latency the critical path waits on the interconnect, the interconnect traffic and
the wall time of the simulation (target: under 30 s per whole-model simulation; tracing the model is cached and
not counted).

    python benchmarks/bench_multicore_scaling.py [--out out/bench_multicore] [--cores 1,2,4,8,16]
        [--layer-cores all|search]
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from npukit.benchmarks._args import Parser, int_list, out_folder, publish
from npukit.benchmarks._timing import spread, wide_warnings

MODELS = {
    "llama-3.1-70b prefill 2048": "llama-3.1-70b:seq=2048",
    "llama-3.1-70b decode (kv 2048)": "llama-3.1-70b:phase=decode,kv=2048",
    "flux.1-kontext 1024x1024": "flux.1-kontext-dev:res=1024",
}


MOST_CORES = 64  # the search's time grows with the cores: 10-20 s a simulation at 64 on this 2-core machine (1,024,
# which a chip may have, ran past 90 s on one model)


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_multicore")
    ap.add_argument("--cores", default=None, help="core counts from 1 to 64, run in increasing order; speedup and energy "
                    "are against the smallest (default 1,4,16; --full 1,2,4,8,16)")
    ap.add_argument("--full", action="store_true", help="every core count 1,2,4,8,16")
    ap.add_argument("--repeats", default="2",
                    help="simulations per (model, cores), 1 to 100; the wall time's min / median / max (default 2)")
    ap.add_argument("--layer-cores", choices=("all", "search"), default="all",
                    help="the chip's layer_cores: a layer alone on every core (default) or also on the first 1, 2, 4, ...")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names of " + ", ".join(MODELS))
    args = ap.parse_args()
    from npukit.sim import NpukitError, format_table, load_arch, prepare_out_dir, write_csv, write_figure
    from npukit.sim.multicore import homogeneous
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.workloads import workload_from_spec

    try:  # every option and the output folder before the first simulation
        cores = tuple(sorted(int_list(args.cores if args.cores is not None else ("1,2,4,8,16" if args.full
                                                                                  else "1,4,16"), "--cores", 1, MOST_CORES)))
        repeats = int_list(args.repeats, "--repeats", 1, 100)[0] if "," not in args.repeats else 0
        if not repeats:
            raise ValueError(f"--repeats: {args.repeats!r} is not one integer from 1 to 100")
        names = [m.strip() for m in args.models.split(",")]
        bad = [m for m in names if m not in MODELS]
        if bad:
            raise ValueError(f"--models: unknown model {bad[0]!r}: use {', '.join(MODELS)}")
        if len(set(names)) < len(names):
            raise ValueError("--models: a model is named twice")
        out_folder(args.out, ("multicore_scaling.csv", "multicore_scaling.png"))
        out = prepare_out_dir(args.out)  # made now: a path that turns unusable later cannot lose the run's work
    except (ValueError, NpukitError) as exc:
        print(f"bench_multicore_scaling: error: {exc}", file=sys.stderr)
        return 2
    arch = load_arch("npu128")
    rows = []
    for name in names:
        wl = workload_from_spec(MODELS[name])
        for n in cores:
            march = replace(homogeneous(arch, n, shared_kib=8192), layer_cores=args.layer_cores)
            walls = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = simulate_multicore(wl, march)
                walls.append(time.perf_counter() - t0)
            sp = spread(walls)
            wall = sp.median
            rows.append({"model": name, "cores": n, "schedule": res.schedule.label,
                         "latency_ms": res.latency_s * 1e3, "energy_mj": res.energy_pj / 1e9,
                         "utilization": res.utilization, "interconnect_share": res.interconnect_share,
                         "interconnect_mb": res.interconnect_bytes / 1e6,
                         "dram_mb": sum(r["dram_bytes"] for r in res.rows()) / 1e6,
                         "ops": len(wl.layers), "sim_s": wall, "sim_min_s": sp.min, "sim_max_s": sp.max, "n": sp.n,
                         "spread": round(sp.ratio, 2), "spread_flag": "WIDE" if sp.wide else ""})
            r = rows[-1]
            print(f"{name} on {n} cores: {r['latency_ms']:.2f} ms, {r['energy_mj']:.1f} mJ, {r['schedule']}, "
                  f"{wall:.1f} s", flush=True)
    headers = ["model", "cores", "schedule", "latency ms", "speedup", "energy mJ", "util %", "interconnect %",
               "link MB", "DRAM MB", "sim s (median)", "min", "max", "n", "max/min", "flag"]
    table = []
    for r in rows:
        base = next(x for x in rows if x["model"] == r["model"] and x["cores"] == cores[0])
        table.append([r["model"], r["cores"], r["schedule"], r["latency_ms"], base["latency_ms"] / r["latency_ms"],
                      r["energy_mj"], 100 * r["utilization"], 100 * r["interconnect_share"], r["interconnect_mb"],
                      r["dram_mb"], r["sim_s"], r["sim_min_s"], r["sim_max_s"], r["n"], r["spread"], r["spread_flag"]])
    print(format_table(headers, table))
    for ln in wide_warnings(rows, lambda r: f"{r['model']} on {r['cores']} cores, simulation wall time"):
        print(ln)
    try:
        print(f"wrote {publish(Path(out), 'multicore_scaling.csv', lambda p: write_csv(p, rows))}")
        fig = figure(rows, names, cores)
        print(f"wrote {publish(Path(out), 'multicore_scaling.png', lambda p: write_figure(p, fig, dpi=110))}")
    except (NpukitError, OSError) as exc:
        print(f"bench_multicore_scaling: error: could not write the results: {exc}", file=sys.stderr)
        return 2
    return 0


def figure(rows: list[dict], names: list[str], cores: tuple[int, ...]) -> Any:  # a matplotlib Figure
    """The four scaling panels (speedup, energy, MAC utilization, interconnect share) of ``rows`` against cores."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.6))
    axes = [fig.add_subplot(1, 4, i + 1) for i in range(4)]
    for name in names:
        rs = [r for r in rows if r["model"] == name]
        x = [r["cores"] for r in rs]
        axes[0].plot(x, [rs[0]["latency_ms"] / r["latency_ms"] for r in rs], "o-", label=name)
        axes[1].plot(x, [r["energy_mj"] / rs[0]["energy_mj"] for r in rs], "o-", label=name)
        axes[2].plot(x, [100 * r["utilization"] for r in rs], "o-", label=name)
        axes[3].plot(x, [100 * r["interconnect_share"] for r in rs], "o-", label=name)
    axes[0].plot(cores, [c / cores[0] for c in cores], "k:", label="linear")
    for ax, title in zip(axes, ("speedup", f"energy / {cores[0]}-core energy", "MAC utilization %", "time on interconnect %"),
                         strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cores, [str(c) for c in cores])
        ax.set_xlabel("cores")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())
