"""npukit's energy accounting beside ZigZag 3.9.1 on ZigZag's own ResNet-18 and ``tpu_like`` accelerator.

ZigZag runs its bundled ``resnet18.onnx`` on its bundled ``tpu_like.yaml`` hardware and
``tpu_like.yaml`` spatial mapping, optimising each layer's temporal mapping for energy (LOMA search,
``opt = "energy"``). npukit runs its built-in ResNet-18 (the same 21 layers; the benchmark checks
every layer's dimensions against ZigZag's loop sizes) on ``examples/zigzag_tpu_like.toml``, which
restates that hardware, with ``examples/zigzag_tpu_like_energy.toml``, which restates its per-access
energies, and npukit's mapper minimising energy. Printed: total energy, energy per memory level
(MAC, registers, SRAM, DRAM) and per operand (W weights, I inputs, O outputs and psums) from each
side, each level's share, latency and wall time, and the targets: total within 15%, every level's
share within 5 points. docs/accounting.md explains the remaining differences.

ZigZag is never an npukit dependency: it runs in its own virtualenv, ``--zigzag-python PATH`` or
``$NPUKIT_ZIGZAG_PYTHON`` (default ``.peers/zigzag/bin/python``); ``--install`` creates that
virtualenv (``pip install zigzag-dse==3.9.1 six``; ZigZag imports six without declaring it).
Without it the benchmark says so and exits 0. ZigZag's search takes minutes; its per-layer result is
saved as ``zigzag_resnet18.json`` in ``--out`` and ``--zigzag-json FILE`` reuses one.

    python benchmarks/bench_vs_zigzag.py [--install] [--zigzag-json out/bench/zigzag_resnet18.json]

``--all`` compares every bundled digital accelerator x resnet18, mobilenetv2 and alexnet instead, through
npukit's ZigZag reader and loop-nest mapper (``benchmarks/_zigzag_all.py``), timing npukit's whole process
cold (an empty ``$NPUKIT_CACHE_DIR``) and warm (the same folder again), wall and CPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _peers import peer_python

from npukit.sim import format_table, load_arch, load_table, prepare_out_dir, resnet18, simulate, write_csv

PIN = ("zigzag-dse==3.9.1", "six==1.17.0")
DEFAULT_VENV = Path(".peers/zigzag")
ARCH = Path(__file__).resolve().parent.parent / "examples" / "zigzag_tpu_like.toml"
LEVELS = ("mac", "registers", "sram", "dram")
TOTAL_TOLERANCE = 0.15  # relative
SHARE_TOLERANCE = 5.0  # percentage points

# Runs inside ZigZag's virtualenv: its API on its bundled inputs, then one JSON summary on stdout.
RUNNER = r"""
import glob, json, os, sys, tempfile, time
import zigzag
from zigzag.api import get_hardware_performance_zigzag
base = os.path.join(os.path.dirname(zigzag.__file__), "inputs")
dump = tempfile.mkdtemp(prefix="npukit_zz_")
t0 = time.perf_counter()
energy, latency, _ = get_hardware_performance_zigzag(
    workload=base + "/workload/resnet18.onnx", accelerator=base + "/hardware/tpu_like.yaml",
    mapping=base + "/mapping/tpu_like.yaml", opt="energy", dump_folder=dump, loma_show_progress_bar=False)
wall = time.perf_counter() - t0
names = {"O": ["registers", "sram", "dram"], "W": ["registers", "dram"], "I": ["sram", "dram"]}
layers = []
for f in sorted(glob.glob(os.path.join(dump, "*_complete.json"))):
    d = json.load(open(f))
    e, lat, lay = d["outputs"]["energy"], d["outputs"]["latency"], d["inputs"]["layer"]
    per = {"mac": e["operational_energy"]}
    for op, vals in e["memory_energy_breakdown_per_level"].items():
        for lvl, v in zip(names[op], vals):
            per[op + "_" + lvl] = per.get(op + "_" + lvl, 0.0) + v
    tm = d["inputs"]["temporal_mapping"]["W"]
    layers.append({"name": lay["name"], "dims": lay["loop_dimensions"], "energy_pj": per,
                   "total_pj": e["energy_total"], "latency_cycles": lat["data_onloading"] + lat["computation"]
                   + lat["data_offloading"], "w_mapping": " | ".join(" ".join(l) for l in tm)})
print(json.dumps({"energy_pj": energy, "latency_cycles": latency, "wall_s": wall, "layers": layers,
                  "zigzag": getattr(zigzag, "__version__", "3.9.1")}))
"""


def zigzag_python(args: argparse.Namespace) -> str | None:
    """The peer's virtualenv python (created with ``--install``), or None when absent."""
    return peer_python(args.zigzag_python, "NPUKIT_ZIGZAG_PYTHON", DEFAULT_VENV, PIN, "import zigzag.api, six", args.install)


