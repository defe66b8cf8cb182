"""The built-in transformer workloads record their own wiring (``meta["dataflow"]``), so a fused group takes its
edges from it: before 2026-12-07 they had none, and shapes alone made ``k_proj`` read ``q_proj``'s output (a square
projection "feeds" the next) and, in MiniLM, the scores take their keys from ``v_proj``."""

from __future__ import annotations

import pytest

from npukit.sim.dataflow import Dataflow
from npukit.sim.schedule import fusion_groups, group_edges
from npukit.sim.workload import Layer, llama3_8b_layer, minilm_l6


def _edges(w) -> dict[str, tuple[bool, bool, str]]:  # noqa: ANN001
    """Each GEMM's (input from the group, same input as the GEMM before it, right operand's producer) under chain."""
    flow = Dataflow.of(w)
    assert flow is not None
    out = {}
    for a, b in fusion_groups(w, "chain", flow):
        g = list(w.layers[a:b + 1])
        fin, _, sib, ffil = group_edges(g, flow)
        out |= {op.name: (fin[i], sib[i], g[ffil[i]].name if ffil[i] >= 0 else "")
                for i, op in enumerate(g) if isinstance(op, Layer)}
    return out


def test_llama_layer_projections_read_the_norm_and_attention_its_own_q_k_v() -> None:
    e = _edges(llama3_8b_layer(64))
    assert e["self_attn.k_proj"] == (False, True, "") and e["self_attn.v_proj"] == (False, True, "")
    assert e["self_attn.scores"] == (True, False, "self_attn.k_proj")  # its queries from q_proj (through RoPE)
    assert e["self_attn.context"] == (True, False, "self_attn.v_proj")
    assert e["mlp.up_proj"][1] and e["mlp.down_proj"][0]


@pytest.mark.parametrize("layer", [0, 5])
def test_minilm_scores_take_their_keys_from_k_proj(layer: int) -> None:
    a = f"encoder.layer.{layer}.attention"
    e = _edges(minilm_l6(16))
    assert e[f"{a}.k_proj"][:2] == (False, True) and e[f"{a}.v_proj"][:2] == (False, True)
    assert e[f"{a}.scores"][2] == f"{a}.k_proj" and e[f"{a}.context"][2] == f"{a}.v_proj"
