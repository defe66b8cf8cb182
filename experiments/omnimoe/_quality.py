"""LM quality at matched active parameters: the byte-level Llama (:mod:`npukit.models.byte_llama`)
with its dense SwiGLU MLPs, with OmniMoE and with PEER MLPs (swapped by
:func:`npukit.models.replace_mlp.replace_mlp`), each trained the same way on the python3-doc prose.

Active parameters per token and layer (weights a token touches; routers and product keys included,
experts only the chosen ones): dense 3*d*I; OmniMoE shared SwiGLU of I/4 (3*d*I/4) + router 2*n*d +
k atomic experts of 2*d; PEER queries d*2*h*dk + keys h*n*2*dk + h*k_h experts of 2*d (h = 4 heads,
dk = d/4). k and k_h are the largest that stay within the dense budget.

Optimizer recipes (the same for every kind): ``uniform`` (one AdamW group, weight decay 0.01 on every
parameter) and ``sparse`` (weight decay only on the dense weight matrices; none on embeddings, norms,
routers, product keys and expert tables; the expert tables and product keys, which a token updates
only where it routes, at ``expert_lr`` times the peak rate; the dense model has none of them).
"""

from __future__ import annotations

import math
from typing import Any

from npukit.models.byte_llama import ByteLlamaSpec, byte_llama, load_corpus, train_lm
from npukit.models.replace_mlp import OmniMoEConfig, PEERConfig, active_mlp_params, replace_mlp

KINDS = ("dense", "omnimoe", "peer")
RECIPES = ("uniform", "sparse")
LR = 3e-3  # peak learning rate of every kind
EVAL_SEQS = 256  # held-out windows of ctx+1 bytes for the validation loss (16,384 bytes at ctx 64)
SPEC = ByteLlamaSpec(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, ctx=64)
EXPERTS = 4096


def mlp_configs(spec: ByteLlamaSpec, experts: int = EXPERTS, router_temperature: float = 1.0) -> dict[str, Any]:
    """The replace_mlp configs (None for dense) at the dense MLP's active parameters."""
    d, inter, n = spec.hidden, spec.intermediate, math.isqrt(experts)
    target = 3 * d * inter
    shared = max(1, inter // 4)
    k_omni = max(1, (target - 3 * d * shared - 2 * n * d) // (2 * d))
    heads, dk = 4, max(2, d // 4)
    k_peer = max(1, (target - d * 2 * heads * dk - heads * n * 2 * dk) // (2 * d * heads))
    return {"dense": None,
            "omnimoe": OmniMoEConfig(num_experts=experts, top_k=k_omni, intermediate_size=shared,
                                     router_temperature=router_temperature),
            "peer": PEERConfig(num_experts=experts, heads=heads, experts_per_head=k_peer, dim_key=dk)}


def param_groups(model: Any, recipe: str = "uniform", lr: float = LR, expert_lr: float = 1.0) -> list[dict[str, Any]]:
    """AdamW groups of ``recipe`` (see the module docstring) for a byte-level Llama, any MLP kind."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if recipe == "uniform":
        return [{"params": [p for _, p in params], "lr": lr, "weight_decay": 0.01}]
    sparse_tables = ("up_embed", "down_embed", "weight_up_embed", "weight_down_embed", ".keys")
    routing = ("router_gate_x", "router_gate_y", "to_queries")
    groups: dict[str, list[Any]] = {"decay": [], "no_decay": [], "experts": []}
    for n, p in params:
        if any(t in n for t in sparse_tables):
            groups["experts"].append(p)
        elif p.dim() < 2 or "embed_tokens" in n or any(t in n for t in routing):
            groups["no_decay"].append(p)
        else:
            groups["decay"].append(p)
    return [g for g in ({"params": groups["decay"], "lr": lr, "weight_decay": 0.01},
                        {"params": groups["no_decay"], "lr": lr, "weight_decay": 0.0},
                        {"params": groups["experts"], "lr": lr * expert_lr, "weight_decay": 0.0}) if g["params"]]


def train_kind(kind: str, corpus: Any, steps: int, spec: ByteLlamaSpec = SPEC, batch: int = 16,
               progress: bool = False, seed: int = 0, recipe: str = "uniform", expert_lr: float = 1.0,
               eval_seqs: int = EVAL_SEQS, router_temperature: float = 1.0, lr: float = LR) -> dict[str, Any]:
    """One model trained (for a given ``seed``: same initial weights of the shared parts, data order
    and schedule for every kind; optimizer ``recipe``); the train_lm result plus ``active_ffn_params`` /
    ``total_ffn_params`` of one layer's MLP and ``seed`` / ``recipe`` / ``expert_lr``.
    ``router_temperature``: OmniMoE's (1.0: the reference's); ``lr``: the peak learning rate."""
    model = byte_llama(spec, seed=seed)
    cfg = mlp_configs(spec, router_temperature=router_temperature)[kind]
    if cfg is not None:
        replace_mlp(model, cfg, copy_mlp=False)
    groups = param_groups(model, recipe, lr, expert_lr)
    res = train_lm(model, corpus, steps, spec.ctx, batch=batch, lr=lr, seed=seed, eval_seqs=eval_seqs,
                   progress=progress, param_groups=groups)
    mlp = model.model.layers[0].mlp
    res.update(kind=kind, config=cfg, seed=seed, recipe=recipe, expert_lr=expert_lr, lr=lr,
               active_ffn_params=active_mlp_params(mlp), total_ffn_params=sum(p.numel() for p in mlp.parameters()))
    return res


def quality(steps: int, corpus_bytes: int, batch: int, progress: bool = False, recipe: str = "sparse",
            expert_lr: float = 3.0) -> dict[str, dict[str, Any]]:
    """Every kind trained for ``steps`` steps on ``corpus_bytes`` bytes of the corpus (seed 0; the
    experiment's default recipe)."""
    corpus = load_corpus(corpus_bytes)
    return {k: train_kind(k, corpus, steps, batch=batch, progress=progress, recipe=recipe, expert_lr=expert_lr)
            for k in KINDS}