def layer_name(onnx_name: str) -> str:
    """``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1`` (npukit's names): the op type dropped,
    and each module path part that the next one extends (``layer1`` before ``layer1.0``)."""
    parts = [p for p in onnx_name.split("/") if p][:-1] or [onnx_name]
    keep = [p for p, nxt in zip(parts, parts[1:] + [""], strict=True) if not nxt.startswith(p + ".")]
    return ".".join(keep)


def gemm_dims(dims: dict[str, int]) -> tuple[int, int, int]:
    """ZigZag loop sizes -> the GEMM (M, N, K) npukit maps: M = B*OY*OX, N = K, K = C*FY*FX."""
    g = lambda k: int(dims.get(k, 1))  # noqa: E731
    return g("B") * g("OY") * g("OX"), g("K"), g("C") * g("FY") * g("FX")


def npukit_levels(res, table) -> dict[str, float]:
    """npukit's energy (pJ) by ZigZag's ``OPERAND_level`` keys (its MAC energy includes the accumulate,
    so npukit's ``logic`` level, psum adders and psum path, counts as ``mac``)."""
    out: dict[str, float] = {}
    for (lvl, op), e in res.energy_by_level(table).items():
        key = "mac" if lvl in ("mac", "logic") else f"{op}_{lvl}"
        out[key] = out.get(key, 0.0) + e
    return out


def by_level(per: dict[str, float]) -> dict[str, float]:
    lv = dict.fromkeys(LEVELS, 0.0)
    for k, v in per.items():
        lv["mac" if k == "mac" else k.split("_", 1)[1]] += v
    return lv


def compare(zz: dict, res, table) -> tuple[list[dict], list[dict], bool]:
    """(per-layer rows, per level/operand rows, targets met) for ZigZag's summary ``zz`` and npukit's ``res``."""
    nsum = npukit_levels(res, table)
    by_name = {layer_name(z["name"]): z for z in zz["layers"]}
    layer_rows, zsum = [], {}
    for lr in res.layers:
        z = by_name.get(lr.name)
        if z is None:
            raise SystemExit(f"ZigZag has no layer '{lr.name}' (it has {', '.join(sorted(by_name))})")
        if gemm_dims(z["dims"]) != (lr.M, lr.N, lr.K):
            raise SystemExit(f"layer {lr.name}: ZigZag's (M, N, K) = {gemm_dims(z['dims'])}, npukit's {(lr.M, lr.N, lr.K)}")
        for k, v in z["energy_pj"].items():
            zsum[k] = zsum.get(k, 0.0) + v
        zt, nt = z["total_pj"], lr.energy_total_pj
        layer_rows.append({"layer": lr.name, "M": lr.M, "N": lr.N, "K": lr.K,
                           "zigzag_uJ": round(zt / 1e6, 3), "npukit_uJ": round(nt / 1e6, 3),
                           "diff_pct": round(100 * (nt - zt) / zt, 1),
                           "total_cycles_zigzag": int(z["latency_cycles"]), "total_cycles_npukit": lr.total_cycles,
                           "zigzag_w_loops": z["w_mapping"], "npukit_mapping": lr.mapping})
    zt, nt = sum(zsum.values()), sum(nsum.values())
    assert abs(nt - res.energy_pj) <= 1e-9 * nt, "the level split must add up to the total"
    zl, nl = by_level(zsum), by_level(nsum)
    level_rows, ok = [], abs(nt - zt) <= TOTAL_TOLERANCE * zt
    for lvl in LEVELS:
        zs, ns = 100 * zl[lvl] / zt, 100 * nl[lvl] / nt
        ok &= abs(zs - ns) <= SHARE_TOLERANCE
        level_rows.append({"what": lvl, "zigzag_uJ": round(zl[lvl] / 1e6, 1), "npukit_uJ": round(nl[lvl] / 1e6, 1),
                           "zigzag_share_pct": round(zs, 1), "npukit_share_pct": round(ns, 1),
                           "share_diff_pts": round(ns - zs, 1)})
        for op in "WIO":
            key = f"{op}_{lvl}"
            if lvl != "mac" and (key in zsum or nsum.get(key)):
                level_rows.append({"what": f"  {op} {lvl}", "zigzag_uJ": round(zsum.get(key, 0.0) / 1e6, 1),
                                   "npukit_uJ": round(nsum.get(key, 0.0) / 1e6, 1),
                                   "zigzag_share_pct": round(100 * zsum.get(key, 0.0) / zt, 1),
                                   "npukit_share_pct": round(100 * nsum.get(key, 0.0) / nt, 1), "share_diff_pts": ""})
    level_rows.append({"what": "total", "zigzag_uJ": round(zt / 1e6, 1), "npukit_uJ": round(nt / 1e6, 1),
                       "zigzag_share_pct": 100.0, "npukit_share_pct": 100.0,
                       "share_diff_pts": f"total {100 * (nt - zt) / zt:+.1f}%"})
    return layer_rows, level_rows, ok


