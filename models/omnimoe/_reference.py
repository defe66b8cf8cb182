"""The ``OmniMoE_Pytorch`` algorithm of flash-algo/omni-moe, restated step by step (our code).

Used by the tests (same indices, same outputs as :class:`npukit.models.omnimoe.OmniMoE` on the
same weights) and by ``npukit bench omnimoe`` as "the torch reference". It ranks *all* n entries
on each axis and takes the top-k of all n*n candidate sums (O(N) per token), then gathers each
token's k experts (token-centric), exactly like the public reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def reference_route(m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob scores (T, k), indices (T, k)) the public reference's way."""
    n = m.num_expert_sqrt
    lp_x = F.log_softmax(m.router_norm_x(m.router_gate_x(x)), dim=-1)
    lp_y = F.log_softmax(m.router_norm_y(m.router_gate_y(x)), dim=-1)
    sx, ix = lp_x.topk(n, dim=-1)
    sy, iy = lp_y.topk(n, dim=-1)
    cand = (sx[:, :, None] + sy[:, None, :]).reshape(x.shape[0], -1)
    cidx = (ix[:, :, None] * n + iy[:, None, :]).reshape(x.shape[0], -1)
    scores, pos = cand.topk(m.top_k, dim=-1)
    return scores, cidx.gather(-1, pos)


def reference_forward(m: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """OmniMoE forward the public reference's way (module ``m`` holds the weights)."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, m.hidden_size)
    scores, idx = reference_route(m, x)
    w = torch.exp(scores)
    up = m.up_embed(idx)  # (T, k, H)
    down = m.down_embed(idx)
    a = F.silu(torch.bmm(up, x.unsqueeze(-1)).squeeze(-1)) * w
    experts = torch.bmm(a.unsqueeze(1), down).squeeze(1)
    mlp = m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))
    return (mlp + experts).reshape(shape)
