"""npukit's SCALE-Sim memory mode beside SCALE-Sim 3.0.0 itself, layer by layer, in one run.

For each dataflow, the same SCALE-Sim .cfg (CALC bandwidth mode by default) and topology CSV (the
first ``--layers`` layers of ResNet-18 at 224x224, SCALE-Sim's padded extents) go to SCALE-Sim and to
``npukit`` (``memory = "scalesim"``, fixed mapping). Printed per layer: compute cycles, stall cycles,
SRAM IFMAP/Filter reads, SRAM OFMAP writes, DRAM IFMAP/Filter reads and DRAM OFMAP writes from each
side, whether they are equal, and the wall-time ratio of the two tools. In USER bandwidth mode
(``--bandwidth-mode user``) SCALE-Sim's request queues change its DRAM reads and stalls, which npukit
does not model (docs/accounting.md): the table then shows the differences and the exit code is 0.

SCALE-Sim is never an npukit dependency (it needs numpy < 2.4): it runs in its own virtualenv,
``--scalesim-python PATH`` or ``$NPUKIT_SCALESIM_PYTHON`` (default ``.peers/scalesim/bin/python``);
``--install`` creates that virtualenv (``pip install scalesim==3.0.0 'numpy<2.4'``). Without it the
benchmark says so and exits 0.

    python benchmarks/bench_vs_scalesim.py [--install] [--array 128] [--layers 6] [--dataflows ws,os,is]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from _peers import peer_python

from npukit.sim import (
    format_table,
    load_scalesim_cfg,
    load_topology_csv,
    map_layer,
    prepare_out_dir,
    resnet18,
    simulate,
    write_csv,
)

PIN = ("scalesim==3.0.0", "numpy<2.4")
DEFAULT_VENV = Path(".peers/scalesim")
CFG = """[general]
run_name = bench

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    {sram}
FilterSramSzkB:   {sram}
OfmapSramSzkB:    {ofmap}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Dataflow : {df}
Bandwidth : {bw}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: {mode}
UseRamulatorTrace: False
"""
# runs inside SCALE-Sim's virtualenv: argv = cfg, topology, report dir; prints the two reports as JSON
RUNNER = r"""
import contextlib, csv, io, json, os, sys
from scalesim.scale_sim import scalesim
cfg, topo, top = sys.argv[1:4]
with contextlib.redirect_stdout(io.StringIO()):
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=topo, input_type_gemm=False)
    s.run_scale(top_path=top)
def rows(name):
    with open(os.path.join(top, "bench", name)) as f:
        return [{k.strip(): v.strip() for k, v in r.items() if k and k.strip()} for r in csv.DictReader(f)]
print(json.dumps({"compute": rows("COMPUTE_REPORT.csv"), "access": rows("DETAILED_ACCESS_REPORT.csv")}))
"""
FIELDS = (  # (SCALE-Sim report column, npukit LayerCounts field)
    ("SRAM IFMAP Reads", "ifmap_reads"), ("SRAM Filter Reads", "filter_reads"), ("SRAM OFMAP Writes", "ofmap_writes"),
    ("DRAM IFMAP Reads", "ifmap_dram"), ("DRAM Filter Reads", "filter_dram"), ("DRAM OFMAP Writes", "ofmap_dram"),
)


def scalesim_python(args: argparse.Namespace) -> str | None:
    """The peer's virtualenv python (created with ``--install``), or None when absent."""
    return peer_python(args.scalesim_python, "NPUKIT_SCALESIM_PYTHON", DEFAULT_VENV, PIN, "import scalesim", args.install)


