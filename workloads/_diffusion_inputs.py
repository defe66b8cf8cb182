"""Forward inputs of the diffusion transformers :mod:`npukit.workloads.real_models` builds (meta tensors, shapes only):
one denoising step of FLUX.1 (Kontext) and Qwen-Image (Edit) at the options ``res``, ``seq``, ``ref`` and ``batch``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DIFFUSION_INPUTS"]


def _image_tokens(opts: dict[str, Any]) -> tuple[int, int]:
    """(tokens per image side, image tokens of the generated and reference images) at ``res``."""
    side = opts["res"] // 16  # VAE 8x down, then 2x2 patches packed into one token
    return side, side * side * (1 + opts["ref"])


def _flux_inputs(config: Any, opts: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """FLUX.1 (Kontext): packed latents of the image and its references, T5 text states, CLIP pooled text."""
    import torch

    meta, b, t = torch.device("meta"), opts["batch"], opts["seq"]
    _, n = _image_tokens(opts)
    inputs = {
        "hidden_states": torch.empty(b, n, config.in_channels, dtype=dtype, device=meta),
        "encoder_hidden_states": torch.empty(b, t, config.joint_attention_dim, dtype=dtype, device=meta),
        "pooled_projections": torch.empty(b, config.pooled_projection_dim, dtype=dtype, device=meta),
        "timestep": torch.empty(b, dtype=dtype, device=meta),
        "img_ids": torch.empty(n, 3, device=meta),
        "txt_ids": torch.empty(t, 3, device=meta),
        "return_dict": False,
    }
    if config.guidance_embeds:
        inputs["guidance"] = torch.empty(b, dtype=dtype, device=meta)
    return inputs


def _qwen_inputs(config: Any, opts: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """Qwen-Image (Edit): packed latents of the image and its references, Qwen2.5-VL text states."""
    import torch

    meta, b, t = torch.device("meta"), opts["batch"], opts["seq"]
    side, n = _image_tokens(opts)
    return {
        "hidden_states": torch.empty(b, n, config.in_channels, dtype=dtype, device=meta),
        "encoder_hidden_states": torch.empty(b, t, config.joint_attention_dim, dtype=dtype, device=meta),
        "timestep": torch.empty(b, dtype=dtype, device=meta),
        "img_shapes": [[(1, side, side)] * (1 + opts["ref"])] * b,
        "return_dict": False,
    }


DIFFUSION_INPUTS: dict[str, Callable[[Any, dict[str, Any], Any], dict[str, Any]]] = {
    "FluxTransformer2DModel": _flux_inputs,
    "QwenImageTransformer2DModel": _qwen_inputs,
}
