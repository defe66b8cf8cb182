"""The vector unit: lane operations, cycles, traffic and energy of non-GEMM operators (golden numbers)."""

from __future__ import annotations

import math

import pytest

from npukit.sim import Arch, ConfigError, Layer, VectorOp, Workload, llama3_8b_layer, load_table, simulate
from npukit.sim.vector_unit import OP_COSTS, busy_cycles, lane_ops, vector_records

H45 = load_table("horowitz45")


def test_softmax_rows_golden() -> None:
    # 4 rows of 1,000: per element 7 adds + 5 multiplies, per row a reciprocal (2 adds + 4 multiplies)
    op = VectorOp("s", "softmax", 4000, reduce=1000, batch=3)
    assert lane_ops(op) == (7 * 4000 + 2 * 4, 5 * 4000 + 4 * 4)
    arch = Arch().with_(**{"vector.lanes": 64})
    # 3 instances x ceil(48,024 lane ops / 64 lanes)
    assert busy_cycles(op, arch) == 3 * math.ceil((28008 + 20016) / 64)
    recs = {(c, a, b): n for c, a, b, n in vector_records(op, arch)}
    assert recs[("vector_unit", "fp_add", (16,))] == 3 * 28008
    assert recs[("vector_unit", "fp_mult", (16,))] == 3 * 20016
    assert recs[("ofmap_sram", "sram_read", (16,))] == 3 * 4000
    assert recs[("ofmap_sram", "sram_write", (16,))] == 3 * 4000
    res = simulate(Workload("w", [op]), arch)
    e = res.layers[0].energy_pj["vector_unit"]
    assert e == pytest.approx(3 * (28008 * 0.4 + 20016 * 1.1))  # Horowitz: fp16 add 0.4 pJ, multiply 1.1 pJ


def test_data_movement_bounds_the_cheap_ops() -> None:
    arch = Arch().with_(**{"vector.lanes": 8})
    add = VectorOp("a", "add", 800, inputs=2)  # 800 adds, but 2,400 elements through the SRAM port
    assert busy_cycles(add, arch) == 2400 // 8
    kv = VectorOp("k", "kv_append", 1024)
    recs = {(c, a): n for c, a, _, n in vector_records(kv, arch)}
    assert recs[("dram", "dram_write")] == 1024 and ("ofmap_sram", "sram_write") not in recs
    # 2,048 elements moved (read and appended) on 8 lanes: 256 cycles; its 2,048 DRAM bytes at 64 B/cycle: 32
    assert busy_cycles(kv, arch) == 256
    slow = arch.with_(dram_bandwidth_bytes_per_cycle=1.0)
    assert busy_cycles(kv, slow) == 2048  # DRAM-bound
    emb = VectorOp("e", "embedding", 4096, params=4096)
    recs = {(c, a): n for c, a, _, n in vector_records(emb, arch)}
    assert recs[("dram", "dram_read")] == 4096 and ("vector_unit", "fp_add") not in recs


def test_integer_vector_unit_uses_integer_actions() -> None:
    arch = Arch().with_(**{"vector.number": "int", "vector.bits": 8})
    recs = {(c, a, b) for c, a, b, _ in vector_records(VectorOp("g", "gelu", 10), arch)}
    assert ("vector_unit", "int_add", (8,)) in recs and ("vector_unit", "int_mult", (8, 8)) in recs


def test_every_op_class_has_a_cost() -> None:
    from npukit.sim import VECTOR_OPS

    assert set(OP_COSTS) == set(VECTOR_OPS)


def test_overlap_hides_vector_ops_behind_the_gemms_before_them() -> None:
    big = Layer("g", 512, 512, 512)
    ops = [VectorOp("n", "rmsnorm", 512 * 512, reduce=512), VectorOp("s", "softmax", 512 * 64, reduce=64)]
    serial = simulate(Workload("w", [big, *ops]), Arch(mapping="fixed"))
    over = simulate(Workload("w", [big, *ops]), Arch(mapping="fixed").with_(**{"vector.overlap": "overlap"}))
    gemm_cycles = serial.layers[0].total_cycles
    busy = [r.vector_cycles for r in serial.layers[1:]]
    assert [r.compute_cycles for r in serial.layers[1:]] == busy  # serial: all exposed
    exposed = [r.compute_cycles for r in over.layers[1:]]
    assert exposed[0] == max(0, busy[0] - gemm_cycles)
    assert exposed[1] == max(0, busy[1] - max(0, gemm_cycles - busy[0]))
    assert over.total_cycles == serial.total_cycles - sum(busy) + sum(exposed)
    # before any GEMM there is nothing to hide behind
    first = simulate(Workload("w", [ops[0], big]), Arch(mapping="fixed").with_(**{"vector.overlap": "overlap"}))
    assert first.layers[0].compute_cycles == first.layers[0].vector_cycles


def test_llama_layer_vector_ops_equal_a_hand_count() -> None:
    seq, hidden, heads, kvh, hd, ffn = 1024, 4096, 32, 8, 128, 14336
    w = llama3_8b_layer(seq=seq)
    got: dict[str, int] = {}
    for op in w.vector_ops:
        got[op.op] = got.get(op.op, 0) + op.batch * op.elements
    assert got == {
        "rmsnorm": 2 * seq * hidden,
        "rope": seq * (heads + kvh) * hd,
        "kv_append": 2 * seq * kvh * hd,
        "softmax": heads * seq * seq,
        "add": 2 * seq * hidden,
        "silu": seq * ffn,
        "mul": seq * ffn,
    }
    dec = llama3_8b_layer(seq=4096, phase="decode")
    soft = next(op for op in dec.vector_ops if op.op == "softmax")
    assert (soft.elements, soft.reduce, soft.batch) == (4097, 4097, 32)  # one query row over 4,096 + 1 keys
    # MACs unchanged by the vector ops
    assert w.macs == sum(g.macs for g in w.gemms)


def test_vector_ops_cost_time_and_energy_in_the_ledger() -> None:
    res = simulate(llama3_8b_layer(seq=256), Arch())
    vec = [r for r in res.layers if r.kind == "vector"]
    assert len(vec) == 10 and all(r.compute_cycles > 0 and r.energy_pj.get("vector_unit", 0) >= 0 for r in vec)
    assert res.ledger.total_cycles("vector") == sum(r.compute_cycles for r in vec)
    assert res.energy_by_component()["vector_unit"] > 0


@pytest.mark.parametrize(
    "key,value,needle",
    [("lanes", 0, "vector.lanes"), ("lanes", 1 << 21, "vector.lanes"), ("bits", 8, "vector.bits"),
     ("number", "bf", "vector.number"), ("overlap", "maybe", "vector.overlap"), ("bits", True, "vector.bits")],
)
def test_bad_vector_unit_is_refused(key, value, needle) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        Arch().with_(**{f"vector.{key}": value})
