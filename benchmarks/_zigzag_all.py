"""``bench_vs_zigzag.py --all``: every digital accelerator ZigZag 3.9.1 ships x its bundled ONNX workloads.

Per pair, ZigZag runs its bundled hardware YAML with its bundled mapping YAML (``default.yaml`` for
eyeriss_like, which has none; ``meta_prototype_like.yaml`` for meta_prototype), LOMA search,
``opt = "energy"``; npukit runs the same two files, ``npukit sim --arch zigzag:HW.yaml,MAPPING.yaml``
on the same ONNX file, in a fresh process, twice: cold (``$NPUKIT_CACHE_DIR`` an empty temporary folder:
the ONNX file is lowered, importing onnx, and every layer mapped) and warm (the same folder again: the
lowered file and the mappings are read from it). Printed per pair: total energy, each memory's share
(summed over operands) and energy per operand, latency, wall time of each whole process (npukit's CPU
seconds too, less sensitive to a loaded machine; ZigZag's is its wall time only) and the ratios, cold
and warm; the per-level/operand rows go to a CSV. Targets: total within 10%, each memory's share within 5 points,
latency within 15%, npukit >= 100x faster.

ZigZag's per-pair results (its ``*_complete.json`` dumps plus ``summary.json`` with its wall time) are kept
under ``--zigzag-dir`` (default ``.peers/zzruns``) and reused: a pair already there is not rerun.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from npukit.sim import format_table, prepare_out_dir, write_csv

ARCHS = ("tpu_like", "edge_tpu_like", "eyeriss_like", "meta_prototype", "tesla_npu_like", "ascend_like",
         "gemm_l1", "gemm_l1_l3")
WORKLOADS = ("resnet18", "mobilenetv2", "alexnet")
MAPPING = {"eyeriss_like": "default", "meta_prototype": "meta_prototype_like"}
TOTAL_TOL, SHARE_TOL, LAT_TOL, SPEEDUP = 0.10, 5.0, 0.15, 100.0

RUN_ONE = r"""
import json, os, sys, time, zigzag
from zigzag.api import get_hardware_performance_zigzag
base = os.path.join(os.path.dirname(zigzag.__file__), "inputs")
hw, wl, mp, out = sys.argv[1:5]
t0 = time.perf_counter()
e, l, _ = get_hardware_performance_zigzag(workload=f"{base}/workload/{wl}.onnx", accelerator=f"{base}/hardware/{hw}.yaml",
    mapping=f"{base}/mapping/{mp}.yaml", opt="energy", dump_folder=out, loma_show_progress_bar=False)
