"""Mixture-of-experts layers in a meta-device trace: the expert GEMMs of the tokens a routing rule sends them.

On the meta device a router's top-k holds no values, so transformers' expert loop (``expert_hit = ...nonzero()``)
runs no expert and the trace would silently lose the experts' work. For the trace only, the forward of each routed-
expert module below is replaced, *on meta inputs*, by one that takes the per-expert token counts from the routing
rule (:func:`npukit.workloads.moe_routing.expert_loads`) and issues the same ops the module would for those
tokens; on real tensors the module's own forward runs (its real routing is traced).

* transformers' experts modules (every class made by ``transformers.integrations.moe.use_experts_implementation``:
  Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, OLMoE, ...; 3-D ``gate_up_proj``/``up_proj`` and ``down_proj``): per expert
  ``e`` with ``t_e`` tokens, the up (or gate+up) linear ``M = t_e, N = (2) I, K = H``, the gate's activation, the down
  linear ``M = t_e, N = H, K = I``, the routing-weight multiply and the scatter-add into the output, named
  ``<experts module>.<e>.gate_up_proj`` / ``.<e>.down_proj``. The router (``gate``) and any shared expert are
  ordinary modules and are traced as they are.
* npukit's :class:`~npukit.models.omnimoe.OmniMoE` (expert-centric): the shared SwiGLU and the Cartesian router as
  they are, then for each distinct load ``m`` held by ``c`` atomic experts one batched GEMM ``X_e (m x H) @ u_e
  (H x 1)`` (``batch = c``, each its own u_e: fetched once per expert) and one ``a_e (m x 1) @ v_e (1 x H)``, named
  ``<module>.experts_up_m<m>`` / ``experts_down_m<m>`` (the layout of ``experiments/omnimoe/npu_cost.py``), and the
  scatter-add of the T x k outputs;
* npukit's :class:`~npukit.models.omnimoe.PEER` (token-centric gather): the query projection and the product-key
  scores as they are, then per token ``x_t (1 x H) @ U_t (H x k)`` and ``a_t (1 x k) @ V_t (k x H)`` with the token's
  gathered expert rows (``batch = T``, no weight shared between tokens), named ``tokens_up`` / ``tokens_down``.

A module whose class name ends in ``Experts`` but that is none of these runs its own forward; if on meta inputs it
issues no GEMM (a value-routed loop that ran no expert) the trace raises :class:`WorkloadError` rather than lose its
experts silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..sim.errors import WorkloadError
from ._trace_record import _Op, _Recorder
from .moe_routing import Routing, expert_loads


@dataclass
class MoeState:
    """What the MoE forwards of one trace share: the rule, the MoE layers seen (program order) and, per expert
    module, the parameters a token does not touch (``inactive``: the unrouted experts' share)."""

    routing: Routing
    what: str
    layers: int = 0
    inactive: dict[str, int] = field(default_factory=dict)

    def next_layer(self) -> int:
        self.layers += 1
        return self.layers - 1


def _is_hf_experts(m: nn.Module) -> bool:
    if not all(hasattr(m, a) for a in ("has_gate", "has_bias", "is_transposed", "down_proj")):
        return False
    up = getattr(m, "gate_up_proj" if m.has_gate else "up_proj", None)
    return isinstance(up, torch.Tensor) and up.dim() == 3 and isinstance(m.down_proj, torch.Tensor)


def _kind(m: nn.Module) -> str | None:
    if _is_hf_experts(m):
        return "hf"
    cls = type(m)
    if cls.__module__.startswith("npukit.models.omnimoe"):
        return {"OmniMoE": "omnimoe", "PEER": "peer"}.get(cls.__name__)
    if cls.__name__.endswith("Experts") and any(True for _ in m.parameters()):
        return "unknown"
    return None


@contextmanager
def moe_forwards(model: nn.Module, rec: _Recorder, state: MoeState) -> Iterator[None]:
    """Replace the forward of every MoE module of ``model`` (see the module docstring) for the duration."""
    patched: list[nn.Module] = []
    try:
        for name, m in model.named_modules():
            kind = _kind(m)
            if kind is None:
                continue
            make = {"hf": _hf_forward, "omnimoe": _omnimoe_forward, "peer": _peer_forward, "unknown": _refuse}[kind]
            m.forward = make(m, name, rec, state)  # type: ignore[method-assign]
            patched.append(m)
        yield
    finally:
        for m in patched:
            m.__dict__.pop("forward", None)


@contextmanager
def _scope(rec: _Recorder, module: str, part: str) -> Iterator[None]:
    """Ops issued inside are named ``<module>.<part>`` (``<part>`` for the root module)."""
    rec.modules.append(f"{module}.{part}" if module else part)
    try:
        yield
    finally:
        rec.modules.pop()


def _meta_long(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.long, device="meta")


def _refuse(m: nn.Module, name: str, rec: _Recorder, state: MoeState) -> Any:
    """An ``...Experts`` module npukit does not know: run it, and refuse if on meta inputs it issued no GEMM (a
    value-routed loop that ran no expert); one that computes its experts densely (Llama-4's) is traced as it ran."""
    original = type(m).forward.__get__(m)

    def forward(*args: Any, **kwargs: Any) -> Any:
        before = sum(1 for op in rec.ops if isinstance(op, _Op))
        out = original(*args, **kwargs)
        meta = any(isinstance(a, torch.Tensor) and a.is_meta for a in (*args, *kwargs.values()))
        if meta and sum(1 for op in rec.ops if isinstance(op, _Op)) == before:
            raise WorkloadError(f"{state.what}: mixture-of-experts module '{name}' ({type(m).__name__}) ran no expert "
                                "GEMM on the meta device and is not one npukit can route (transformers' experts "
                                "classes, OmniMoE, PEER); its expert GEMMs would be missing")
        return out

    return forward


# ---------------------------------------------------------------------------- transformers experts
def _hf_forward(m: nn.Module, name: str, rec: _Recorder, state: MoeState) -> Any:
    original = type(m).forward.__get__(m)

    def forward(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                *args: Any, **kwargs: Any) -> torch.Tensor:
        if not hidden_states.is_meta:
            return original(hidden_states, top_k_index, top_k_weights, *args, **kwargs)
        up_name = "gate_up_proj" if m.has_gate else "up_proj"
        w_up, w_down = getattr(m, up_name), m.down_proj
        n_exp = int(getattr(m, "num_experts", w_up.shape[0]))
        tokens, hidden, k = hidden_states.shape[0], hidden_states.shape[-1], top_k_index.shape[-1]
        loads = expert_loads(state.routing, tokens, k, n_exp, state.next_layer(), state.what)
        if name not in state.inactive:
            params = sum(p.numel() for p in m.parameters())
            state.inactive[name] = params - params * k // n_exp
        out = torch.zeros_like(hidden_states)
        for e, t in enumerate(loads):
            if not t:
                continue
            with _scope(rec, name, f"{e}"):
                x = hidden_states.new_empty((t, hidden))  # its tokens, gathered after the router picked them
                rec.mark([x], rec.gathered(rec.made_from([hidden_states, top_k_index])))
                with _scope(rec, name, f"{e}.{up_name}"):
                    h = _linear(m, x, w_up[e], getattr(m, f"{up_name}_bias")[e] if m.has_bias else None)
                h = m._apply_gate(h) if m.has_gate else m.act_fn(h)
                with _scope(rec, name, f"{e}.down_proj"):
                    y = _linear(m, h, w_down[e], m.down_proj_bias[e] if m.has_bias else None)
                if getattr(m, "has_post_expert_norm", False):
                    y = m.post_expert_norm(y)
                w = top_k_weights.new_empty((t, 1))  # its tokens' routing weights
                rec.mark([w], rec.gathered(rec.made_from([top_k_weights])))
                y = y * w
                out.index_add_(0, _meta_long(t), y.to(out.dtype))
                _scatter_add(rec, y, out)
        return out

    return forward


def _scatter_add(rec: _Recorder, y: torch.Tensor, into: torch.Tensor) -> None:
    """The scatter-add of the rows ``y`` into the layer's output ``into`` (``index_add_``: one add per element)."""
    if rec.vector_ops and not rec.suppress:
        rec.produce(rec.vector("add", "index_add", y, inputs=2), rec.made_from([y, into]), [into])


def _linear(m: nn.Module, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w.transpose(0, 1) if m.is_transposed else w, b)


# ---------------------------------------------------------------------------- OmniMoE and PEER
def _omnimoe_forward(m: nn.Module, name: str, rec: _Recorder, state: MoeState) -> Any:
    original = type(m).forward.__get__(m)

    def forward(hidden_states: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if not hidden_states.is_meta:
            return original(hidden_states, **kwargs)
        shape, hidden, k, n = hidden_states.shape, m.hidden_size, m.top_k, m.num_expert_sqrt
        x = hidden_states.reshape(-1, hidden)
        tokens = x.shape[0]
        # the Cartesian router: two n-way projections, BatchNorm, log_softmax, top-k of the k' x k' product
        t = m.router_temperature
        lp_x = F.log_softmax(m.router_norm_x(m.router_gate_x(x)) / t, dim=-1)
        lp_y = F.log_softmax(m.router_norm_y(m.router_gate_y(x)) / t, dim=-1)
        kk = min(k, n)
        with _scope(rec, name, "router"):
            cand = lp_x.new_empty((tokens, kk, 1)) + lp_y.new_empty((tokens, 1, kk))
            gates = torch.exp(cand.reshape(tokens, -1)[:, :k])
        if name not in state.inactive:
            table = m.up_embed.weight.numel() + m.down_embed.weight.numel()
            state.inactive[name] = table - table * k // m.num_experts
        loads = expert_loads(state.routing, tokens, k, n * n, state.next_layer(), state.what)
        shared = m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))
        for load, count in sorted(Counter(c for c in loads if c).items()):
            with _scope(rec, name, f"experts_up_m{load}"):
                a = torch.bmm(x.new_empty((count, load, hidden)), x.new_empty((count, hidden, 1)))
            a = F.silu(a) * gates.new_empty((count, load, 1))
            with _scope(rec, name, f"experts_down_m{load}"):
                torch.bmm(a, x.new_empty((count, 1, hidden)))
        with _scope(rec, name, "experts"):
            y = x.new_empty((tokens * k, hidden))
            shared.index_add_(0, _meta_long(tokens * k), y)
            _scatter_add(rec, y, shared)
        del gates
        return shared.reshape(shape)

    return forward


