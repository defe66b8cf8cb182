"""npukit's SCALE-Sim mode beside SCALE-Sim 3.0.0 itself, every report column, on random layers.

``--cases N`` random conv layers (``--seed``): array 2..32 x 2..32, ws/os/is, SRAMs of 1..64 kB, inputs
up to 20x20 with up to 24 channels, 1..48 filters, 1x1..3x3 windows, stride 1..2; each case runs in
CALC and in USER bandwidth mode (USER: ``Bandwidth`` 1..16, ``[layout]`` Ifmap/FilterSRAMBankBandwidth
1..24 words/cycle, one bank; ``--stalls``: 1-2 kB SRAMs and 1..4 words/cycle). The same .cfg and
topology CSV go to SCALE-Sim (its own process) and to
npukit (``load_scalesim_cfg``, ``simulate``, ``scalesim_reports``). Printed: per mode and per column of
COMPUTE_REPORT, BANDWIDTH_REPORT and DETAILED_ACCESS_REPORT the number of cases whose value is exactly
SCALE-Sim's (values compared as numbers: SCALE-Sim prints some integers as numpy floats, ``-1.0``); the
CSV has every value of both tools. Exit 1 when any column differs.

SCALE-Sim is never an npukit dependency (it needs numpy < 2.4): it runs in its own virtualenv,
``--scalesim-python PATH`` or ``$NPUKIT_SCALESIM_PYTHON`` (default ``.peers/scalesim/bin/python``);
``--install`` creates it (``pip install scalesim==3.0.0 'numpy<2.4'``). Without it the benchmark says so
and exits 0.

    python benchmarks/bench_vs_scalesim.py [--install] [--seed 0] [--cases 12] [--modes calc,user]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
import time
from pathlib import Path

from _peers import peer_python

from npukit.sim import NpukitError, format_table, load_scalesim_cfg, load_topology_csv, prepare_out_dir, simulate, write_csv
from npukit.sim.scalesim_reports import BANDWIDTH_REPORT, COMPUTE_REPORT, DETAILED_ACCESS_REPORT, scalesim_reports

PIN = ("scalesim==3.0.0", "numpy<2.4")
DEFAULT_VENV = Path(".peers/scalesim")
REPORTS = (COMPUTE_REPORT, BANDWIDTH_REPORT, DETAILED_ACCESS_REPORT)
CFG = """[general]
run_name = bench

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    {ifmap}
FilterSramSzkB:   {filt}
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
IfmapSRAMBankBandwidth: {ibw}
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {fbw}
FilterSRAMBankNum: 1
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
TOPO_HEAD = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
# runs inside SCALE-Sim's virtualenv: argv = a JSON list of [cfg, topology, report dir]; prints per case
# the three report files' text and the seconds SCALE-Sim took
RUNNER = r"""
import contextlib, io, json, os, sys, time
from scalesim.scale_sim import scalesim
out = []
for cfg, topo, top in json.load(open(sys.argv[1])):
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=topo, input_type_gemm=False)
        s.run_scale(top_path=top)
    t = time.perf_counter() - t0
    texts = {n: open(os.path.join(top, "bench", n)).read() for n in
             ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv")}
    out.append({"texts": texts, "seconds": t})
print(json.dumps(out))
"""


def scalesim_python(args: argparse.Namespace) -> str | None:
    """The peer's virtualenv python (created with ``--install``), or None when absent."""
    return peer_python(args.scalesim_python, "NPUKIT_SCALESIM_PYTHON", DEFAULT_VENV, PIN, "import scalesim", args.install)


def random_case(rng: random.Random, stalls: bool = False) -> dict:
    """One random layer and array (see the module docstring); ``stalls``: 1-2 kB SRAMs and 1-4 words/cycle."""
    fh = rng.choice((1, 1, 2, 3))
    h = rng.randint(max(fh, 2), 20)
    kb = (1, 2) if stalls else (1, 2, 4, 16, 64)
    top = 4 if stalls else 24
    return {
        "df": rng.choice(("ws", "os", "is")), "rows": rng.choice((2, 4, 8, 16, 32)), "cols": rng.choice((2, 4, 8, 16, 32)),
        "ifmap": rng.choice(kb), "filt": rng.choice(kb), "ofmap": rng.choice(kb),
        "bw": rng.randint(1, min(16, top)), "ibw": rng.randint(1, top), "fbw": rng.randint(1, top),
        "layer": ("L", h, rng.randint(max(fh, 2), 20), fh, fh, rng.randint(1, 24), rng.randint(1, 48), rng.choice((1, 1, 2))),
    }


