"""benchmarks/bench_vs_stream.py without Stream: the arch it builds from a Stream hardware summary and the off-chip
round trips of Stream's per-layer mode."""

from __future__ import annotations

import pytest

from npukit.benchmarks.bench_vs_stream import (
    node_round_trip_bytes,
    npukit_arch,
    npukit_workload,
    per_node,
    stream_table,
    stream_terms,
)
from npukit.sim import EnergyTable, VectorOp
from npukit.sim.multicore_sim import simulate_multicore


def _hw() -> dict:
    mem = [{"name": "rf", "size_bits": 64, "r_cost": 0.1, "w_cost": 0.1, "port_bits": 8},
           {"name": "sram", "size_bits": 2 * 2**20 * 8, "r_cost": 416.0, "w_cost": 416.0, "port_bits": 2048}]
    core = {"type": "compute", "array": [32, 32], "mac_pj": 0.04, "memories": mem,
            "operand_precision": {"input": "int8", "accumulator": "int32"}}
    off = {"type": "offchip", "array": None, "mac_pj": 0, "memories": [
        {"name": "dram", "size_bits": 2**40, "r_cost": 1000.0, "w_cost": 1000.0, "port_bits": 64}]}
    return {"name": "tpu_like_quad_core", "cores": {"0": core, "1": core, "2": core, "3": core, "4": off},
            "offchip_core_id": 4, "links": [{"type": "link", "cores": [0, 1], "bandwidth_bits": 32,
                                             "unit_energy_cost": 0}]}


def test_arch_widths_by_name() -> None:
    march = npukit_arch(_hw(), 8)
    b = march.cores[0].arch.bits
    assert (b.input, b.weight, b.output) == (8, 8, 8)  # the output is not the 32-bit psum width
    assert (b.pe_psum, b.psum_buffer) == (32, 32)  # the core's operand_precision accumulator
    assert len(march.cores) == 4 and march.cores[0].arch.dram_bandwidth_bytes_per_cycle == 8


def _hw_simd() -> dict:
    hw = _hw()
    simd = {"type": "zigzag.compute", "array": [64], "mac_pj": 0.1, "memories": hw["cores"]["0"]["memories"]}
    hw["cores"] = {**hw["cores"], "5": simd}
    hw["links"] = hw["links"] + [{"type": "bus", "cores": [0, 1, 2, 3, 4, 5], "bandwidth_bits": 128,
                                  "unit_energy_cost": 0}]
    return hw


def test_layer_by_layer_vector_ops_go_through_dram_and_per_node_serialises_them() -> None:
    # layer by layer on the vector-less cores, each vector op reads its inputs from and writes its result to DRAM
    # (the 8 B/cycle off-chip port), streamed beside its lanes; Stream's per-layer round trip moves the same bytes
    # for a ReLU and an Add, in series with the op's lanes
    hw = _hw_simd()
    wl, bits = npukit_workload("resnet_subgraph")
    march = npukit_arch(hw, bits)
    table = EnergyTable.from_dict(stream_table(hw), origin="test")
    res = simulate_multicore(wl, march, "none/split", table=table)
    rows = {r["name"]: r for r in res.rows()}
    assert rows["Relu1"]["bus_bytes"] == 0 and rows["Relu1"]["dram_bytes"] == 2 * 4096  # 2,048 bf16 elements in, out
    assert rows["Relu1"]["cycles"] == 2 * 4096 / 8
    cycles, pj, trip = per_node(res, wl, bits, march, table)
    want = res.total_cycles + sum(rows[op.name]["compute_cycles"] for op in wl.layers if op.kind == "vector")
    assert trip == (2 + 3) * 4096 and cycles == want and pj == pytest.approx(res.energy_pj)


def test_arch_reads_the_simd_core_and_its_bus() -> None:
    march = npukit_arch(_hw_simd(), 16)
    assert march.mac_cores == [0, 1, 2, 3] and not any(march.cores[i].vector_unit for i in march.mac_cores)
    assert len(march.simd_cores) == 1 and march.cores[march.simd_cores[0]].arch.vector.lanes == 64
    assert march.bus is not None and march.bus.bandwidth_bytes_per_cycle == 16
    assert npukit_arch(_hw(), 16).bus is None  # no SIMD core: the MAC cores keep their vector units


