"""Stream's multi-core hardware YAMLs read by npukit (``npukit.sim.stream_io``, ``npukit sim --arch stream:...``),
on two of Stream's own chip files copied into tests/data/stream_hw (no Stream install needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, Layer, NpukitError, VectorOp, Workload
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.stream_io import load_stream_hardware

HW = Path(__file__).parent / "data" / "stream_hw"


def test_eyeriss_dual_core_reads_its_cores_links_bus_and_dram(capsys) -> None:
    m = load_stream_hardware(HW / "eyeriss_like_dual_core.yaml")
    # two eyeriss-like MAC cores (loop-nest cores of the core YAML, 14 x 12), the SIMD core; the pooling core is
    # named in a warning
    assert [c.kind for c in m.cores] == ["mac", "mac", "simd"]
    assert "pooling.yaml" in capsys.readouterr().err
    nest = m.cores[0].nest
    assert nest is not None and nest.array.dims == {"D1": 14, "D2": 12} and m.cores[1].nest is nest
    assert not m.cores[0].vector_unit and m.cores[2].arch.vector.lanes == 64
    # int16 operands and int16 accumulator (the core's operand_precision)
    assert nest.bits == {"I": 16, "W": 16, "O": 16, "O_final": 16}
    # the 32-bit links, the 128-bit bus to the SIMD core, the 64-bit off-chip port (bits per cycle / 8)
    assert m.interconnect.bandwidth_bytes_per_cycle == 4 and m.bus.bandwidth_bytes_per_cycle == 16
    assert m.dram.total_bandwidth == 8
    # the chip's own costs price DRAM: offchip.yaml's 1000 pJ per 64-bit access
    assert m.table is not None and m.energy_table == "stream-eyeriss_like_dual_core"
    assert m.table.dram_bit() == pytest.approx(1000 / 64)


def test_tpu_like_quad_core_widths_and_a_simulation(capsys) -> None:
    m = load_stream_hardware(HW / "tpu_like_quad_core.yaml")
    assert [c.kind for c in m.cores].count("mac") == 4 and m.cores[-1].kind == "simd"
    nest = m.cores[0].nest
    assert nest.array.dims == {"D1": 32, "D2": 32}
    assert nest.bits["I"] == 8 and nest.bits["O"] == 32  # int8 operands, int32 accumulator
    wl = Workload("g", [Layer("G1", 64, 32, 32), VectorOp("Relu", "other", 64 * 32), Layer("G2", 64, 32, 32)])
    res = simulate_multicore(wl, m, "chain/split")
    rows = {r["name"]: r for r in res.rows()}
    # the loop-nest energy of each share is in the ledger at the YAML's costs, and the relu crosses the bus
    assert any(k.startswith("energy_nest:") for k in rows["G1"]) and rows["Relu"]["bus_bytes"] > 0
    assert 0 < res.energy_pj < float("inf") and res.total_cycles > 0


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "hw"
    shutil.copytree(HW, dst)
    return dst


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.replace("offchip_core_id: 4", "offchip_core_id: 9"), "offchip_core_id"),
    (lambda t: t.replace("0: eyeriss_like.yaml", "0: missing.yaml"), "missing.yaml"),
    (lambda t: t.replace("bandwidth: 128", "bandwidth: -1"), "at least 1 bit"),
    (lambda t: t.replace("type: bus", "typo: bus"), "core_connectivity"),
    (lambda t: "- just\n- a list\n", "not a Stream hardware file"),
    (lambda t: t.replace("cores: [0, 1]\n    bandwidth: 32", "cores: [0, 1]\n    bandwidth: [32"), "not valid YAML"),
    # a bool or a float is no core id (True == 1 picked core 1); 00 is the key 0 again (the parser kept the last)
    (lambda t: t.replace("offchip_core_id: 4", "offchip_core_id: true"), "offchip_core_id True"),
    (lambda t: t.replace("offchip_core_id: 4", "offchip_core_id: 7"), "offchip_core_id 7"),
    (lambda t: t.replace("offchip_core_id: 4", "offchip_core_id: 4.0"), "offchip_core_id 4.0"),
    (lambda t: t.replace("  1: eyeriss_like.yaml", "  00: eyeriss_like.yaml"), "'00' is written twice"),
    (lambda t: t.replace("cores:\n", "cores:\n" + "".join(f"  {i}: simd.yaml\n" for i in range(100, 1200))),
     "at most 1,024"),
    # loose values that loaded: '01' read as cores [0, 1], true as 1 bit, '32' as 32; a 1e-300 link gave 2e301 cycles;
    # one pair linked twice at two widths
    (lambda t: t.replace("cores: [0, 1]\n    bandwidth: 32", "cores: '01'\n    bandwidth: 32"), "list of core ids"),
    (lambda t: t.replace("unit_energy_cost: 0", "unit_energy_cost: true"), "unit_energy_cost must be a number"),
    (lambda t: t.replace("cores: [0, 1]\n    bandwidth: 32", "cores: [0, 1]\n    bandwidth: true"), "numbers"),
    (lambda t: t.replace("cores: [0, 1]\n    bandwidth: 32", "cores: [0, 1]\n    bandwidth: '32'"), "numbers"),
    (lambda t: t.replace("cores: [0, 1]\n    bandwidth: 32", "cores: [0, 1]\n    bandwidth: 1.0e-300"), "at least 1 bit"),
    (lambda t: t.replace("core_connectivity:\n", "core_connectivity:\n  - {type: link, cores: [1, 0], bandwidth: 64}\n"),
     "joined by two links"),
])
def test_bad_files_raise_one_clear_error(tmp_path, edit, needle) -> None:
    d = _copy(tmp_path)
    p = d / "eyeriss_like_dual_core.yaml"
    p.write_text(edit(p.read_text()))
    with pytest.raises(ConfigError, match=needle):
        load_stream_hardware(p)


def test_a_memory_whose_write_costs_and_read_does_not_is_refused(tmp_path) -> None:
    # before, ZeroDivisionError (w_cost / r_cost); both 0 is a free memory
    import re

    d = _copy(tmp_path)
    core = d / "cores" / "eyeriss_like.yaml"
    core.write_text(re.sub(r"r_cost: [0-9.]+", "r_cost: 0", core.read_text()))
    with pytest.raises(ConfigError, match="r_cost 0 and w_cost"):
        load_stream_hardware(d / "eyeriss_like_dual_core.yaml", warn=False)


def test_no_mac_core_is_refused(tmp_path) -> None:
    d = _copy(tmp_path)
    p = d / "eyeriss_like_dual_core.yaml"
    p.write_text(p.read_text().replace("0: eyeriss_like.yaml", "0: simd.yaml").replace("1: eyeriss_like.yaml",
                                                                                       "1: simd.yaml"))
    with pytest.raises(ConfigError, match="no MAC core"):
        load_stream_hardware(p)


def test_cli_runs_a_stream_chip_and_refuses_a_bad_one(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    argv = ["sim", "--arch", f"stream:{HW / 'eyeriss_like_dual_core.yaml'}", "--workload", "gemm:M=64,N=32,K=48",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "eyeriss_like_dual_core" in printed
    assert len(list(out.glob("*_timeline.png"))) == 1
    refused(["sim", "--arch", f"stream:{tmp_path / 'nope.yaml'}", "--out", str(tmp_path / "o2")], capsys, "nope.yaml")
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("content, needle", [
    (b"a: " + b"[" * 100000 + b"]" * 100000, "nests"),  # libyaml's parser used to crash the process
    (b"".join(b" " * (2 * i) + b"k%d:\n" % i for i in range(200)), "nests more than"),
    (b"\xff\xfe\x00name: x", "not UTF-8"),
    (b"a: &x [1, 2]\nb: [*x, *x]\n", "alias"),  # a "billion laughs" document expands aliases
])
def test_hostile_yaml_is_refused_by_both_readers(tmp_path, content, needle) -> None:
    from npukit.sim.zigzag_io import load_zigzag_hardware

    p = tmp_path / "bad.yaml"
    p.write_bytes(content)
    for load in (load_stream_hardware, load_zigzag_hardware):
        with pytest.raises(ConfigError, match=needle):
            load(p)


def test_the_ledger_carries_the_chips_own_table(tmp_path) -> None:
    from npukit.sim import Ledger
    from npukit.sim.report_model import resolve_table

    m = load_stream_hardware(HW / "eyeriss_like_dual_core.yaml")
    wl = Workload("g", [Layer("G1", 64, 32, 32), VectorOp("Relu", "other", 64 * 32), Layer("G2", 64, 32, 32)])
    res = simulate_multicore(wl, m, "none/split")
    led = Ledger.load(res.ledger.save(tmp_path / "l.ledger.json"))
    tab = resolve_table(led, None, "l")  # no file names it: the ledger's own copy
    assert tab.name == m.energy_table and led.energy(tab) == pytest.approx(res.energy_pj)
    led.meta["energy_table_data"]["dram"]["pj_per_access"] = float("nan")  # a corrupted copy is refused
    with pytest.raises(Exception, match="dram.pj_per_access"):
        resolve_table(led, None, "l")


def test_a_share_too_large_for_the_core_is_mapped_with_dram_on_top() -> None:
    """A 3x3 conv of 512 -> 512 channels has 2.25 MiB of int8 weights, more than a tpu_like core holds: its share is
    mapped with DRAM as the top level, and the weights it reads from DRAM are at least all of them."""
    from npukit.sim import conv_layer
    from npukit.sim._multicore_nest import map_share, nest_share, on_chip
    from npukit.sim.nest_sim import nest_layer

    m = load_stream_hardware(HW / "tpu_like_quad_core.yaml")
    conv = conv_layer("big", 9, 9, 3, 3, 512, 512, 1)
    with pytest.raises(ConfigError, match="no loop order fits"):  # on chip alone it does not fit
        map_share(on_chip(m.cores[0].nest), nest_layer(conv), "edp")
    share = nest_share(conv, m.cores[0].nest, (8, 8, 8), "edp", {}, m.table.dram_bit())
    assert share.fills >= 3 * 3 * 512 * 512 and share.ifmap >= 7 * 7 * 512 and share.final == 7 * 7 * 512
    assert share.cycles > 0 and not any(r[0] == "nest:offchip" for r in share.records)
    res = simulate_multicore(Workload("w", [conv]), m, "none/split")
    assert 0 < res.energy_pj < float("inf") and res.rows()[0]["dram_bytes"] >= 3 * 3 * 512 * 512


@pytest.mark.parametrize("old, new, needle", [
    ("r_cost: 1.0", "r_cost: .nan", "r_cost"),
    ("unit_energy: 0.5", "unit_energy: .inf", "unit_energy"),
    ("size: 512", "size: 1e400", "size"),
    ("bandwidth_max: 8", "bandwidth_max: true", "bandwidth_max"),
])
def test_a_core_file_with_non_finite_or_wrong_numbers_is_refused(tmp_path, old, new, needle) -> None:
    from npukit.sim.zigzag_io import load_zigzag_hardware

    d = _copy(tmp_path)
    core = d / "cores" / "eyeriss_like.yaml"
    core.write_text(core.read_text().replace(old, new, 1))
    for load, arg in ((load_stream_hardware, d / "eyeriss_like_dual_core.yaml"), (load_zigzag_hardware, core)):
        with pytest.raises(ConfigError, match=needle):
            load(arg)


@pytest.mark.parametrize("new", ["bandwidth: .nan", "bandwidth: .inf"])
def test_non_finite_link_bandwidths_are_refused(tmp_path, new) -> None:
    d = _copy(tmp_path)
    p = d / "eyeriss_like_dual_core.yaml"
    p.write_text(p.read_text().replace("bandwidth: 128", new))
    with pytest.raises(ConfigError, match="finite"):
        load_stream_hardware(p)


def test_ironwood_mxus_vpus_shared_vmem_hbm_links_and_ici() -> None:
    """tpu_v7_ironwood: per TensorCore two MXUs (listing the matrix operator types), a VPU and a VMEM core sharing one
    memory; four HBM links; die-to-die and ICI links between the TensorCores."""
    m = load_stream_hardware(HW / "tpu_v7_ironwood.yaml", warn=False)
    assert len(m.mac_cores) == 8 and all(m.cores[i].nest is not None for i in m.mac_cores)
    assert m.cores[0].nest.array.units == 256 * 256 * 2
    # npukit's one simd core: the four VPUs pooled (4 x 8 x 128 x 4 lanes), reading the MXUs' results in place from
    # each TensorCore's shared VMEM (its read port, four of them), at no link energy
    (s,) = m.simd_cores
    assert m.cores[s].arch.vector.lanes == 4 * 8 * 128 * 4 and m.cores[s].name == "simd2+6+10+14"
    assert m.bus is not None and m.bus.energy_pj_per_bit == 0 and m.bus.bandwidth_bytes_per_cycle > 0
    # one DRAM channel per HBM link (13,400 bits a cycle each, the four together the 53,600-bit port), a core at
    # most its chiplet's link; the interconnect the narrowest core-to-core link, the 364-bit ICI between the chips
    assert (m.dram.channels, m.dram.bandwidth_bytes_per_cycle) == (4, 13400 / 8)
    assert m.cores[0].arch.dram_bandwidth_bytes_per_cycle == 13400 / 8
    assert m.interconnect.bandwidth_bytes_per_cycle == 364 / 8
    b = m.cores[0].arch.bits
    assert (b.input, b.pe_psum) == (16, 32)  # bf16 operands, the fp32 accumulator
    wl = Workload("s", [Layer("G", 1, 32, 16), VectorOp("Silu", "silu", 32), Layer("D", 1, 16, 32)])
    res = simulate_multicore(wl, m, "chain/split")
    rows = {r["name"]: r for r in res.rows()}
    assert rows["Silu"]["core_ids"] == str(s) and rows["Silu"]["bus_bytes"] == 2 * 32 * 4  # the VPU's fp32


def test_simba_36_chiplets_behind_one_64_bit_port() -> None:
    """simba: 36 loop-nest chiplets on a 256-bit mesh, six 256-bit column links to a DRAM controller whose port is
    64 bits: six channels that together carry the port's 8 B/cycle; no vector core, so the chiplets keep theirs."""
    m = load_stream_hardware(HW / "simba.yaml", warn=False)
    assert len(m.mac_cores) == 36 and m.simd_cores == [] and m.bus is None
    assert all(c.vector_unit and c.nest is not None for c in m.cores)
    assert m.dram.channels == 6 and m.dram.total_bandwidth == 8.0
    assert m.cores[0].arch.dram_bandwidth_bytes_per_cycle == 8.0
    assert m.interconnect.bandwidth_bytes_per_cycle == 32.0 and m.interconnect.hops(36) == 4.0
    assert (m.cores[0].arch.bits.pe_psum, m.cores[0].arch.bits.output) == (24, 8)  # int24 accumulator, int8 operands


