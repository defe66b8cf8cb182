"""OmniMoE and PEER layers: drop-in PyTorch modules backed by the :mod:`npukit.kernels.omnimoe` kernels.

:class:`OmniMoE` (docs/references.md, "OmniMoE"): a shared SwiGLU MLP plus N = n*n atomic experts
(u_e, v_e) of the hidden size, routed by a Cartesian product router -- two n-way projections,
BatchNorm without affine, log_softmax on each, score(i, j) = lp_row[i] + lp_col[j], top-k pairs,
weight exp(score) -- and evaluated expert-centrically: out = MLP(x) + sum_topk silu(x . u_e) g_e v_e.
Parameter names and semantics equal flash-algo/omni-moe's ``OmniMoE_Pytorch`` (same state dict:
``gate_proj``, ``up_proj``, ``down_proj``, ``router_gate_x/y``, ``router_norm_x/y``, ``up_embed``,
``down_embed``), so its weights load with ``load_state_dict`` and give the same indices and outputs
(up to float rounding; ties between equal scores may be ordered differently). As there,
n = floor(sqrt(num_experts)) and only the first n*n experts are routable.

:class:`PEER` (He 2024, "Mixture of A Million Experts"; reference lucidrains/PEER-pytorch):
product-key retrieval per head, then token-centric gathering of each token's experts. Its
parameters are named as in ``PEER_pytorch.PEER`` (``weight_down_embed``, ``weight_up_embed``,
``to_queries.0``, ``keys``) so that package's weights load too.

Both train (autograd) in bf16, fp16 and fp32 (kernels accumulate in fp32) and, given ``ledger``,
record every FLOP and byte they move (see :mod:`npukit.kernels.omnimoe.accounting`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from npukit.kernels.omnimoe import accounting
from npukit.kernels.omnimoe.expert import omni_expert
from npukit.kernels.omnimoe.router import cartesian_router
from npukit.kernels.omnimoe.scheduler import build_schedule
from npukit.kernels.omnimoe.token import token_centric
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ._reference import reference_forward

__all__ = ["OmniMoE", "PEER", "SwiGLU", "reference_forward"]


def _positive(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    return v


class SwiGLU(nn.Module):
    """Dense SwiGLU FFN: down(silu(gate(x)) * up(x)); 3*H*I weights."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class OmniMoE(nn.Module):
    """Shared SwiGLU MLP + ``num_experts`` atomic experts, ``top_k`` per token (Cartesian router).

    ``backend``: ``auto`` (Triton kernels on CUDA, torch on CPU), ``torch`` or ``triton``.
    ``deterministic``: bit-reproducible expert kernels (no float atomics).
    ``ledger``: optional :class:`~npukit.sim.ledger.Ledger` receiving FLOPs and bytes per call.
    ``router_temperature``: the normalised router logits are divided by it before each log_softmax
    (1.0: the reference; below 1 sharper routing, so the chosen experts' weights exp(score) sum
    closer to 1: the BatchNorm without affine pins the logits' spread, so training cannot sharpen it).
    Input (..., hidden_size); output the same shape and dtype.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                 hidden_act: str = "silu", backend: str = "auto", deterministic: bool = False,
                 ledger: Ledger | None = None, router_temperature: float = 1.0) -> None:
        super().__init__()
        self.hidden_size = _positive("hidden_size", hidden_size)
        self.intermediate_size = _positive("intermediate_size", intermediate_size)
        self.num_experts = _positive("num_experts", num_experts)
        self.top_k = _positive("top_k", top_k)
        if hidden_act != "silu":
            raise ConfigError(f"OmniMoE supports hidden_act='silu' (the reference's), got '{hidden_act}'")
        self.num_expert_sqrt = math.isqrt(num_experts)
        if top_k > self.num_expert_sqrt**2:
            raise ConfigError(f"top_k={top_k} exceeds the {self.num_expert_sqrt ** 2} routable experts; lower top_k")
        self.backend, self.deterministic, self.ledger = backend, deterministic, ledger
        if isinstance(router_temperature, bool) or not isinstance(router_temperature, int | float) \
                or not math.isfinite(router_temperature) or router_temperature <= 0:
            raise ConfigError(f"router_temperature must be a positive number, got {router_temperature!r}")
        self.router_temperature = float(router_temperature)
        n = self.num_expert_sqrt
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.router_gate_x = nn.Linear(hidden_size, n, bias=False)
        self.router_gate_y = nn.Linear(hidden_size, n, bias=False)
        self.router_norm_x = nn.BatchNorm1d(n, affine=False)
        self.router_norm_y = nn.BatchNorm1d(n, affine=False)
        self.up_embed = nn.Embedding(num_experts, hidden_size)
        self.down_embed = nn.Embedding(num_experts, hidden_size)
        # nn.Embedding's N(0, 1) makes x . u_e grow like sqrt(H); scale so it stays O(1) at init
        nn.init.normal_(self.up_embed.weight, std=hidden_size**-0.5)
        nn.init.normal_(self.down_embed.weight, std=hidden_size**-0.5)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-prob scores (T, k), expert indices (T, k)) for tokens x (T, H)."""
        t = self.router_temperature
        lp_x = F.log_softmax(self.router_norm_x(self.router_gate_x(x)) / t, dim=-1)
        lp_y = F.log_softmax(self.router_norm_y(self.router_gate_y(x)) / t, dim=-1)
        return cartesian_router(lp_x, lp_y, self.top_k, self.backend)

    def forward(self, hidden_states: torch.Tensor, **_: object) -> torch.Tensor:
        if hidden_states.shape[-1] != self.hidden_size:
            raise ConfigError(f"OmniMoE expects inputs (..., {self.hidden_size}), got {tuple(hidden_states.shape)}")
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, self.hidden_size)
        T, H, led, bits = x.shape[0], self.hidden_size, self.ledger, x.element_size() * 8
        scores, indices = self.route(x)
        weights = torch.exp(scores)
        sched = build_schedule(indices, self.num_experts, self.backend, led)
        if led is not None:
            accounting.record_router(led, T, H, self.num_expert_sqrt, self.top_k, bits)
            accounting.record_mlp(led, T, H, self.intermediate_size, bits)
        experts = omni_expert(x, self.up_embed.weight, self.down_embed.weight, weights, indices, sched,
                              self.backend, self.deterministic, led)
        out = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)) + experts
        if led is not None and out.requires_grad:
            n, k, inter = self.num_expert_sqrt, self.top_k, self.intermediate_size

            def _record_backward(grad: torch.Tensor) -> None:
                accounting.record_router_backward(led, T, n, k, bits)
                accounting.record_mlp(led, T, H, inter, bits, backward=True, scope="mlp_bwd")

            out.register_hook(_record_backward)
        return out.reshape(shape)