def test_round_trips_of_vector_nodes() -> None:
    assert node_round_trip_bytes(VectorOp("r", "other", 100), 16) == 2 * 200  # read x, write y
    assert node_round_trip_bytes(VectorOp("a", "add", 100, inputs=2), 16) == 3 * 200
    assert node_round_trip_bytes(VectorOp("s", "softmax", 128 * 128, reduce=128), 16) == 6 * 128 * 128 * 2
    wl, bits = npukit_workload("resnet_subgraph")
    assert bits == 16 and [op.kind for op in wl.layers] == ["conv", "vector", "conv", "vector"]


def test_stream_terms_add_up_to_its_latency() -> None:
    # Stream's fused attention head: 8 iterations of 6,489 cycles, the next starting 4,736 cycles after (overlap
    # 1,753), plus 1,334 of fill: 8 x 6,489 - 7 x 1,753 + 1,334 = 40,975
    slots = [{"cycles": 2048, "nodes": {}, "transfers": {"Transfer(I)": [1024, 1024]}},
             {"cycles": 4441, "nodes": {"Op1": 320.0}, "transfers": {}}]
    run = {"slots": [{"latency": {"total": 40975, "per_iteration": 6489, "overlap": 1753, "fill": 1334},
                      "slots": slots}]}
    t = stream_terms(run)
    assert t["iterations"] == 8 and t["groups"] == 1
    assert (t["node_slot_cycles"], t["transfer_slot_cycles"]) == (4441, 2048)
    assert stream_terms({"slots": []})["iterations"] == 0


def test_core_yaml_from_another_checkout_is_found_under_this_install(tmp_path, monkeypatch) -> None:
    """A --stream-json summary records absolute core-file paths; from another checkout the same file is looked up
    under this checkout's Stream install, and a file that is nowhere stops with one line."""
    import pytest

    from npukit.benchmarks import bench_vs_stream as bvs

    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    core = site / "stream" / "inputs" / "cores" / "eyeriss_like.yaml"
    core.parent.mkdir(parents=True)
    core.write_text("name: x\n")
    monkeypatch.setattr(bvs, "VENV", tmp_path / "venv")
    assert bvs.core_yaml(str(core)) == core
    elsewhere = "/nowhere/.peers/stream/lib/python3.12/site-packages/stream/inputs/cores/eyeriss_like.yaml"
    assert bvs.core_yaml(elsewhere) == core
    with pytest.raises(SystemExit, match="is not here"):
        bvs.core_yaml(elsewhere.replace("eyeriss_like", "missing"))


def _hw_ironwood(core_file: str) -> dict:
    """tpu_v7_ironwood's shape in a hardware summary: per TensorCore two MXUs (listing the MAC operator types), a
    VPU (an 8 x 128 x 4 array listing the vector types) and a VMEM core sharing one memory; each VMEM linked to the
    HBM core, the VMEMs joined by die-to-die (2,182 bits) and ICI (364 bits) links."""
    vmem = {"name": "vmem", "size_bits": 2**29, "r_cost": 23340.0, "w_cost": 25680.0, "port_bits": 98304}
    mxu = {"type": "zigzag.compute", "array": [256, 256, 2], "mac_pj": 0.076, "path": core_file,
           "memories": [{"name": "wreg", "size_bits": 32, "r_cost": 0.49, "w_cost": 0.49, "port_bits": 32}, vmem],
           "operator_types": ["MatMul", "Gemm", "Conv", "Einsum"],
           "operand_precision": {"input": "bf16", "accumulator": "fp32"}}
    vpu = {"type": "zigzag.compute", "array": [8, 128, 4], "mac_pj": 0.52, "memories": [vmem],
           "operator_types": ["Add", "Mul", "Relu", "Silu", "Softmax", "MaxPool"]}
    mem = {"type": "zigzag.memory", "array": [0, 0], "mac_pj": 0, "memories": [vmem]}
    hbm = {"type": "zigzag.offchip", "array": [0, 0], "mac_pj": 0, "memories": [
        {"name": "hbm3e", "size_bits": 2**45, "r_cost": 214400.0, "w_cost": 214400.0, "port_bits": 53600}]}
    cores = {}
    for tc in range(4):
        for i, c in enumerate((mxu, mxu, vpu, mem)):
            cores[str(4 * tc + i)] = c
    cores["16"] = hbm
    links = [{"type": "link", "cores": [3, 7], "bandwidth_bits": 2182, "unit_energy_cost": 0},
             {"type": "link", "cores": [11, 15], "bandwidth_bits": 2182, "unit_energy_cost": 0},
             {"type": "link", "cores": [7, 15], "bandwidth_bits": 364, "unit_energy_cost": 0}]
    links += [{"type": "link", "cores": [v, 16], "bandwidth_bits": 13400, "unit_energy_cost": 0} for v in (3, 7, 11, 15)]
    return {"name": "tpu_v7_ironwood", "cores": cores, "offchip_core_id": 16, "links": links,
            "memory_sharing": [[4 * tc + 3, 4 * tc, 4 * tc + 1, 4 * tc + 2] for tc in range(4)]}


