"""npukit beside ZigZag 3.9.1 on accelerators neither was tuned to: ZigZag's bundled digital accelerators
with their arrays resized, replicated differently or their memory costs changed, on a small network
that is not one of ZigZag's bundled workloads.

    python benchmarks/bench_zigzag_variants.py --out out/zz_variants [--install] [--variants a,b]

Each variant is written as a ZigZag hardware YAML and mapping YAML under ``--out`` (the bundled file,
its ``operational_array.sizes`` replaced, each spatial unrolling of the mapping scaled to the new
size: an unrolling that filled the old dimension fills the new one, a smaller one is kept up to the new
size; memory fields multiplied where the variant says). The workload, ``small.onnx``, is built here
with ``onnx.helper``: a 3x3 conv, a strided 3x3 conv, a depthwise 3x3 conv, a pointwise conv, a strided
3x3 conv and a fully connected layer (1x16x28x28 input). ZigZag runs each pair in its own virtualenv
(LOMA, ``opt="energy"``, as ``bench_vs_zigzag.py --all``); npukit reads the same two files
(``zigzag:HW.yaml,MAPPING.yaml``) and maps every layer with its loop-nest mapper. Printed per pair: total
energy and its difference, the largest difference of a memory's share of the energy, latency, and each
tool's wall time (npukit's in this process, ZigZag's its API call). Targets, as for the bundled pairs:
energy within 10%, each share within 5 points, latency within 15%. ZigZag's results are kept under
``--zigzag-dir`` (default ``.peers/zzvariants``) and reused. Skips (exit 0) when ZigZag is absent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _peers import peer_python
from _zigzag_all import LAT_TOL, MAPPING, SHARE_TOL, TOTAL_TOL, level_shares, read_layers, zigzag_inputs, zigzag_levels

from npukit.sim import format_table, prepare_out_dir, write_csv

PIN = ("zigzag-dse==3.9.1", "six==1.17.0")
DEFAULT_VENV = Path(".peers/zigzag")

#: name: (bundled accelerator, new operational_array sizes, {memory: {field: factor}})
VARIANTS: dict[str, tuple[str, list[int], dict[str, dict[str, float]]]] = {
    "tpu_like": ("tpu_like", [32, 32], {}),
    "tpu_16x16_1MB": ("tpu_like", [16, 16], {"sram_2MB": {"size": 0.5}}),
    "tpu_64x16": ("tpu_like", [64, 16], {}),
    "tpu_dram_0.2x_sram_2x": ("tpu_like", [32, 32], {"dram": {"r_cost": 0.2, "w_cost": 0.2},
                                                     "sram_2MB": {"r_cost": 2.0, "w_cost": 2.0}}),
    "edge_tpu_like": ("edge_tpu_like", [8, 8, 4, 4], {}),
    "edge_tpu_8x8x2x2": ("edge_tpu_like", [8, 8, 2, 2], {}),
    "edge_tpu_16x16x2x2": ("edge_tpu_like", [16, 16, 2, 2], {}),
    "eyeriss_like": ("eyeriss_like", [14, 12], {}),
    "eyeriss_8x8": ("eyeriss_like", [8, 8], {}),
    "eyeriss_28x24": ("eyeriss_like", [28, 24], {}),
    "meta_prototype": ("meta_prototype", [32, 2, 4, 4], {}),
    "meta_16x2x4x4": ("meta_prototype", [16, 2, 4, 4], {}),
    "tesla_npu_like": ("tesla_npu_like", [32, 32, 4], {}),
    "tesla_16x16x4": ("tesla_npu_like", [16, 16, 4], {}),
    "ascend_like": ("ascend_like", [16, 16, 2, 2], {}),
    "ascend_8x8x2x2": ("ascend_like", [8, 8, 2, 2], {}),
    "gemm_l1_l3": ("gemm_l1_l3", [8, 8, 8], {}),
    "gemm_l1_l3_4x8x8": ("gemm_l1_l3", [4, 8, 8], {}),
}

RUN_ONE = r"""
import json, sys, time
from zigzag.api import get_hardware_performance_zigzag
hw, wl, mp, out = sys.argv[1:5]
t0 = time.perf_counter()
e, l, _ = get_hardware_performance_zigzag(workload=wl, accelerator=hw, mapping=mp, opt="energy", dump_folder=out,
                                          loma_show_progress_bar=False)