def test_operand_bits_override_and_a_core_without_an_accumulator() -> None:
    m = load_stream_hardware(HW / "tpu_like_quad_core.yaml", operand_bits=16, warn=False)
    assert m.cores[0].nest.bits == {"I": 16, "W": 16, "O": 32, "O_final": 16}
    assert m.cores[m.simd_cores[0]].arch.vector.bits == 16


def test_a_split_tie_in_cycles_goes_to_the_lower_energy() -> None:
    """On simba's 36 chiplets behind one 64-bit port, several splits of a small GEMM take the same cycles (the port
    bounds them); under the latency objective the search keeps the one with the least energy among them."""
    from npukit.sim.multicore_sim import _Run, _table
    from npukit.sim.schedule import layer_splits, split_label

    m = load_stream_hardware(HW / "simba.yaml", warn=False)
    run = _Run(Workload("x", []), m, _table(m, None), {})
    layer = Layer("up", 1, 32, 16)
    dim, _ = run.best_dim(layer, m.mac_cores, "", "")
    n = len(m.mac_cores)
    scored = {split_label(d, k, n): (max(p.busy for p in ps), sum(run._energy(p) for p in ps))
              for d, k in layer_splits(n, fewer=False) for ps in [run.gemm_parts(layer, m.mac_cores[:k], d, "", "")]}
    fastest = min(c for c, _ in scored.values())
    tied = [d for d, (c, _) in scored.items() if c == fastest]
    assert len(tied) > 1 and scored[dim] == min((scored[d] for d in tied), key=lambda v: v[1])


