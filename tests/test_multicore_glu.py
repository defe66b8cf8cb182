"""A gated MLP with one merged gate-and-up projection (``N = 2 F``) feeds its down projection (``K = F``) through the
``act(gate) * up`` multiply: the fusion edge the shape rule ``feeds`` missed (transformers' fused MoE experts, Phi-3)."""

from __future__ import annotations

import pytest

from npukit.sim import Layer, Workload, load_arch
from npukit.sim.multicore import homogeneous, load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.schedule import feeds, fusion_groups, glu_feeds, group_edges
from npukit.sim.workload import VectorOp

M, D, F = 64, 64, 96  # rows, model width, gated width (8-bit GEMM operands on npu128)


def _glu(mul_elements: int = M * F, mul_inputs: int = 2) -> Workload:
    return Workload("glu", [Layer("gate_up", M, 2 * F, D), VectorOp("act", "silu", M * F),
                            VectorOp("gate_mul", "mul", mul_elements, inputs=mul_inputs), Layer("down", M, D, F)])


def test_the_gated_half_is_an_edge_only_through_the_multiply() -> None:
    up, act, mul, down = _glu().layers
    assert not feeds(up, down)  # K = F is half of N = 2 F: the plain rule sees no edge
    assert glu_feeds(up, down, [act, mul])
    assert not glu_feeds(up, down, [act])  # no multiply of the two halves
    assert not glu_feeds(up, down, [act, VectorOp("m", "mul", M * F, inputs=1)])
    assert not glu_feeds(up, down, [act, VectorOp("m", "mul", M * D, inputs=2)])  # not F elements per row
    assert not glu_feeds(up, down, [act, Layer("other", M, F, F), mul])  # a GEMM between
    assert not glu_feeds(up, Layer("down", 2 * M, D, F), [act, VectorOp("m", "mul", 2 * M * F, inputs=2)])
    assert not glu_feeds(Layer("up", M, 3 * F, D), down, [act, mul])


def test_chain_and_blocks_fuse_the_gated_mlp() -> None:
    assert fusion_groups(_glu(), "chain") == [(0, 3)]
    assert fusion_groups(_glu(), "blocks") == [(0, 3)]  # an MLP edge: widening then narrowing
    assert fusion_groups(_glu(mul_inputs=1), "chain") == []
    fin, fout, _, _ = group_edges(_glu().layers)
    assert fout[0] and fin[3] and not fin[0] and not fout[3]


@pytest.mark.parametrize("cores", [1, 2])
def test_fused_gated_mlp_keeps_its_intermediate_off_dram(cores: int) -> None:
    """MAC cores with vector units: the act and multiply stay on chip either way; fused, gate_up's 2 F wide output is
    never written and down's F wide input never read (8-bit: bytes = elements)."""
    mc = homogeneous(load_arch("npu128"), cores, shared_kib=1024)
    plain, fused = (simulate_multicore(_glu(), mc, s) for s in ("none/split", "chain/split"))
    p, f = ({r["name"]: r for r in res.rows()} for res in (plain, fused))
    assert [r["step"] for r in f.values()] == ["fused"] * 4
    assert p["gate_up"]["dram_bytes"] - f["gate_up"]["dram_bytes"] == M * 2 * F
    assert p["down"]["dram_bytes"] - f["down"]["dram_bytes"] == M * F
    assert plain.ledger.count("dram") - fused.ledger.count("dram") == 3 * M * F


def test_on_a_simd_core_the_gated_halves_cross_the_links_not_dram() -> None:
    """hetero4: layer by layer the act and the multiply on the SIMD core read and write DRAM (2 + 3 tensors of F per
    row at the vector unit's 16 bits); fused they move over the interconnect and DRAM sees none of it."""
    mc = load_multicore_arch("hetero4")
    plain, fused = (simulate_multicore(_glu(), mc, s) for s in ("none/split", "chain/split"))
    p, f = ({r["name"]: r for r in res.rows()} for res in (plain, fused))
    vec_bytes = mc.cores[mc.simd_cores[0]].arch.vector.bits // 8
    assert p["act"]["dram_bytes"] == 2 * M * F * vec_bytes and p["gate_mul"]["dram_bytes"] == 3 * M * F * vec_bytes
    assert f["act"]["dram_bytes"] == f["gate_mul"]["dram_bytes"] == 0
    assert f["act"]["interconnect_bytes"] > 0 and f["gate_mul"]["interconnect_bytes"] > 0
    assert plain.ledger.count("dram") - fused.ledger.count("dram") == 3 * M * F + 5 * M * F  # the ledger counts elements