class PEER(nn.Module):
    """PEER: ``heads`` product-key retrievals of ``experts_per_head`` experts each, token-centric.

    out = sum_heads sum_j gelu(x . d_e) * sigma(score_e) * u_e with sigma softmax over a head's
    experts (``non_competing_scores=False``) or ReLU (``True``, PEER-pytorch's default, where a
    head keeps only its best expert as there). Product keys: query halves against ``n`` keys per
    axis, exact top-k over the n*n products via the Cartesian router (PEER-pytorch's
    ``product_key_topk`` >= the per-head k gives the same experts).
    """

    def __init__(self, dim: int, heads: int = 8, num_experts: int = 1_000_000, experts_per_head: int = 16,
                 dim_key: int | None = None, non_competing_scores: bool = True, backend: str = "auto",
                 ledger: Ledger | None = None) -> None:
        super().__init__()
        self.dim = _positive("dim", dim)
        self.heads = _positive("heads", heads)
        self.num_experts = _positive("num_experts", num_experts)
        n = math.isqrt(num_experts)
        if n * n != num_experts:
            raise ConfigError(f"PEER needs a square num_experts (n*n), got {num_experts}")
        self.num_keys = n
        self.dim_key = _positive("dim_key", dim_key if dim_key is not None else max(1, dim // 2))
        self.experts_per_head = 1 if non_competing_scores else _positive("experts_per_head", experts_per_head)
        if self.experts_per_head > num_experts:
            raise ConfigError(f"experts_per_head={experts_per_head} exceeds num_experts={num_experts}")
        self.non_competing_scores, self.backend, self.ledger = non_competing_scores, backend, ledger
        self.weight_down_embed = nn.Embedding(num_experts, dim)
        self.weight_up_embed = nn.Embedding(num_experts, dim)
        nn.init.normal_(self.weight_down_embed.weight, std=dim**-0.5)
        nn.init.normal_(self.weight_up_embed.weight, std=dim**-0.5)
        self.to_queries = nn.Sequential(nn.Linear(dim, self.dim_key * heads * 2, bias=False))
        self.keys = nn.Parameter(torch.zeros(heads, n, 2, self.dim_key))
        nn.init.normal_(self.keys, std=0.02)

    @property
    def top_k(self) -> int:
        """Active experts per token (heads x experts per head)."""
        return self.heads * self.experts_per_head

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(gate weights (T, heads*k_h), expert indices (T, heads*k_h)) for tokens x (T, dim)."""
        T, h, d, n = x.shape[0], self.heads, self.dim_key, self.num_keys
        q = self.to_queries(x).view(T, 2, h, d)  # '(p h d)' layout as PEER-pytorch
        sim = torch.einsum("tphd,hkpd->pthk", q, self.keys)
        scores, idx = cartesian_router(sim[0].reshape(T * h, n), sim[1].reshape(T * h, n), self.experts_per_head,
                                       self.backend)
        scores = scores.view(T, h, -1)
        gates = F.relu(scores) if self.non_competing_scores else scores.softmax(-1)
        return gates.reshape(T, -1), idx.view(T, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.dim:
            raise ConfigError(f"PEER expects inputs (..., {self.dim}), got {tuple(x.shape)}")
        shape = x.shape
        flat = x.reshape(-1, self.dim)
        gates, idx = self.route(flat)
        if self.ledger is not None:
            accounting.record_router(self.ledger, flat.shape[0] * self.heads, self.dim_key, self.num_keys,
                                     self.experts_per_head, flat.element_size() * 8, scope="peer_router")
        out = token_centric(flat, self.weight_down_embed.weight, self.weight_up_embed.weight, gates.to(flat.dtype), idx,
                            act="gelu", backend=self.backend, ledger=self.ledger)
        return out.reshape(shape)
