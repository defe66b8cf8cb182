"""Run inside Stream's own virtualenv (``stream-dse==2.1.1``, Python >= 3.12; never imports npukit): read Stream's
shipped hardware YAMLs and solve its test workloads, printing one JSON document on stdout.

    .peers/stream/bin/python benchmarks/_stream_driver.py OUT_DIR [--cases NAME,...] [--hardware NAME,...]
    .peers/stream/bin/python benchmarks/_stream_driver.py OUT_DIR --zigzag-share CORE:CIN,COUT,IH,IW[:MAPPING]

The second form runs ZigZag alone (zigzag-dse, which Stream ships) on one core YAML of Stream's and one conv share
(a 3x3 stride-1 int8 conv, CIN -> COUT channels on an IH x IW input already padded), to tell the per-core model from
the multi-core schedule; see :func:`zigzag_share`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import time

HARDWARE = ("tpu_like_quad_core", "eyeriss_like_dual_core", "eyeriss_like_quad_core",
            "meta_prototype_dual_core_simd_offchip", "simba", "simba_small", "tpu_v7_ironwood")


def _hw_dir() -> str:
    import stream

    return os.path.join(os.path.dirname(stream.__file__), "inputs", "examples", "hardware")


def hardware_summary(name: str) -> dict:
    """Core count, array sizes, memories (bits, pJ per access, port bits), links (bits/cycle, pJ/bit), the groups
    of cores that share their top memory (``core_memory_sharing``)."""
    import yaml

    root = _hw_dir()
    with open(os.path.join(root, f"{name}.yaml")) as f:
        top = yaml.safe_load(f)
    cores = {}
    for cid, rel in top["cores"].items():
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            path = os.path.join(root, "cores", os.path.basename(rel))
        with open(path) as f:
            c = yaml.safe_load(f)
        arr = c.get("operational_array", {})
        mems = []
        for mname, m in (c.get("memories") or {}).items():
            ports = m.get("ports") or []
            mems.append({"name": mname, "size_bits": m.get("size"), "r_cost": m.get("r_cost"), "w_cost": m.get("w_cost"),
                         "operands": m.get("operands"),
                         "port_bits": max((p.get("bandwidth_max", 0) for p in ports), default=0)})
        cores[str(cid)] = {"file": rel, "path": os.path.abspath(path), "type": c.get("type", ""),
                           "array": arr.get("sizes"), "mac_pj": arr.get("unit_energy"), "memories": mems,
                           "operator_types": c.get("operator_types"), "operand_precision": c.get("operand_precision")}
    links = [{"type": e.get("type"), "cores": e.get("cores"), "bandwidth_bits": e.get("bandwidth"),
              "unit_energy_cost": e.get("unit_energy_cost", top.get("unit_energy_cost", 0))}
             for e in top.get("core_connectivity") or []]
    # core_memory_sharing: groups of cores with one top memory ("3, 0, 1, 2": the first owns it)
    sharing = [[int(c) for c in str(g).split(",")] for g in top.get("core_memory_sharing") or []]
    return {"name": name, "cores": cores, "offchip_core_id": top.get("offchip_core_id"), "links": links,
            "memory_sharing": sharing}


def _workload(case: str) -> str:
    out = os.path.abspath(os.environ.get("NPUKIT_STREAM_OUT", "."))
    with contextlib.redirect_stdout(io.StringIO()):
        if case.startswith("2conv"):
            from stream.inputs.testing.workload.make_2_conv import TwoConvWorkloadConfig, make_2_conv_workload

            _, h, c = case.split("_")
            return make_2_conv_workload(TwoConvWorkloadConfig(1, int(h), int(h), int(c), int(c), int(c), 3, "i8", "i8"))
        if case == "attention_head":
            from stream.inputs.testing.workload.make_attention_head import make_attention_head

            path = os.path.join(out, "attention_head.onnx")
            make_attention_head(path)
            return path
        if case == "swiglu":
            from stream.inputs.testing.workload.make_swiglu import make_small_swiglu_workload

            return make_small_swiglu_workload(output_dir=out)
        if case == "conv_relu_gemm":
            from stream.inputs.testing.workload.make_conv_relu_flatten_gemm import make_conv_relu_flatten_gemm_workload

            return make_conv_relu_flatten_gemm_workload()
        if case == "resnet_subgraph":
            from stream.inputs.testing.workload.make_resnet_subgraph import make_resnet_subgraph

            return make_resnet_subgraph()
    raise SystemExit(f"unknown case {case}")


def _slot_trace() -> list:
    """Record each fused group's solved steady state as Stream's allocation stage returns it: its latency terms
    (``total = iterations x per_iteration - (iterations - 1) x overlap + fill``) and per slot its latency, the nodes
    in it (active cycles per iteration) and the transfers (their path cycles and what they add per iteration), and
    each transfer's route (source and target core ids).
    Wraps ``AllocationIR.from_internal`` in the fusion-group loop; returns the list it appends to."""
    import stream.stages.generation.fusion_group_iteration as fgi

    groups: list = []
    base = getattr(fgi.AllocationIR, "_npukit_base", fgi.AllocationIR)

    class Traced:
        _npukit_base = base

        @staticmethod
        def from_internal(allocation):  # noqa: ANN001, ANN205 - Stream's own types
            sol = allocation.solution
            slots = []
            for sl in (sol.slot_latency_breakdown or {}).get("slots", []):
                if not sl["compute_contributors"] and not sl["transfer_contributors"]:
                    continue
                slots.append({"cycles": sl["slot_latency_cycles"],
                              "nodes": {c["node"]: c["active_latency_cycles"] for c in sl["compute_contributors"]},
                              "transfers": {t["transfer"]: [t["path_cycles"], t["latency_contribution_cycles"]]
                                            for t in sl["transfer_contributors"]}})
            routes = {tr.name: [[c.id for c in plan.sources], [c.id for c in plan.targets]]
                      for tr, plan in sol.transfer_routes.items()}
            groups.append({"latency": vars(sol.latency), "slots": slots, "routes": routes})
            return base.from_internal(allocation)

    fgi.AllocationIR = Traced
    return groups


def solve(case: str, hardware: str, fused: bool, out: str) -> dict:
    from stream.api import SolveOptions, evaluate_mapping

    opts = SolveOptions(artifacts=False, time_limit_s=60,
                        stage_options={} if fused else {"fusion_cut_points": "per-layer"})
    slots = _slot_trace()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            est = evaluate_mapping(os.path.join(_hw_dir(), f"{hardware}.yaml"), _workload(case),
                                   os.path.join(out, f"{case}_{hardware}_{int(fused)}"), None, opts)
    except Exception as exc:  # noqa: BLE001 - a case Stream cannot solve is reported, not fatal
        return {"case": case, "hardware": hardware, "fused": fused, "error": f"{type(exc).__name__}: {exc}"[:300]}
    wall = time.perf_counter() - t0
    energy = 0.0
    transfer = 0.0
    nodes: dict = {}
    tiling = []
    for ga in est.context.get("group_allocations").values():
        tiling += [[list(t) for t in g.get("intra_core_tiling") or []] for g in ga.get("fused_groups") or []]
        e = ga.get("energy") or (ga.get("performance") or {}).get("energy") or {}
        energy += float(e.get("total_pj", 0.0))
        transfer += float(e.get("transfer_pj_per_iteration", 0.0))
        tilings = {k: (v or {}).get("inter_core_tiling") for k, v in (ga.get("mapping_nodes") or {}).items()}
        for k, v in ((ga.get("performance") or {}).get("nodes") or {}).items():
            nodes[k] = {"latency_cycles": v.get("latency_cycles"), "n_cores": v.get("n_cores"),
                        "mac_spatial_utilization": v.get("mac_spatial_utilization"),
                        "ideal_compute_cycles": v.get("ideal_compute_cycles"), "fallback": v.get("fallback"),
                        "inter_core_tiling": tilings.get(k)}
    return {"case": case, "hardware": hardware, "fused": fused, "cycles": est.cycles, "groups": len(est.group_cycles),
            "energy_pj": energy, "transfer_pj_per_iteration": transfer, "nodes": nodes, "wall_s": wall,
            "macs": est.context.get("total_mac_ops"), "slots": slots,
            "intra_core_tiling": tiling}


def zigzag_share(core: str, shape: str, mapping: str | None, out: str) -> dict:
    """ZigZag's latency-optimal cost of one conv share on Stream's core YAML ``core`` (``cores/CORE.yaml``), as
    ZigZag's own API runs it: the YAML without Stream's own keys (``type``, ``operator_types``,
    ``operand_precision``, ``banks``) and with a DRAM level on top (the off-chip core's: 1000 pJ per 64-bit access,
    a 64-bit port), the share as a one-node ONNX graph; ``mapping``: a ZigZag mapping YAML, default its own search
    of the unrolling (one loop per array dimension). Returns ZigZag's energy (pJ) and latency (cycles)."""
    import yaml
    from onnx import TensorProto, helper, save
    from zigzag.api import get_hardware_performance_zigzag

    cin, cout, ih, iw = (int(v) for v in shape.split(","))
    x = helper.make_tensor_value_info("x", TensorProto.INT8, [1, cin, ih, iw])
    y = helper.make_tensor_value_info("y", TensorProto.INT8, [1, cout, ih - 2, iw - 2])
    w = helper.make_tensor("w", TensorProto.INT8, [cout, cin, 3, 3], [0] * (cout * cin * 9))
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[1, 1], pads=[0, 0, 0, 0],
                            name="conv")
    wl = os.path.join(out, f"conv_{cin}_{cout}_{ih}_{iw}.onnx")
    save(helper.make_model(helper.make_graph([node], "share", [x], [y], [w])), wl)
    with open(os.path.join(_hw_dir(), "cores", f"{core}.yaml")) as f:
        d = yaml.safe_load(f)
    for k in ("type", "operator_types", "operand_precision", "banks"):
        d.pop(k, None)
    ops = ["I1, fh", "I1, tl", "I2, fh", "I2, tl", "O, fh", "O, tl", "O, fl", "O, th"]
    d["memories"]["dram"] = {"size": 10_000_000_000, "r_cost": 1000, "w_cost": 1000, "area": 0, "latency": 1,
                             "operands": ["I1", "I2", "O"], "served_dimensions": list(d["operational_array"]["dimensions"]),
                             "ports": [{"name": "rw_port_1", "type": "read_write", "bandwidth_min": 64,
                                        "bandwidth_max": 64, "allocation": ops}]}
    hw = os.path.join(out, f"{core}_with_dram.yaml")
    with open(hw, "w") as f:
        yaml.safe_dump(d, f, sort_keys=False)
    mp = mapping or os.path.join(out, "generated_mapping.yaml")
    if mapping is None:
        with open(mp, "w") as f:
            yaml.safe_dump([{"name": "default", "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}], f)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        e, lat, _ = get_hardware_performance_zigzag(workload=wl, accelerator=hw, mapping=mp, opt="latency",
                                                    dump_folder=os.path.join(out, f"zz_{core}"),
                                                    loma_show_progress_bar=False)
    return {"core": core, "share": shape, "mapping": mapping or "searched", "energy_pj": e, "cycles": lat,
            "wall_s": time.perf_counter() - t0}


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", default="2conv_16_16,2conv_32_32,attention_head,swiglu,resnet_subgraph,conv_relu_gemm")
    ap.add_argument("--hardware", default="tpu_like_quad_core", help="comma-separated names of Stream's YAMLs")
    ap.add_argument("--zigzag-share", help="CORE:CIN,COUT,IH,IW[:MAPPING]: ZigZag alone on one conv share")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.zigzag_share:
        core, shape, *mp = args.zigzag_share.split(":")
        print(json.dumps(zigzag_share(core, shape, mp[0] if mp else None, out)))
        return 0
    os.environ["NPUKIT_STREAM_OUT"] = out
    result = {"hardware": [hardware_summary(h) for h in HARDWARE], "runs": []}
    for hardware in args.hardware.split(","):
        for case in args.cases.split(","):
            for fused in (False, True):
                result["runs"].append(solve(case, hardware, fused, out))
                print(json.dumps(result["runs"][-1])[:200], file=sys.stderr, flush=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