def _core_yaml(tmp_path, sizes: list[int]) -> str:
    """A loop-nest core file in Stream's (ZigZag's) format: a weight register under a VMEM-like top memory."""
    dims = [f"D{i + 1}" for i in range(len(sizes))]
    port = "{{name: {n}, type: {t}, bandwidth_min: {lo}, bandwidth_max: {hi}, allocation: [{a}]}}"
    reads = ", ".join(f"'{o}, tl'" for o in ("I1", "I2", "O")) + ", 'O, th'"
    writes = ", ".join(f"'{o}, fh'" for o in ("I1", "I2", "O")) + ", 'O, fl'"
    text = f"""name: core
memories:
  wreg: {{size: 32, r_cost: 0.49, w_cost: 0.49, area: 0, latency: 1, operands: [I2], served_dimensions: [{dims[-1]}],
         ports: [{port.format(n="r", t="read", lo=32, hi=32, a="'I2, tl'")},
                 {port.format(n="w", t="write", lo=32, hi=32, a="'I2, fh'")}]}}
  vmem: {{size: 536870912, r_cost: 23340, w_cost: 25680, area: 0, latency: 1, operands: [I1, I2, O],
         served_dimensions: [{", ".join(dims)}],
         ports: [{port.format(n="r", t="read", lo=256, hi=98304, a=reads)},
                 {port.format(n="w", t="write", lo=256, hi=65536, a=writes)}]}}
operational_array: {{unit_energy: 0.076, unit_area: 1, dimensions: [{", ".join(dims)}], sizes: {sizes}}}
"""
    path = tmp_path / f"core_{'x'.join(map(str, sizes))}.yaml"
    path.write_text(text)
    return str(path)