def _peer_forward(m: nn.Module, name: str, rec: _Recorder, state: MoeState) -> Any:
    original = type(m).forward.__get__(m)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if not x.is_meta:
            return original(x)
        shape, dim, h, d, n, kh = x.shape, m.dim, m.heads, m.dim_key, m.num_keys, m.experts_per_head
        flat = x.reshape(-1, dim)
        tokens, k = flat.shape[0], m.top_k
        q = m.to_queries(flat).view(tokens, 2, h, d)
        with _scope(rec, name, "product_keys"):
            sim = torch.einsum("tphd,hkpd->pthk", q, m.keys)
            kx = min(kh, n)
            cand = sim.new_empty((tokens * h, kx, 1)) + sim.new_empty((tokens * h, 1, kx))
            scores = cand.reshape(tokens, h, -1)[:, :, :kh]
            gates = F.relu(scores) if m.non_competing_scores else scores.softmax(-1)
        if name not in state.inactive:
            table = m.weight_down_embed.weight.numel() + m.weight_up_embed.weight.numel()
            state.inactive[name] = table - table * k // m.num_experts
        state.next_layer()
        with _scope(rec, name, "tokens_up"):
            a = torch.bmm(flat.new_empty((tokens, 1, dim)), flat.new_empty((tokens, dim, k)))
        a = F.gelu(a) * gates.reshape(tokens, 1, k)
        with _scope(rec, name, "tokens_down"):
            out = torch.bmm(a, flat.new_empty((tokens, k, dim)))
        return out.reshape(shape)

    return forward
