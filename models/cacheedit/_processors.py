"""CacheEdit's attention processors for diffusers' FLUX and Qwen-Image attention: the stock processors with the
cached-K/V splice of :meth:`~npukit.models.cacheedit._diffusers.CacheEditState._splice` (installed and removed by
:func:`~npukit.models.cacheedit._diffusers.apply_cacheedit`), and the per-image RoPE rows they need."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npukit.sim.errors import ConfigError

if TYPE_CHECKING:
    from ._diffusers import CacheEdit


def _rope_flux_rows(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """diffusers' FLUX RoPE (``apply_rotary_emb``, real form, pairs on the last dim) with per-image rows:
    x (B, S, H, D), cos / sin (B, S, D)."""
    x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    x_rot = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
    return (x.float() * cos[:, :, None] + x_rot.float() * sin[:, :, None]).to(x.dtype)


def _rope_qwen_rows(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """diffusers' Qwen-Image RoPE (``apply_rotary_emb_qwen``, complex form) with per-image rows: x (B, S, H, D),
    freqs (B, S, D / 2) complex."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[:, :, None]).flatten(3).type_as(x)


class FluxCacheEditProcessor:
    """:class:`diffusers.models.transformers.transformer_flux.FluxAttnProcessor` with the K/V splice of
    :meth:`CacheEditState._splice` between RoPE and the attention (its queries may be fewer than its keys)."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, handle: CacheEdit, key: int) -> None:
        self.handle, self.key = handle, key

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, image_rotary_emb: Any = None) -> Any:
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.embeddings import apply_rotary_emb
        from diffusers.models.transformers.transformer_flux import _get_qkv_projections

        query, key, value, encoder_query, encoder_key, encoder_value = _get_qkv_projections(
            attn, hidden_states, encoder_hidden_states)
        query = attn.norm_q(query.unflatten(-1, (-1, attn.head_dim)))
        key = attn.norm_k(key.unflatten(-1, (-1, attn.head_dim)))
        value = value.unflatten(-1, (-1, attn.head_dim))
        if attn.added_kv_proj_dim is not None:
            encoder_query = attn.norm_added_q(encoder_query.unflatten(-1, (-1, attn.head_dim)))
            encoder_key = attn.norm_added_k(encoder_key.unflatten(-1, (-1, attn.head_dim)))
            encoder_value = encoder_value.unflatten(-1, (-1, attn.head_dim))
            query = torch.cat([encoder_query, query], dim=1)
            key = torch.cat([encoder_key, key], dim=1)
            value = torch.cat([encoder_value, value], dim=1)
        if image_rotary_emb is not None and image_rotary_emb[0].dim() == 3:  # per-image rows (sparse step)
            query = _rope_flux_rows(query, *image_rotary_emb)
            key = _rope_flux_rows(key, *image_rotary_emb)
        elif image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)
        st = self.handle.state()
        if st.mode == "sparse" and attention_mask is not None:
            raise ConfigError("cacheedit: attention masks are not supported at sparse steps (FLUX)")
        st._capture(query, key)
        key, value = st._splice(self.key, key, value)
        hidden_states = dispatch_attention_fn(query, key, value, attn_mask=attention_mask, backend=self._attention_backend,
                                              parallel_config=self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
        if encoder_hidden_states is not None:
            encoder_hidden_states, hidden_states = hidden_states.split_with_sizes(
                [encoder_hidden_states.shape[1], hidden_states.shape[1] - encoder_hidden_states.shape[1]], dim=1)
            hidden_states = attn.to_out[1](attn.to_out[0](hidden_states.contiguous()))
            encoder_hidden_states = attn.to_add_out(encoder_hidden_states.contiguous())
            return hidden_states, encoder_hidden_states
        return hidden_states


class QwenCacheEditProcessor:
    """:class:`diffusers.models.transformers.transformer_qwenimage.QwenDoubleStreamAttnProcessor2_0` with the
    K/V splice of :meth:`CacheEditState._splice` after RoPE (the text mask then covers every image key)."""

    _attention_backend = None
    _parallel_config = None

    def __init__(self, handle: CacheEdit, key: int) -> None:
        self.handle, self.key = handle, key

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 encoder_hidden_states_mask: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 image_rotary_emb: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_qwenimage import apply_rotary_emb_qwen

        if encoder_hidden_states is None:
            raise ValueError("QwenCacheEditProcessor requires encoder_hidden_states (text stream)")
        if attention_mask is not None:
            raise ValueError("QwenCacheEditProcessor does not accept an external attention_mask")
        seq_txt = encoder_hidden_states.shape[1]
        head_dim = attn.inner_dim // attn.heads
        img_q, img_k, img_v = (f(hidden_states).unflatten(-1, (-1, head_dim)) for f in (attn.to_q, attn.to_k, attn.to_v))
        txt_q, txt_k, txt_v = (f(encoder_hidden_states).unflatten(-1, (-1, head_dim))
                               for f in (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj))
        if attn.norm_q is not None:
            img_q = attn.norm_q(img_q)
        if attn.norm_k is not None:
            img_k = attn.norm_k(img_k)
        if attn.norm_added_q is not None:
            txt_q = attn.norm_added_q(txt_q)
        if attn.norm_added_k is not None:
            txt_k = attn.norm_added_k(txt_k)
        if image_rotary_emb is not None:
            img_freqs, txt_freqs = image_rotary_emb
            if img_freqs.dim() == 3:  # per-image rows (sparse step)
                img_q, img_k = _rope_qwen_rows(img_q, img_freqs), _rope_qwen_rows(img_k, img_freqs)
            else:
                img_q = apply_rotary_emb_qwen(img_q, img_freqs, use_real=False)
                img_k = apply_rotary_emb_qwen(img_k, img_freqs, use_real=False)
            txt_q = apply_rotary_emb_qwen(txt_q, txt_freqs, use_real=False)
            txt_k = apply_rotary_emb_qwen(txt_k, txt_freqs, use_real=False)
        query = torch.cat([txt_q, img_q], dim=1)
        key, value = self.handle.state()._splice(self.key, torch.cat([txt_k, img_k], dim=1), torch.cat([txt_v, img_v], dim=1))
        if encoder_hidden_states_mask is not None:
            image_mask = torch.ones((hidden_states.shape[0], key.shape[1] - seq_txt), dtype=torch.bool,
                                    device=hidden_states.device)
            attention_mask = torch.cat([encoder_hidden_states_mask, image_mask], dim=1)[:, None, None, :]
        out = dispatch_attention_fn(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
                                    backend=self._attention_backend, parallel_config=self._parallel_config)
        out = out.flatten(2, 3).to(query.dtype)
        img_out = attn.to_out[0](out[:, seq_txt:].contiguous())
        if len(attn.to_out) > 1:
            img_out = attn.to_out[1](img_out)
        return img_out, attn.to_add_out(out[:, :seq_txt].contiguous())