json.dump({"energy": e, "latency": l, "wall_s": time.perf_counter() - t0}, open(out + "/summary.json", "w"))
"""


def write_small_onnx(path: Path) -> Path:
    """The benchmark's network (see the module docstring) as an ONNX file with inferred shapes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    for name, x, cin, cout, k, stride, group in [("c1", "x", 16, 32, 3, 1, 1), ("c2", "c1", 32, 64, 3, 2, 1),
                                                 ("dw", "c2", 64, 64, 3, 1, 64), ("pw", "dw", 64, 96, 1, 1, 1),
                                                 ("c3", "pw", 96, 96, 3, 2, 1)]:
        w = numpy_helper.from_array(np.zeros((cout, cin // group, k, k), np.float32), f"{name}_w")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [x, w.name], [name], kernel_shape=[k, k], strides=[stride] * 2,
                                      pads=[k // 2] * 4, group=group, name=name))
    nodes.append(helper.make_node("Flatten", ["c3"], ["flat"], axis=1, name="flat"))
    inits.append(numpy_helper.from_array(np.zeros((96 * 7 * 7, 100), np.float32), "fc_w"))
    nodes.append(helper.make_node("MatMul", ["flat", "fc_w"], ["y"], name="fc"))
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 100])], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_variant(name: str, inputs: Path, out: Path) -> tuple[Path, Path]:
    """The variant's hardware and mapping YAML files under ``out`` (see the module docstring)."""
    import yaml

    base, sizes, edits = VARIANTS[name]
    hw = yaml.safe_load((inputs / "hardware" / f"{base}.yaml").read_text())
    arr = hw["operational_array"]
    old, dims = list(arr["sizes"]), list(arr["dimensions"])
    if len(sizes) != len(old):
        raise ValueError(f"variant {name}: {len(sizes)} sizes for {len(old)} dimensions")
    arr["sizes"], hw["name"] = list(sizes), name
    for mem, fields in edits.items():
        for key, factor in fields.items():
            v = hw["memories"][mem][key] * factor
            hw["memories"][mem][key] = int(v) if key == "size" else v
    mapping = yaml.safe_load((inputs / "mapping" / f"{MAPPING.get(base, base)}.yaml").read_text())
    for entry in mapping:
        for d, items in (entry.get("spatial_mapping") or {}).items():
            i = dims.index(d)
            scaled = []
            for item in items:
                loop, n = (s.strip() for s in item.split(","))
                n = sizes[i] if int(n) == old[i] else min(int(n), sizes[i])
                scaled.append(f"{loop}, {n}")
            entry["spatial_mapping"][d] = scaled
    hp, mp = out / f"{name}.yaml", out / f"{name}_mapping.yaml"
    hp.write_text(yaml.safe_dump(hw, sort_keys=False))
    mp.write_text(yaml.safe_dump(mapping, sort_keys=False))
    return hp, mp


def zigzag_result(exe: str, zdir: Path, name: str, hw: Path, mp: Path, wl: Path) -> dict | None:
    """ZigZag's summary and per-layer results for one variant, run unless already under ``zdir``."""
    d = zdir / name
    if not (d / "summary.json").exists():
        print(f"running ZigZag on {name} (about a minute) ...", flush=True)
        d.mkdir(parents=True, exist_ok=True)
        p = subprocess.run([exe, "-c", RUN_ONE, str(hw), str(wl), str(mp), str(d)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"  ZigZag failed on {name}: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
            return None
    summary = json.loads((d / "summary.json").read_text())
    summary["layers"] = read_layers(d)
    return summary


def compare(name: str, zz: dict, hw: Path, mp: Path, wl: Path) -> dict:
    """One table row: npukit's result on the variant beside ZigZag's."""
    from npukit.sim.nest_sim import parse_zigzag_spec, simulate_nest
    from npukit.sim.zigzag_io import load_zigzag_hardware
    from npukit.workloads import onnx_workload

    hwd = load_zigzag_hardware(hw)
    zl = zigzag_levels(hwd, zz["layers"])
    zlat = sum(lay["latency"] for lay in zz["layers"])
    t0 = time.perf_counter()
    h, s = parse_zigzag_spec(f"zigzag:{hw},{mp}")
    r = simulate_nest(onnx_workload(str(wl), None), h, s)
    wall = time.perf_counter() - t0
    nl, nt, zt = r.energy_by_level(), r.energy_pj, sum(zl.values())
    worst = max(abs(d) for *_, d in level_shares(hwd, zl, nl, zt, nt))
    e_diff, l_diff = (nt - zt) / zt, (r.cycles - zlat) / zlat
    base, sizes, edits = VARIANTS[name]
    ok = abs(e_diff) <= TOTAL_TOL and worst <= SHARE_TOL and abs(l_diff) <= LAT_TOL
    return {"variant": name, "bundled": base, "sizes": "x".join(map(str, sizes)),
            "memory_edits": "; ".join(f"{m} {k} x{f:g}" for m, fs in edits.items() for k, f in fs.items()) or "-",
            "zigzag_uJ": round(zt / 1e6, 3), "npukit_uJ": round(nt / 1e6, 3), "energy_diff_pct": round(100 * e_diff, 2),
            "worst_share_pts": round(worst, 2), "zigzag_cycles": round(zlat), "npukit_cycles": round(r.cycles),
            "latency_diff_pct": round(100 * l_diff, 1), "zigzag_s": round(zz["wall_s"], 1), "npukit_s": round(wall, 2),
            "targets": "met" if ok else "NOT met"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zigzag-python", help="python of a virtualenv that has zigzag-dse==3.9.1 and six")
    ap.add_argument("--install", action="store_true", help="create .peers/zigzag with ZigZag if missing")
    ap.add_argument("--zigzag-dir", default=".peers/zzvariants", help="ZigZag's per-variant results (reused)")
    ap.add_argument("--variants", help="comma-separated names (default: all): " + ", ".join(VARIANTS))
    ap.add_argument("--out", default="out/bench_zigzag_variants")
    args = ap.parse_args(argv)
    names = list(VARIANTS) if not args.variants else [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        print(f"bench_zigzag_variants: unknown variant {bad[0]!r}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    exe = peer_python(args.zigzag_python, "NPUKIT_ZIGZAG_PYTHON", DEFAULT_VENV, PIN, "import zigzag.api, six", args.install)
    if exe is None:
        print("ZigZag is not installed (pass --install or --zigzag-python); skipping")
        return 0
    inputs = zigzag_inputs(exe)
    out = prepare_out_dir(args.out)
    if (out / "zigzag_variants.csv").exists():
        print(f"bench_zigzag_variants: {out} already holds a run (zigzag_variants.csv); pass another --out",
              file=sys.stderr)
        return 2
    wl = write_small_onnx(out / "small.onnx")
    rows = []
    for n in names:
        hw, mp = write_variant(n, inputs, out)
        zz = zigzag_result(exe, Path(args.zigzag_dir), n, hw, mp, wl)
        if zz is not None:
            rows.append(compare(n, zz, hw, mp, wl))
            print(format_table(list(rows[-1]), [list(rows[-1].values())]), flush=True)
    if not rows:
        print("no variant ran")
        return 1
    print("\nall variants (small.onnx, ZigZag's energy-optimised mappings, the scaled spatial mappings on both sides)\n")
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    met = sum(r["targets"] == "met" for r in rows)
    print(f"\nenergy, level shares and latency within their targets: {met} of {len(rows)}")
    print(f"wrote {write_csv(out / 'zigzag_variants.csv', rows)}")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