def topology_rows(n_layers: int) -> list[tuple]:
    """SCALE-Sim conv rows of npukit's ResNet-18 (the FC layer as a 1x1 conv on a 1x1 input)."""
    out = []
    for layer in resnet18().layers[: n_layers or None]:
        if layer.conv is None:
            out.append((layer.name, 1, 1, 1, 1, layer.K, layer.N, 1))
        else:
            h, w, fh, fw, cin, cout, s = layer.conv
            out.append((layer.name, h, w, fh, fw, cin, cout, s))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalesim-python", help="python of a virtualenv that has scalesim==3.0.0")
    ap.add_argument("--install", action="store_true", help=f"create {DEFAULT_VENV} with {' '.join(PIN)} if missing")
    ap.add_argument("--array", type=int, default=128, help="array rows = cols (default 128)")
    ap.add_argument("--sram-kb", type=int, default=1024, help="ifmap and filter SRAM (kB; default 1024)")
    ap.add_argument("--ofmap-kb", type=int, default=1024, help="ofmap SRAM (kB; default 1024)")
    ap.add_argument("--layers", type=int, default=6, help="first N ResNet-18 layers (0 = all 21; default 6)")
    ap.add_argument("--topology", help="a SCALE-Sim conv topology CSV to use instead of ResNet-18")
    ap.add_argument("--dataflows", default="ws,os,is", help="comma-separated subset of ws,os,is")
    ap.add_argument("--bandwidth-mode", choices=("calc", "user"), default="calc")
    ap.add_argument("--bandwidth", type=int, default=10, help="USER mode DRAM bandwidth (words/cycle; default 10)")
    ap.add_argument("--out", default="out/bench")
    args = ap.parse_args()
    dfs = [d.strip() for d in args.dataflows.split(",")]
    if bad := [d for d in dfs if d not in ("ws", "os", "is")]:
        ap.error(f"unknown dataflow(s) {bad}; choose from ws,os,is")
    if args.array < 1 or args.sram_kb < 1 or args.ofmap_kb < 1 or args.layers < 0:
        ap.error("--array, --sram-kb and --ofmap-kb must be positive and --layers >= 0")
    exe = scalesim_python(args)
    if exe is None:
        print("SCALE-Sim 3.0.0 is not installed: skipped (rerun with --install, or point --scalesim-python "
              "/ $NPUKIT_SCALESIM_PYTHON at a virtualenv with scalesim==3.0.0 and numpy<2.4)")
        return 0
    if args.topology:  # validated by npukit's reader before SCALE-Sim starts
        work = load_topology_csv(args.topology)
        if any(x.conv is None for x in work.layers):
            ap.error(f"{args.topology}: use conv rows (name, IFMAP H, IFMAP W, Filter H, Filter W, Channels, Num Filter, Stride)")
        topo_rows = [(x.name, *x.conv) for x in work.layers]
    else:
        topo_rows = topology_rows(args.layers)
    what = f"{args.topology} ({len(topo_rows)} layers)" if args.topology else f"ResNet-18 (first {len(topo_rows)} layers)"
    rows, times = [], []
    with tempfile.TemporaryDirectory() as d:
        topo = Path(d) / "topology.csv"
        topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
                        + "".join(", ".join(map(str, r)) + ",\n" for r in topo_rows))
        for df in dfs:
            cfg = Path(d) / f"{df}.cfg"
            cfg.write_text(CFG.format(rows=args.array, cols=args.array, sram=args.sram_kb, ofmap=args.ofmap_kb, df=df,
                                      bw=args.bandwidth, mode=args.bandwidth_mode.upper()))
            t0 = time.perf_counter()
            proc = subprocess.run([exe, "-c", RUNNER, str(cfg), str(topo), str(Path(d) / f"rep_{df}")],
                                  capture_output=True, text=True)
            t_ss = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"SCALE-Sim failed on {df}: {proc.stderr.strip().splitlines()[-1:]}")
                return 1
            gold = json.loads(proc.stdout)
            arch, work = load_scalesim_cfg(cfg), load_topology_csv(topo)
            simulate(work, arch)  # untimed: compiles the numba kernels once per process
            t0 = time.perf_counter()
            arch, work = load_scalesim_cfg(cfg), load_topology_csv(topo)
            res = simulate(work, arch)
            counts = [map_layer(layer, arch) for layer in work.layers]
            t_nk = time.perf_counter() - t0
            times.append({"dataflow": df, "scalesim_s": round(t_ss, 3), "npukit_s": round(t_nk, 4),
                          "ratio": round(t_ss / t_nk, 1)})
            for layer, lr, c, comp, acc in zip(work.layers, res.layers, counts, gold["compute"], gold["access"], strict=True):
                ss_stall = int(comp["Stall Cycles"])
                row = {"dataflow": df, "layer": layer.name,
                       "compute_cycles_scalesim": int(comp["Total Cycles"]) - ss_stall, "compute_cycles_npukit": c.compute_cycles,
                       "stall_cycles_scalesim": ss_stall, "stall_cycles_npukit": lr.stall_cycles}
                equal = row["compute_cycles_scalesim"] == row["compute_cycles_npukit"]
                for col, fld in FIELDS:
                    key = col.lower().replace(" ", "_")
                    row[f"{key}_scalesim"], row[f"{key}_npukit"] = int(float(acc[col])), getattr(c, fld)
                    equal &= row[f"{key}_scalesim"] == row[f"{key}_npukit"]
                if args.bandwidth_mode == "calc":
                    equal &= row["stall_cycles_scalesim"] == row["stall_cycles_npukit"]
                row["equal"] = "yes" if equal else "NO"
                rows.append(row)
    short = ["dataflow", "layer", "compute_cycles_scalesim", "compute_cycles_npukit", "stall_cycles_scalesim",
             "stall_cycles_npukit", "dram_ifmap_reads_scalesim", "dram_ifmap_reads_npukit", "dram_ofmap_writes_scalesim",
             "dram_ofmap_writes_npukit", "equal"]
    print(f"{what} on {args.array}x{args.array}, SRAM {args.sram_kb}/{args.sram_kb}/"
          f"{args.ofmap_kb} kB, {args.bandwidth_mode.upper()} mode: SCALE-Sim 3.0.0 vs npukit memory=scalesim")
    print(format_table(short, [[r[k] for k in short] for r in rows]))
    print(format_table(list(times[0]), [list(t.values()) for t in times]))
    n_eq = sum(r["equal"] == "yes" for r in rows)
    print(f"{n_eq}/{len(rows)} layers equal in every count (all columns are in the CSV)")
    out = prepare_out_dir(args.out)
    print(f"wrote {write_csv(out / 'bench_vs_scalesim.csv', rows)}")
    print(f"wrote {write_csv(out / 'bench_vs_scalesim_time.csv', times)}")
    return 0 if n_eq == len(rows) or args.bandwidth_mode == "user" else 1


if __name__ == "__main__":
    raise SystemExit(main())
