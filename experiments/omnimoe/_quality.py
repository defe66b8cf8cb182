"""LM quality at matched active parameters: the byte-level Llama (:mod:`npukit.models.byte_llama`)
with its dense SwiGLU MLPs, with OmniMoE and with PEER MLPs (swapped by
:func:`npukit.models.replace_mlp.replace_mlp`), each trained the same way on the python3-doc prose.

Active parameters per token and layer (weights a token touches; routers and product keys included,
experts only the chosen ones): dense 3*d*I; OmniMoE shared SwiGLU of I/4 (3*d*I/4) + router 2*n*d +
k atomic experts of 2*d; PEER queries d*2*h*dk + keys h*n*2*dk + h*k_h experts of 2*d (h = 4 heads,
dk = d/4). k and k_h are the largest that stay within the dense budget.
"""

from __future__ import annotations

import math
from typing import Any

from npukit.models.byte_llama import ByteLlamaSpec, byte_llama, load_corpus, train_lm
from npukit.models.replace_mlp import OmniMoEConfig, PEERConfig, active_mlp_params, replace_mlp

KINDS = ("dense", "omnimoe", "peer")
SPEC = ByteLlamaSpec(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, ctx=64)
EXPERTS = 4096


def mlp_configs(spec: ByteLlamaSpec, experts: int = EXPERTS) -> dict[str, Any]:
    """The replace_mlp configs (None for dense) at the dense MLP's active parameters."""
    d, inter, n = spec.hidden, spec.intermediate, math.isqrt(experts)
    target = 3 * d * inter
    shared = max(1, inter // 4)
    k_omni = max(1, (target - 3 * d * shared - 2 * n * d) // (2 * d))
    heads, dk = 4, max(2, d // 4)
    k_peer = max(1, (target - d * 2 * heads * dk - heads * n * 2 * dk) // (2 * d * heads))
    return {"dense": None,
            "omnimoe": OmniMoEConfig(num_experts=experts, top_k=k_omni, intermediate_size=shared),
            "peer": PEERConfig(num_experts=experts, heads=heads, experts_per_head=k_peer, dim_key=dk)}


def train_kind(kind: str, corpus: Any, steps: int, spec: ByteLlamaSpec = SPEC, batch: int = 16,
               progress: bool = False) -> dict[str, Any]:
    """One model trained (same seed, data order and schedule for every kind); the train_lm result
    plus ``active_ffn_params`` / ``total_ffn_params`` of one layer's MLP."""
    model = byte_llama(spec, seed=0)
    cfg = mlp_configs(spec)[kind]
    if cfg is not None:
        replace_mlp(model, cfg, copy_mlp=False)
    res = train_lm(model, corpus, steps, spec.ctx, batch=batch, lr=3e-3, eval_seqs=64, progress=progress)
    mlp = model.model.layers[0].mlp
    res.update(kind=kind, config=cfg, active_ffn_params=active_mlp_params(mlp),
               total_ffn_params=sum(p.numel() for p in mlp.parameters()))
    return res


def quality(steps: int, corpus_bytes: int, batch: int, progress: bool = False) -> dict[str, dict[str, Any]]:
    """Every kind trained for ``steps`` steps on ``corpus_bytes`` bytes of the corpus."""
    corpus = load_corpus(corpus_bytes)
    return {k: train_kind(k, corpus, steps, batch=batch, progress=progress) for k in KINDS}
