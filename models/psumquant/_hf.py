"""transformers models on the array: their attention products through transformers' attention interface.

transformers (>= 5) models compute attention through ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``.
:func:`install` registers :func:`psum_attention` there (and transformers' additive ``eager_mask`` in
``AttentionMaskInterface``) as ``"npukit_psum"``, gives every attention module two :class:`Matmul`
slots (``psum_qk``, ``psum_pv``) and selects the implementation with ``set_attn_implementation``, so
:func:`npukit.models.psumquant.convert` (``matmuls=True``) turns the slots into :class:`PsumMatmul`
modules like any other; no model code is patched. :func:`uninstall` removes the slots and restores the
previous implementation. transformers is only touched when the caller already imported it.

An attention module is one whose ``forward`` looks up ``ALL_ATTENTION_FUNCTIONS`` (BERT's
``BertSelfAttention``, Llama's ``LlamaAttention`` ...). :func:`psum_attention` is transformers' eager
attention (grouped-query heads repeated, additive or boolean mask, optional logit soft-capping,
softmax in float32) with ``QK^T`` and ``PV`` run by the module's slots.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from ._matmul import Matmul

ATTN_NAME = "npukit_psum"
_PREV = "_npukit_prev_attn_implementation"  # attribute on a transformers model: the implementation before install


def _pretrained_class() -> type | None:
    """transformers' ``PreTrainedModel`` when the caller imported transformers, else None."""
    if "transformers" not in sys.modules:
        return None
    from transformers import PreTrainedModel

    return PreTrainedModel


def hf_roots(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of the outermost transformers models in ``model`` (the root included)."""
    cls = _pretrained_class()
    if cls is None:
        return []
    out: list[tuple[str, nn.Module]] = []
    for name, m in model.named_modules():
        inside = any(r == "" or name.startswith(r + ".") for r, _ in out)
        if isinstance(m, cls) and not inside:
            out.append((name, m))
    return out


def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of every module whose ``forward`` dispatches through ``ALL_ATTENTION_FUNCTIONS``."""
    out = []
    for name, m in model.named_modules():
        code = getattr(type(m).forward, "__code__", None)
        if code is not None and "ALL_ATTENTION_FUNCTIONS" in code.co_names:
            out.append((name, m))
    return out


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_NAME, psum_attention)
    AttentionMaskInterface.register(ATTN_NAME, eager_mask)


def install(model: nn.Module) -> int:
    """Put :class:`Matmul` slots on every attention module of every transformers model in ``model`` and
    select the ``"npukit_psum"`` attention implementation; returns the number of attention modules.
    Raises ``PsumQuantError`` for a transformers model that cannot switch its attention implementation."""
    from ._config import PsumQuantError

    roots = hf_roots(model)
    if not roots:
        return 0
    _register()
    n = 0
    for name, root in roots:
        attn = attention_modules(root)
        if not attn:
            continue
        if not root._can_set_attn_implementation():  # type: ignore[operator]
            raise PsumQuantError(f"{type(root).__name__} ('{name or '<root>'}') does not dispatch attention through "
                                 "transformers' AttentionInterface; its attention matmuls cannot be put on the array")
        setattr(root, _PREV, root.config._attn_implementation)
        root.set_attn_implementation(ATTN_NAME)  # type: ignore[operator]
        for _, m in attn:
            m.psum_qk, m.psum_pv = Matmul(), Matmul()
        n += len(attn)
    return n


def uninstall(model: nn.Module) -> None:
    """Undo :func:`install`: drop the slots and restore each model's previous attention implementation."""
    for _, root in hf_roots(model):
        if not hasattr(root, _PREV):
            continue
        for _, m in attention_modules(root):
            for slot in ("psum_qk", "psum_pv"):
                if slot in m._modules:
                    del m._modules[slot]
        root.set_attn_implementation(getattr(root, _PREV))  # type: ignore[operator]
        delattr(root, _PREV)


def psum_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention with ``QK^T`` and ``PV`` through ``module.psum_qk`` / ``psum_pv``
    (plain matmuls when the module has no slots). ``query``: (B, heads, Lq, D); ``key`` / ``value``:
    (B, kv_heads, Lk, D); returns (output (B, Lq, heads, D), attention weights (B, heads, Lq, Lk))."""
    from ._config import PsumQuantError

    if kwargs.get("s_aux") is not None:
        raise PsumQuantError(f"{type(module).__name__}: attention sinks (s_aux) are not supported by the npukit_psum attention")
    qk = getattr(module, "psum_qk", None) or torch.matmul
    pv = getattr(module, "psum_pv", None) or torch.matmul
    rep = query.shape[1] // key.shape[1]
    if rep > 1:  # grouped-query attention: every query head sees its kv head
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    w = qk(query, key.transpose(-1, -2)) * scaling
    softcap = kwargs.get("softcap")
    if softcap:
        w = torch.tanh(w / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        w = w.masked_fill(~mask, torch.finfo(w.dtype).min) if mask.dtype == torch.bool else w + mask
    w = torch.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    w = nn.functional.dropout(w, p=dropout, training=module.training)
    out = pv(w, value).transpose(1, 2).contiguous()
    return out, w