def table_text(rows: list[dict], cols: list[str]) -> str:
    return format_table(cols, [[r[c] for c in cols] for r in rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zigzag-python", help="python of a virtualenv that has zigzag-dse==3.9.1 and six")
    ap.add_argument("--install", action="store_true", help=f"create {DEFAULT_VENV} with {' '.join(PIN)} if missing")
    ap.add_argument("--zigzag-json", help="reuse a ZigZag summary this benchmark saved (skips the minutes-long search)")
    ap.add_argument("--arch", default=str(ARCH), help="npukit arch restating tpu_like (default: examples/)")
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--all", action="store_true", help="every bundled digital accelerator x resnet18, mobilenetv2, "
                    "alexnet through npukit's ZigZag reader and loop-nest mapper (benchmarks/_zigzag_all.py)")
    ap.add_argument("--zigzag-dir", default=".peers/zzruns", help="with --all: ZigZag's per-pair results (reused)")
    ap.add_argument("--pairs", help="with --all: only ARCH[,ARCH..]:WORKLOAD[,..] (default: all)")
    args = ap.parse_args()
    if args.zigzag_python is not None and not args.zigzag_python.strip():  # not silently the default venv
        ap.error("--zigzag-python is empty; pass the python of a virtualenv with zigzag-dse==3.9.1 and six, or leave "
                 "it out")
    if args.all:
        from _zigzag_all import ARCHS, WORKLOADS, run_all

        exe = zigzag_python(args)
        if exe is None:
            print("ZigZag 3.9.1 is not installed: skipped (rerun with --install)")
            return 0
        archs, wls = ARCHS, WORKLOADS
        if args.pairs:
            a, _, w = args.pairs.partition(":")
            archs, wls = tuple(a.split(",")), tuple(w.split(",")) if w else WORKLOADS
        return run_all(exe, Path(args.zigzag_dir), args.out, archs, wls)
    arch = load_arch(args.arch)  # validated before ZigZag starts
    table = load_table(arch.energy_table)
    if args.zigzag_json:
        try:
            zz = json.loads(Path(args.zigzag_json).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--zigzag-json {args.zigzag_json}: {exc}")
    else:
        exe = zigzag_python(args)
        if exe is None:
            print("ZigZag 3.9.1 is not installed: skipped (rerun with --install, or point --zigzag-python / "
                  "$NPUKIT_ZIGZAG_PYTHON at a virtualenv with zigzag-dse==3.9.1 and six)")
            return 0
        print("running ZigZag's LOMA search on resnet18.onnx / tpu_like (minutes) ...", flush=True)
        proc = subprocess.run([exe, "-c", RUNNER], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"ZigZag failed: {proc.stderr.strip().splitlines()[-1:]}")
            return 1
        zz = json.loads(proc.stdout.strip().splitlines()[-1])
    work = resnet18()
    simulate(work, arch, table=table)  # untimed warm-up (imports, caches)
    t0 = time.perf_counter()
    res = simulate(work, arch, table=table)
    t_nk = time.perf_counter() - t0
    layer_rows, level_rows, ok = compare(zz, res, table)
    print("\nResNet-18 on ZigZag's tpu_like (32x32 ws, 8-bit data, 16-bit psums), energy-optimised mapping on each side\n")
    print(table_text(layer_rows, ["layer", "M", "N", "K", "zigzag_uJ", "npukit_uJ", "diff_pct", "total_cycles_zigzag",
                                  "total_cycles_npukit", "zigzag_w_loops", "npukit_mapping"]))
    print()
    print(table_text(level_rows, ["what", "zigzag_uJ", "npukit_uJ", "zigzag_share_pct", "npukit_share_pct",
                                  "share_diff_pts"]))
    zcyc = sum(r["total_cycles_zigzag"] for r in layer_rows)
    print(f"\nlatency: ZigZag {zcyc:,} cycles, npukit {res.total_cycles:,} cycles ({res.compute_cycles:,} compute + "
          f"{res.stall_cycles:,} stall); wall: ZigZag {zz['wall_s']:.1f} s, npukit {t_nk * 1e3:.1f} ms "
          f"({zz['wall_s'] / t_nk:,.0f}x)")
    print(f"targets (total within {TOTAL_TOLERANCE:.0%}, each level's share within {SHARE_TOLERANCE:g} points): "
          + ("met" if ok else "NOT met"))
    out = prepare_out_dir(args.out)
    for name, rows in (("zigzag_layers.csv", layer_rows), ("zigzag_levels.csv", level_rows)):
        print(f"wrote {write_csv(out / name, rows)}")
    if not args.zigzag_json:
        path = out / "zigzag_resnet18.json"
        path.write_text(json.dumps(zz))
        print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