def test_ironwood_mxus_are_mac_cores_its_vpus_the_simd_core_its_hbm_links_channels(tmp_path) -> None:
    from npukit.benchmarks.bench_vs_stream import mac_cores, simd_cores

    hw = _hw_ironwood(_core_yaml(tmp_path, [256, 256, 2]))
    # the MXUs list operator types, all the MAC ones: MAC cores; the VPUs list vector types; the VMEM and HBM none
    assert [cid for cid, _ in mac_cores(hw)] == ["0", "1", "4", "5", "8", "9", "12", "13"]
    assert [cid for cid, _ in simd_cores(hw)] == ["2", "6", "10", "14"]
    march = npukit_arch(hw, 16)
    assert len(march.mac_cores) == 8 and all(march.cores[i].nest is not None for i in march.mac_cores)
    assert march.cores[0].nest.array.units == 256 * 256 * 2
    # npukit's one simd core: the four VPUs pooled, 4 x 8 x 128 x 4 lanes, reading the MXUs' results in place
    # from each TensorCore's shared VMEM (its 98,304-bit read port, four of them), at no link energy
    (s,) = march.simd_cores
    assert march.cores[s].arch.vector.lanes == 4 * 4096
    assert march.bus is not None and march.bus.bandwidth_bytes_per_cycle == 4 * 98304 / 8
    assert march.bus.energy_pj_per_bit == 0
    # one DRAM channel per HBM link (13,400 bits a cycle each, 53,600 together, the HBM port), each core at most
    # its chiplet's link; the interconnect the narrowest core-to-core link, the ICI between the chips
    assert (march.dram.channels, march.dram.bandwidth_bytes_per_cycle) == (4, 13400 / 8)
    assert march.cores[0].arch.dram_bandwidth_bytes_per_cycle == 13400 / 8
    assert march.interconnect.bandwidth_bytes_per_cycle == 364 / 8
    b = march.cores[0].arch.bits
    assert (b.input, b.pe_psum) == (16, 32)  # bf16 operands, the fp32 accumulator
    res = simulate_multicore(npukit_workload("swiglu")[0], march, "none/split",
                             table=EnergyTable.from_dict(stream_table(hw), origin="test"))
    rows = {r["name"]: r for r in res.rows()}
    assert rows["Silu"]["core_ids"] == str(s) and rows["Silu"]["bus_bytes"] == 2 * 32 * 2


def test_simba_36_chiplets_behind_one_64_bit_port(tmp_path) -> None:
    """simba: 36 loop-nest chiplets on a 256-bit mesh, six 256-bit column links to a DRAM controller whose port is
    64 bits: six channels that together carry the port's 8 B/cycle; no vector core, so the chiplets keep theirs."""
    from npukit.benchmarks.bench_vs_stream import mac_cores, simd_cores

    chip = {"type": "compute", "array": [4, 4, 8], "mac_pj": 0.04, "path": _core_yaml(tmp_path, [4, 4, 8]),
            "memories": [{"name": "gb", "size_bits": 2**21, "r_cost": 10.0, "w_cost": 10.0, "port_bits": 1024}],
            "operand_precision": {"input": "int8", "accumulator": "int24"}}
    off = {"type": "zigzag.offchip", "array": [0, 0], "mac_pj": 0, "memories": [
        {"name": "dram", "size_bits": 10**10, "r_cost": 100.0, "w_cost": 100.0, "port_bits": 64}]}
    mesh = [[r * 6 + c, r * 6 + c + 1] for r in range(6) for c in range(5)] + \
        [[r * 6 + c, r * 6 + c + 6] for r in range(5) for c in range(6)]
    links = [{"type": "link", "cores": e, "bandwidth_bits": 256, "unit_energy_cost": 0} for e in mesh]
    links += [{"type": "link", "cores": [36, c], "bandwidth_bits": 256, "unit_energy_cost": 0} for c in range(6)]
    hw = {"name": "simba", "cores": {**{str(i): chip for i in range(36)}, "36": off}, "offchip_core_id": 36,
          "links": links}
    assert len(mac_cores(hw)) == 36 and simd_cores(hw) == []
    march = npukit_arch(hw, 8)
    assert len(march.mac_cores) == 36 and march.simd_cores == [] and march.bus is None
    assert all(c.vector_unit and c.nest is not None for c in march.cores)
    assert march.dram.channels == 6 and march.dram.total_bandwidth == 8.0
    assert march.cores[0].arch.dram_bandwidth_bytes_per_cycle == 8.0
    assert march.interconnect.bandwidth_bytes_per_cycle == 32.0 and march.interconnect.hops(36) == 4.0
    assert (march.cores[0].arch.bits.pe_psum, march.cores[0].arch.bits.output) == (24, 8)


def test_mac_cores_skip_pooling_and_simd_operator_types() -> None:
    from npukit.benchmarks.bench_vs_stream import mac_cores, simd_cores

    hw = _hw_simd()
    hw["cores"]["6"] = {"type": "compute", "array": [3, 3, 8], "mac_pj": 0.1, "memories": [],
                        "operator_types": ["MaxPool", "AveragePool"]}
    assert [c for c, _ in mac_cores(hw)] == ["0", "1", "2", "3"] and [c for c, _ in simd_cores(hw)] == ["5"]