json.dump({"energy": e, "latency": l, "wall_s": time.perf_counter() - t0}, open(out + "/summary.json", "w"))
"""


def zigzag_inputs(exe: str) -> Path:
    """ZigZag's bundled ``inputs`` folder, from its own virtualenv."""
    out = subprocess.run([exe, "-c", "import zigzag, os; print(os.path.dirname(zigzag.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()) / "inputs"


def zigzag_pair(exe: str, zdir: Path, hw: str, wl: str) -> dict | None:
    """ZigZag's summary of one pair: run it unless ``zdir/hw_wl/summary.json`` exists."""
    d = zdir / f"{hw}_{wl}"
    if not (d / "summary.json").exists():
        print(f"running ZigZag on {hw} x {wl} (minutes) ...", flush=True)
        t0 = time.perf_counter()
        p = subprocess.run([exe, "-c", RUN_ONE, hw, wl, MAPPING.get(hw, hw), str(d)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"  ZigZag failed on {hw} x {wl}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
            return None
        s = json.loads((d / "summary.json").read_text())
        s["process_s"] = time.perf_counter() - t0
        (d / "summary.json").write_text(json.dumps(s))
    summary = json.loads((d / "summary.json").read_text())
    summary["layers"] = read_layers(d)
    return summary


def read_layers(d: Path) -> list[dict]:
    """ZigZag's per-layer results in ``d`` (its ``*_complete.json`` dumps): MAC energy, energy per memory level
    and operand (``per``), total energy (pJ) and latency (cycles: on-loading + computation + off-loading)."""
    layers = []
    for f in sorted(glob.glob(str(d / "*_complete.json"))):
        z = json.loads(Path(f).read_text())
        e, lat = z["outputs"]["energy"], z["outputs"]["latency"]
        layers.append({"mac": e["operational_energy"], "per": e["memory_energy_breakdown_per_level"],
                       "total": e["energy_total"], "latency": lat["data_onloading"] + lat["computation"]
                       + lat["data_offloading"]})
    return layers


def zigzag_levels(hwd, layers: list[dict]) -> dict[tuple[str, str], float]:
    """ZigZag's energy (pJ) by (memory name, operand), ``("mac", "-")`` for the MACs, summed over ``layers``
    (:func:`read_layers`) on the hardware ``hwd`` (its levels per operand name ZigZag's list entries)."""
    zl: dict[tuple[str, str], float] = {("mac", "-"): 0.0}
    for lay in layers:
        zl[("mac", "-")] += lay["mac"]
        for op, vals in lay["per"].items():
            for mem, v in zip(hwd.levels(op), vals, strict=True):
                zl[(mem.name, op)] = zl.get((mem.name, op), 0.0) + v
    return zl


def level_shares(hwd, zl: dict, nl: dict, zt: float, nt: float) -> list[tuple[str, float, float, float]]:
    """Per memory (and ``mac``): (name, ZigZag pJ, npukit pJ, npukit's share of its total ``nt`` minus ZigZag's
    of ``zt``, in percentage points) from the two tools' energies by (memory, operand)."""
    out = []
    for mem in ["mac"] + [m.name for m in hwd.memories]:
        ze = sum(v for (m, _), v in zl.items() if m == mem)
        ne = sum(v for (m, _), v in nl.items() if m == mem)
        out.append((mem, ze, ne, 100 * ne / nt - 100 * ze / zt))
    return out


def npukit_pair(inputs: Path, hw: str, wl: str, cache: Path) -> tuple[dict, float]:
    """npukit's result of one pair in a fresh process with ``$NPUKIT_CACHE_DIR`` = ``cache``: (per-level
    energies, ``cpu_s`` (user + system seconds of the process), wall seconds)."""
    arch = f"zigzag:{inputs}/hardware/{hw}.yaml,{inputs}/mapping/{MAPPING.get(hw, hw)}.yaml"
    code = ("import json,sys;from npukit.sim.nest_sim import parse_zigzag_spec, simulate_nest;"
            "from npukit.workloads import onnx_workload;"
            "h,s=parse_zigzag_spec(sys.argv[1]);r=simulate_nest(onnx_workload(sys.argv[2],None),h,s);"
            "print(json.dumps({'by':[[k[0],k[1],v] for k,v in r.energy_by_level().items()],"
            "'total':r.energy_pj,'cycles':r.cycles,'layers':len(r.mappings),'onnx':'onnx' in sys.modules,"
            "'layer_cycles':sorted(x['cycles'] for x in r.rows())}))")
    t0, cpu0 = time.perf_counter(), _children_cpu()
    p = subprocess.run([sys.executable, "-c", code, arch, f"{inputs}/workload/{wl}.onnx"], capture_output=True,
                       text=True, env={**os.environ, "PYTHONWARNINGS": "ignore", "NPUKIT_CACHE_DIR": str(cache)})
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if p.returncode != 0:
        raise SystemExit(f"npukit failed on {hw} x {wl}: {p.stderr.strip().splitlines()[-1:]}")
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "cpu_s": cpu}, wall


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (less sensitive to a loaded machine
    than wall time)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_all(exe: str, zdir: Path, out_dir: str, archs: tuple[str, ...], workloads: tuple[str, ...]) -> int:
    from npukit.sim.zigzag_io import load_zigzag_hardware

    inputs = zigzag_inputs(exe)
    pair_rows, level_rows = [], []
    for wl in workloads:
        for hw in archs:
            zz = zigzag_pair(exe, zdir, hw, wl)
            if zz is None:
                continue
            hwd = load_zigzag_hardware(inputs / "hardware" / f"{hw}.yaml")
            # cold: an empty cache folder (ONNX lowered, every layer mapped); warm: the same folder again
            with tempfile.TemporaryDirectory(prefix="npukit-cache-") as cache:
                nk, nk_wall = npukit_pair(inputs, hw, wl, Path(cache))
                warm, warm_wall = npukit_pair(inputs, hw, wl, Path(cache))
            if (warm["total"], warm["cycles"], warm["by"]) != (nk["total"], nk["cycles"], nk["by"]):
                raise SystemExit(f"npukit's warm run differs from its cold run on {hw} x {wl}")
            zl = zigzag_levels(hwd, zz["layers"])
            nl = {(a, b): v for a, b, v in nk["by"]}
            zt, nt = sum(zl.values()), nk["total"]
            zlat, nlat = sum(lay["latency"] for lay in zz["layers"]), nk["cycles"]
            # layers whose cycles equal ZigZag's (both sides sorted: the dumps are named by ONNX node, npukit's rows
            # by layer; a count, not a pairing)
            same = sum(abs(a - b) <= 1e-9 * max(a, 1.0) for a, b in
                       zip(sorted(lay["latency"] for lay in zz["layers"]), nk["layer_cycles"], strict=False))
            zwall = zz.get("process_s", zz["wall_s"])
            worst = 0.0
            for mem, ze, ne, d in level_shares(hwd, zl, nl, zt, nt):
                worst = max(worst, abs(d))
                level_rows.append({"arch": hw, "workload": wl, "level": mem, "operand": "all", "zigzag_uJ": ze / 1e6,
                                   "npukit_uJ": ne / 1e6, "share_diff_pts": round(d, 2)})
                for op in ("W", "I", "O"):
                    if (mem, op) in zl or (mem, op) in nl:
                        level_rows.append({"arch": hw, "workload": wl, "level": mem, "operand": op,
                                           "zigzag_uJ": zl.get((mem, op), 0.0) / 1e6,
                                           "npukit_uJ": nl.get((mem, op), 0.0) / 1e6, "share_diff_pts": ""})
            share_ok = worst <= SHARE_TOL
            e_diff, l_diff = (nt - zt) / zt, (nlat - zlat) / zlat
            ok = abs(e_diff) <= TOTAL_TOL and share_ok and abs(l_diff) <= LAT_TOL
            speed = {"cold": zwall / nk_wall >= SPEEDUP, "warm": zwall / warm_wall >= SPEEDUP}
            pair_rows.append({"arch": hw, "workload": wl, "layers": nk["layers"], "zigzag_uJ": round(zt / 1e6, 2),
                              "npukit_uJ": round(nt / 1e6, 2), "energy_diff_pct": round(100 * e_diff, 2),
                              "worst_share_pts": round(worst, 2), "zigzag_cycles": round(zlat),
                              "npukit_cycles": round(nlat), "latency_diff_pct": round(100 * l_diff, 1),
                              "layers_same_cycles": same,
                              "zigzag_s": round(zwall, 1), "cold_s": round(nk_wall, 2), "cold_cpu_s": round(nk["cpu_s"], 2),
                              "warm_s": round(warm_wall, 2), "warm_cpu_s": round(warm["cpu_s"], 2),
                              "ratio_cold": round(zwall / nk_wall), "ratio_warm": round(zwall / warm_wall),
                              "warm_imports_onnx": warm["onnx"],
                              "targets": ("met" if speed["cold"] else "all but speed cold") if ok else "NOT met"})
            print(format_table(list(pair_rows[-1]), [list(pair_rows[-1].values())]), flush=True)
    if not pair_rows:
        print("no pair ran")
        return 1
    print("\nall pairs (energy-optimised mappings, ZigZag's bundled spatial mappings on both sides)\n")
    print(format_table(list(pair_rows[0]), [list(r.values()) for r in pair_rows]))
    n = len(pair_rows)
    acc = sum(r["targets"] != "NOT met" for r in pair_rows)
    cold, warm = (sum(r[f"ratio_{k}"] >= SPEEDUP for r in pair_rows) for k in ("cold", "warm"))
    print(f"\nenergy, level shares and latency within their targets: {acc} of {n}; npukit >= {SPEEDUP:.0f}x faster "
          f"(whole process, wall): cold {cold} of {n}, warm {warm} of {n}")
    out = prepare_out_dir(out_dir)
    print(f"wrote {write_csv(out / 'zigzag_all_pairs.csv', pair_rows)}")
    print(f"wrote {write_csv(out / 'zigzag_all_levels.csv', level_rows)}")
    return 0 if all(r["targets"] == "met" for r in pair_rows) else 1
