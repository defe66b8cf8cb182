"""benchmarks/bench_vs_stream.py without Stream: the arch it builds from a Stream hardware summary and the off-chip
round trips of Stream's per-layer mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.benchmarks.bench_vs_stream import (
    node_round_trip_bytes,
    npukit_arch,
    npukit_workload,
    per_node,
    stream_terms,
)
from npukit.sim import VectorOp
from npukit.sim.multicore_sim import simulate_multicore

HW = Path(__file__).parent / "data" / "stream_hw"


def _hw(name: str = "tpu_like_quad_core", core: str = "tpu_like.yaml") -> dict:
    """A Stream hardware summary (what ``_stream_driver.py`` prints) naming one of the chip files copied into
    tests/data/stream_hw: the benchmark finds the chip file beside its core files."""
    return {"name": name, "cores": {"0": {"path": str(HW / "cores" / core), "type": "compute", "array": [32, 32],
                                          "memories": []}}, "offchip_core_id": 6, "links": []}


def test_arch_widths_by_name() -> None:
    march = npukit_arch(_hw(), 8)
    b = march.cores[0].arch.bits
    assert (b.input, b.weight, b.output) == (8, 8, 8)  # the output is not the 32-bit psum width
    assert (b.pe_psum, b.psum_buffer) == (32, 32)  # the core's operand_precision accumulator
    assert len(march.mac_cores) == 4 and march.cores[0].arch.dram_bandwidth_bytes_per_cycle == 8
    # tpu_like's MAC cores are npukit's 2-D arrays (ARCH_CORES); eyeriss-like ones loop-nest cores of their YAML
    assert all(march.cores[i].nest is None for i in march.mac_cores)
    eye = npukit_arch(_hw("eyeriss_like_dual_core", "eyeriss_like.yaml"), 16)
    assert eye.cores[0].nest is not None and eye.cores[0].nest.bits["I"] == 16  # the workload's width


def test_layer_by_layer_vector_ops_go_through_dram_and_per_node_serialises_them() -> None:
    # layer by layer on the vector-less cores, each vector op reads its inputs from and writes its result to DRAM
    # (the 8 B/cycle off-chip port), streamed beside its lanes; Stream's per-layer round trip moves the same bytes
    # for a ReLU and an Add, in series with the op's lanes
    wl, bits = npukit_workload("resnet_subgraph")
    march = npukit_arch(_hw(), bits)
    table = march.table
    res = simulate_multicore(wl, march, "none/split")
    rows = {r["name"]: r for r in res.rows()}
    assert rows["Relu1"]["bus_bytes"] == 0 and rows["Relu1"]["dram_bytes"] == 2 * 4096  # 2,048 bf16 elements in, out
    assert rows["Relu1"]["cycles"] == 2 * 4096 / 8
    cycles, pj, trip = per_node(res, wl, bits, march, table)
    want = res.total_cycles + sum(rows[op.name]["compute_cycles"] for op in wl.layers if op.kind == "vector")
    assert trip == (2 + 3) * 4096 and cycles == want and pj == pytest.approx(res.energy_pj)


def test_arch_reads_the_simd_core_and_its_bus() -> None:
    march = npukit_arch(_hw(), 16)
    assert march.mac_cores == [0, 1, 2, 3] and not any(march.cores[i].vector_unit for i in march.mac_cores)
    assert len(march.simd_cores) == 1 and march.cores[march.simd_cores[0]].arch.vector.lanes == 64
    assert march.bus is not None and march.bus.bandwidth_bytes_per_cycle == 16


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


def test_cases_parse_names_sizes_and_the_held_out_set() -> None:
    """--cases: Stream's test workloads, 2conv_H_C of any size from 1 to 1024, and the two named sets; anything
    else is a ValueError naming the case, and npukit builds each two-conv size it accepts."""
    from npukit.benchmarks.bench_vs_stream import CASES, HELD_OUT, parse_cases

    assert parse_cases("default") == CASES
    assert parse_cases("held-out,swiglu,2conv_08_8") == (*HELD_OUT, "swiglu")  # 2conv_08_8 is 2conv_8_8 again
    assert not set(HELD_OUT) & set(CASES)
    wl, bits = npukit_workload(parse_cases("2conv_40_24")[0])
    assert bits == 8 and [layer.conv[:6] for layer in wl.layers] == [(42, 42, 3, 3, 24, 24)] * 2
    for bad in ("foo", "2conv_0_8", "2conv_8", "2conv_8_2048", "2conv_a_8", ""):
        with pytest.raises(ValueError, match="unknown case"):
            parse_cases(bad)


def test_bad_cases_hardware_or_stream_json_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys) -> None:
    """The benchmark checks --cases, --hardware and a --stream-json file before it writes anything."""
    import sys

    from npukit.benchmarks import bench_vs_stream as bvs

    runs = tmp_path / "runs.json"
    runs.write_text('{"hardware": [], "runs": [{"case": "swiglu", "hardware": "simba"}]}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": 3}')
    out = tmp_path / "out"
    for argv in (["--cases", "2conv_0_8"], ["--hardware", "../simba"], ["--stream-json", str(bad)],
                 ["--stream-json", str(tmp_path / "missing.json")], ["--cases", ""],
                 ["--stream-json", str(runs), "--cases", "attention_head"]):
        monkeypatch.setattr(sys, "argv", ["bench_vs_stream.py", *argv, "--out", str(out)])
        assert bvs.main() == 2
        err = capsys.readouterr().err.strip()
        assert err and "\n" not in err and "Traceback" not in err
        assert not out.exists()


def _runs_json(tmp_path, **change) -> Path:  # noqa: ANN003
    """A one-run stream_runs.json on the copied tpu_like chip, with ``change`` applied to its run."""
    import json

    hw = _hw()
    hw["links"] = [{"type": "link", "bandwidth_bits": 32, "unit_energy_cost": 0}]
    run = {"case": "swiglu", "hardware": hw["name"], "fused": False, "cycles": 548.0, "energy_pj": 472000.0,
           "wall_s": 0.6, **change}
    p = tmp_path / "runs.json"
    p.write_text(json.dumps({"hardware": [hw], "runs": [run]}))
    return p


def test_load_runs_reads_a_valid_file_and_refuses_each_broken_field(tmp_path) -> None:
    """--stream-json is checked whole before anything is written: every field the benchmark reads."""
    import math

    from npukit.benchmarks.bench_vs_stream import load_runs

    assert [r["case"] for r in load_runs(str(_runs_json(tmp_path)), None, None)["runs"]] == ["swiglu"]
    for change, needle in (({"cycles": 0}, "cycles must be"), ({"cycles": math.inf}, "cycles must be"),
                           ({"energy_pj": "12"}, "energy_pj must be"), ({"wall_s": -1}, "wall_s must be"),
                           ({"fused": "no"}, "fused must be"), ({"case": "2conv_../../x"}, "is not one"),
                           ({"hardware": "other"}, "not among its hardware"),
                           ({"slots": [{"latency": {}}]}, "slots are not readable")):
        with pytest.raises(ValueError, match=needle):
            load_runs(str(_runs_json(tmp_path, **change)), None, None)
    assert load_runs(str(_runs_json(tmp_path, cycles=0, error="Stream failed")), None, None)["runs"]  # an error run
    with pytest.raises(ValueError, match="no run of"):
        load_runs(str(_runs_json(tmp_path)), ("attention_head",), None)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(ValueError, match="levels deep"):
        load_runs(str(deep), None, None)