def parse(text: str) -> tuple[list[str], list[list[float]]]:
    """Column names and numeric rows of one SCALE-Sim report text."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = [h.strip() for h in lines[0].split(",") if h.strip()]
    rows = [[float(v) for v in ln.split(",") if v.strip()] for ln in lines[1:]]
    return head, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalesim-python", help="python of a virtualenv that has scalesim==3.0.0")
    ap.add_argument("--install", action="store_true", help=f"create {DEFAULT_VENV} with {' '.join(PIN)} if missing")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=12,
                    help="random layers, each in every mode (default 12: a few minutes with SCALE-Sim; README: 40)")
    ap.add_argument("--stalls", action="store_true", help="stall-heavy cases: 1-2 kB SRAMs, 1-4 words/cycle")
    ap.add_argument("--modes", default="calc,user", help="comma-separated subset of calc,user")
    ap.add_argument("--out", default="out/bench")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    if args.cases < 1 or any(m not in ("calc", "user") for m in modes):
        ap.error("--cases must be >= 1 and --modes a subset of calc,user")
    if args.scalesim_python is not None and not args.scalesim_python.strip():  # not silently the default venv
        ap.error("--scalesim-python is empty; pass the python of a virtualenv with scalesim==3.0.0, or leave it out")
    exe = scalesim_python(args)
    if exe is None:
        print("SCALE-Sim 3.0.0 is not installed: skipped (rerun with --install, or point --scalesim-python "
              "/ $NPUKIT_SCALESIM_PYTHON at a virtualenv with scalesim==3.0.0 and numpy<2.4)")
        return 0
    rng = random.Random(args.seed)
    cases = [random_case(rng, args.stalls) for _ in range(args.cases)]
    rows, matches, t_ss, t_nk = [], {}, 0.0, 0.0
    with tempfile.TemporaryDirectory() as d:
        jobs = []
        for i, c in enumerate(cases):
            topo = Path(d) / f"t{i}.csv"
            topo.write_text(TOPO_HEAD + ", ".join(map(str, c["layer"])) + ",\n")
            for mode in modes:
                cfg = Path(d) / f"c{i}_{mode}.cfg"
                cfg.write_text(CFG.format(mode=mode.upper(), **{k: v for k, v in c.items() if k != "layer"}))
                jobs.append((i, mode, str(cfg), str(topo), str(Path(d) / f"r{i}_{mode}")))
        (Path(d) / "jobs.json").write_text(json.dumps([j[2:] for j in jobs]))
        proc = subprocess.run([exe, "-c", RUNNER, str(Path(d) / "jobs.json")], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"SCALE-Sim failed: {proc.stderr.strip().splitlines()[-1:]}")
            return 1
        gold = json.loads(proc.stdout)
        for (i, mode, cfg, topo, _), g in zip(jobs, gold, strict=True):
            t_ss += g["seconds"]
            t0 = time.perf_counter()
            arch, work = load_scalesim_cfg(cfg), load_topology_csv(topo)
            ours = scalesim_reports(work, simulate(work, arch))
            t_nk += time.perf_counter() - t0
            row = {"case": i, "mode": mode, "dataflow": arch.dataflow, "array": f"{arch.rows}x{arch.cols}",
                   "layer": " ".join(map(str, cases[i]["layer"][1:])), "npukit-model total cycles": None}
            for name in REPORTS:
                head, ss = parse(g["texts"][name])
                _, nk = parse(ours[name])
                for col, a, b in zip(head[1:], ss[0][1:], nk[0][1:], strict=True):
                    key = (mode, name.removesuffix(".csv"), col)
                    matches[key] = matches.get(key, 0) + (a == b)
                    row[f"{col} scalesim"], row[f"{col} npukit"] = a, b
            if mode == "user":  # npukit's own stall model on the same layer, one DRAM port of ibw + fbw + bw words
                c = cases[i]
                try:
                    port = float(c["ibw"] + c["fbw"] + c["bw"])
                    own = simulate(work, arch.with_(memory="npukit", dram_bandwidth_bytes_per_cycle=port))
                    row["npukit-model total cycles"] = own.total_cycles
                except NpukitError:
                    row["npukit-model total cycles"] = None
            rows.append(row)
    per_mode = {m: sum(j[1] == m for j in jobs) for m in modes}
    table = [[m, rep, col, f"{n}/{per_mode[m]}"] for (m, rep, col), n in matches.items()]
    print(f"{args.cases} random layers (seed {args.seed}), SCALE-Sim 3.0.0 vs npukit memory=scalesim: "
          "cases whose value equals SCALE-Sim's, per column")
    print(format_table(["mode", "report", "column", "equal"], table))
    bad = sum(per_mode[m] - n for (m, _, _), n in matches.items())
    print(f"SCALE-Sim {t_ss:.2f} s, npukit {t_nk:.2f} s (numba compile included) for {len(jobs)} runs; "
          f"{bad} column values differ")
    for label, keep in (("SCALE-Sim without stalls, stride 1 (same GEMM, prefetch keeps ahead)",
                         lambda r: r["Stall Cycles scalesim"] == 0 and r["layer"].endswith(" 1")),
                        ("the other cases", lambda r: not (r["Stall Cycles scalesim"] == 0 and r["layer"].endswith(" 1")))):
        own = [(r["npukit-model total cycles"], r["Total Cycles scalesim"]) for r in rows
               if r["npukit-model total cycles"] is not None and keep(r)]
        if own:
            errs = sorted((a - b) / b for a, b in own)
            print(f"npukit's own stall model (memory=npukit, one port of IfmapSRAMBankBandwidth + FilterSRAMBankBandwidth + "
                  f"Bandwidth bytes/cycle) vs SCALE-Sim USER Total Cycles, {label}: {len(own)} cases, median error "
                  f"{100 * errs[len(errs) // 2]:+.1f}%, within 5% on {sum(abs(e) <= 0.05 for e in errs)}, "
                  f"range {100 * errs[0]:+.0f}% .. {100 * errs[-1]:+.0f}%")
    out = prepare_out_dir(args.out)
    print(f"wrote {write_csv(out / 'bench_vs_scalesim.csv', rows)}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
