"""Mixture-of-experts models next to dense ones on one NPU: the numbers of docs/moe.md.

    python examples/moe/compare.py [--arch npu128] SPEC [SPEC ...]

For each workload spec (any ``npukit sim --workload`` string) prints one markdown row: parameters, active parameters
(those one token touches: meta ``active_params`` for MoE models, all of them for dense ones), MACs, DRAM bytes in all
and of the weights alone (``dram_filter_read_bytes``), total cycles and latency at the arch's clock, from
:func:`npukit.sim.simulate` with the arch's defaults.
"""

from __future__ import annotations

import argparse

from npukit.sim import load_arch, simulate
from npukit.workloads import load_workload


def row(spec: str, arch: str) -> str:
    wl = load_workload(spec)
    res = simulate(wl, load_arch(arch))
    params = wl.meta.get("params", 0)
    active = wl.meta.get("active_params", params)
    dram = sum(r.dram_bytes for r in res.layers)
    weights = sum(r.traffic_bytes.get("dram_filter_read_bytes", 0.0) for r in res.layers)
    return (f"| `{spec}` | {params / 1e9:.2f} | {active / 1e9:.2f} | {res.macs:.3e} | {dram / 1e9:.3f} | "
            f"{weights / 1e9:.3f} | {res.total_cycles:.3e} | {res.latency_s * 1e3:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="npu128")
    p.add_argument("specs", nargs="+")
    args = p.parse_args()
    print("| workload | params (B) | active (B) | MACs | DRAM (GB) | weight DRAM (GB) | cycles | latency (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in args.specs:
        print(row(spec, args.arch), flush=True)


if __name__ == "__main__":
    main()