def test_the_text_describes_loop_nest_and_simd_cores_as_they_are(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["sim", "--arch", f"stream:{HW / 'eyeriss_like_dual_core.yaml'}", "--workload", "gemm:M=64,N=32,K=48",
                 "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "loop-nest core: array D1 14 x D2 12 (168 PEs" in text and "sram_1M 1,048,576 B" in text
    assert "vector unit 64 lanes" in text and "energy table stream-eyeriss_like_dual_core" in text
    assert "horowitz45" not in text


def test_mac_cores_skip_pooling_and_simd_operator_types() -> None:
    """A core is a MAC core with a 2-D or larger array listing no operator types or only matrix ones (ironwood's
    MXUs); a 1-D array or elementwise types make a SIMD core; a pooling-only core and the off-chip core are neither."""
    from npukit.sim.stream_io import _kind

    core = {"type": "compute", "operational_array": {"sizes": [32, 32]}}
    assert _kind(core) == "mac"
    assert _kind({**core, "operator_types": ["MatMul", "Gemm", "Conv", "Einsum"]}) == "mac"
    assert _kind({**core, "operational_array": {"sizes": [3, 3, 8]}, "operator_types": ["MaxPool", "AveragePool"]}) \
        == "other"
    assert _kind({**core, "operational_array": {"sizes": [64]}, "operator_types": ["Add", "Relu"]}) == "simd"
    assert _kind({**core, "operational_array": {"sizes": [8, 128, 4]}, "operator_types": ["Add", "Softmax"]}) == "simd"
    assert _kind({"type": "offchip", "operational_array": {"sizes": []}}) == "other"


def test_quoted_core_ids_load_as_the_numbers_do(tmp_path) -> None:
    d = _copy(tmp_path)
    p = d / "eyeriss_like_dual_core.yaml"
    text = p.read_text()
    for i in range(5):
        text = text.replace(f"  {i}: ", f'  "{i}": ', 1)
    p.write_text(text.replace("offchip_core_id: 4", 'offchip_core_id: "4"').replace("cores: [0, 1]", "cores: ['0', '1']"))
    quoted = load_stream_hardware(p, warn=False)
    plain = load_stream_hardware(HW / "eyeriss_like_dual_core.yaml", warn=False)
    assert [c.name for c in quoted.cores] == [c.name for c in plain.cores] and quoted.dram == plain.dram


def test_mac_cores_from_different_core_files_each_run_their_own_model(tmp_path) -> None:
    """Two tpu_like and two eyeriss_like cores on one chip: each core maps its share with its own YAML, the ledger
    declares each shared ``nest:`` component once (naming both models), and the split is no slower than the even split
    over all four (since 2026-12-07 the cut that gives the tpu_like cores all of it is among the candidates, and wins:
    32,863 cycles where the cut fitted over all four took 40,125)."""
    d = _copy(tmp_path)
    p = d / "tpu_like_quad_core.yaml"
    text = p.read_text()
    for cid in (2, 3):
        text = text.replace(f"{cid}: ./cores/tpu_like.yaml", f"{cid}: ./cores/eyeriss_like.yaml")
    p.write_text(text)
    m = load_stream_hardware(p, warn=False)
    names = [c.nest.name for c in m.cores if c.kind == "mac"]
    assert sorted(set(names)) == ["eyeriss_like", "tpu_like"]
    res = simulate_multicore(Workload("g", [Layer("G", 256, 256, 256)]), m, "none/split")
    busy = [res.core_busy[i] for i, c in enumerate(m.cores) if c.kind == "mac"]
    assert any(b > 0 for b in busy) and max(busy) <= res.total_cycles
    from npukit.sim import load_table
    from npukit.sim._multicore_cost import even_bounds
    from npukit.sim.multicore_sim import _Run

    g = Layer("G", 256, 256, 256)
    r = _Run(Workload("g", [g]), m, m.table or load_table("horowitz45"), {})
    even = max(p.busy for p in r.gemm_parts(g, m.mac_cores, "N", "", "", bounds=even_bounds(256, 4)))
    assert res.total_cycles <= even and res.total_cycles < 40_125  # (the cut fitted over all four, before)
    src = res.ledger.components["nest:mac"]["source"]
    assert "tpu_like" in src and "eyeriss_like" in src
    assert 0 < res.energy_pj < float("inf")


def test_a_port_allocation_that_leaves_out_a_transfer_is_one_line(tmp_path, capsys) -> None:
    # the weight SRAM's read port carried no 'I2, tl': the mapper raised ValueError deep in the cost model (exit 1)
    d = _copy(tmp_path)
    core = d / "cores" / "eyeriss_like.yaml"
    text = core.read_text()
    i = text.index("sram_64KB")
    core.write_text(text[:i] + text[i:].replace("allocation:\n          - I2, tl", "allocation: []", 1))
    out = tmp_path / "out"
    for arch in (f"stream:{d / 'eyeriss_like_dual_core.yaml'}", f"zigzag:{core}"):
        assert main(["sim", "--arch", arch, "--workload", "gemm:M=64,N=64,K=64", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "'I2, tl'" in err and "sram_64KB" in err and "\n" not in err and not out.exists()


def test_dram_writes_are_priced_at_the_offchip_memorys_w_cost(tmp_path) -> None:
    # w_cost was never read: writes cost r_cost, and a NaN or negative w_cost loaded silently
    d = _copy(tmp_path)
    off = d / "cores" / "offchip.yaml"
    text = off.read_text()
    assert "w_cost: 1000" in text
    off.write_text(text.replace("w_cost: 1000", "w_cost: 2000"))
    m = load_stream_hardware(d / "eyeriss_like_dual_core.yaml", warn=False)
    assert m.table.dram_bit(write=True) == pytest.approx(2 * m.table.dram_bit())
    for bad in (".nan", "-1"):
        off.write_text(text.replace("w_cost: 1000", f"w_cost: {bad}"))
        with pytest.raises(NpukitError, match="write_pj_per_access"):  # the energy table's own error, one line
            load_stream_hardware(d / "eyeriss_like_dual_core.yaml", warn=False)


@pytest.mark.slow  # a second or more: the whole suite runs it
def test_mac_cores_from_different_files_give_the_same_result_in_either_order(tmp_path) -> None:
    # each core's own widths and buffers, the lead core by PEs: before, the first listed core's Arch (its operand
    # and psum widths, its SRAM) was every core's, so listing the eyeriss cores first moved a GEMM 1.7x
    res = []
    for first in ("tpu_like", "eyeriss_like"):
        d = _copy(tmp_path / first)
        p = d / "tpu_like_quad_core.yaml"
        text = p.read_text()
        other = "eyeriss_like" if first == "tpu_like" else "tpu_like"
        for cid, core in ((0, first), (1, first), (2, other), (3, other)):
            text = text.replace(f"{cid}: ./cores/tpu_like.yaml", f"{cid}: ./cores/{core}.yaml")
        p.write_text(text)
        m = load_stream_hardware(p, warn=False)
        assert {m.cores[i].nest.name for i in m.mac_cores[:2]} == {"tpu_like"}  # more PEs lead
        wl = Workload("g", [Layer("a", 128, 128, 256), Layer("b", 128, 256, 128)])
        res.append([(r.total_cycles, r.energy_pj) for r in (simulate_multicore(wl, m, s) for s in ("none/split",
                                                                                                     "chain/split"))])
    assert res[0] == [(c, pytest.approx(e, rel=1e-12)) for c, e in res[1]]


def test_dram_transfers_pay_the_energy_of_the_link_to_the_offchip_core(tmp_path) -> None:
    # Stream charges every link a transfer crosses per bit; the links (or the bus) to the off-chip core were left
    # out (fusemax's 512 pJ/bit links: its DRAM energy 18x too low)
    d = _copy(tmp_path)
    p = d / "tpu_like_quad_core.yaml"
    base = load_stream_hardware(p, warn=False).table
    text = p.read_text()
    p.write_text(text.replace("    bandwidth: 128        # wider", "    bandwidth: 128\n    unit_energy_cost: 2.5  # wider"))
    table = load_stream_hardware(p, warn=False).table
    for write in (False, True):
        assert table.dram_bit(write=write) == pytest.approx(base.dram_bit(write=write) + 2.5)
    assert "2.5 pJ/bit" in table.sections["dram"]["source"]


def test_what_a_chip_file_says_and_npukit_leaves_out_is_named(tmp_path) -> None:
    # each was dropped silently: a misspelt core key (it changed the widths), a second off-chip memory, a bus that
    # holds no SIMD core; and fp8_e4m3 read as 843 bits
    from npukit.sim.stream_io import _bits

    assert (_bits("fp8_e4m3", 8), _bits("bf16", 8), _bits("int24", 8), _bits("float", 8)) == (8, 16, 24, 8)
    d = _copy(tmp_path)
    core = d / "cores" / "eyeriss_like.yaml"
    core.write_text(core.read_text() + "\noperand_precison: {input: int8}\n")
    off = d / "cores" / "offchip.yaml"
    text = off.read_text()
    i, j = text.index("memories:") + len("memories:\n"), text.index("operational_array:")
    off.write_text(text[:j] + text[i:j].replace("dram:", "hbm:", 1) + text[j:])  # a second memory
    chip = d / "eyeriss_like_dual_core.yaml"
    chip.write_text(chip.read_text().replace("cores: [0, 1, 2, 3, 4]", "cores: [0, 1, 4]"))
    got: list[str] = []
    load_stream_hardware(chip, warnings=got)
    text = "\n".join(got)
    assert "field 'operand_precison'" in text and "memories after its first" in text
    assert "bus joining cores [0, 1, 4]" in text and "charged to DRAM transfers" in text


def test_a_link_of_a_core_npukit_leaves_out_is_no_dram_channel_or_link_width(tmp_path) -> None:
    # a 16-bit link from the pooling core (left out) to DRAM became the only DRAM channel (2 B/cycle for 8), and a
    # narrow pooling link set every core-to-core link's width
    d = _copy(tmp_path)
    p = d / "tpu_like_quad_core.yaml"
    base = load_stream_hardware(p, warn=False)
    text = p.read_text()
    p.write_text(text.replace("core_connectivity:\n", "core_connectivity:\n  - {type: link, cores: [4, 6], bandwidth: 16}\n"
                              "  - {type: link, cores: [4, 5], bandwidth: 1}\n", 1))
    m = load_stream_hardware(p, warn=False)
    assert m.dram == base.dram and m.interconnect == base.interconnect


def test_a_chip_with_no_link_between_its_mac_cores_says_what_it_takes(tmp_path) -> None:
    d = _copy(tmp_path)
    p = d / "eyeriss_like_dual_core.yaml"
    text = p.read_text()
    i, j = text.index("core_connectivity:"), text.index("  # ─── shared bus")
    p.write_text(text[:i] + "core_connectivity:\n" + text[j:])
    got: list[str] = []
    m = load_stream_hardware(p, warnings=got)
    assert m.interconnect.bandwidth_bytes_per_cycle == 8 and any("no link joins two cores" in w for w in got)


@pytest.mark.parametrize("core, old, new", [
    ("eyeriss_like.yaml", "bandwidth_max: 8\n", "bandwidth_max: 8.5\n"),  # was cut to 8 bits
    ("eyeriss_like.yaml", "bandwidth_min: 8\n", "bandwidth_min: 16\n"),  # min above max loaded
    ("offchip.yaml", "bandwidth_max: 64", "bandwidth_max: '64'"),  # read as 64
    ("offchip.yaml", "bandwidth_max: 64", "bandwidth_max: 4.5"),  # read as 4
])
def test_a_port_width_that_is_not_whole_bits_is_refused(tmp_path, core, old, new) -> None:
    d = _copy(tmp_path)
    p = d / "cores" / core
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match="whole"):
        load_stream_hardware(d / "eyeriss_like_dual_core.yaml", warn=False)
