"""Size limits of a transformers/diffusers config, checked before either library builds anything.

A model on the meta device allocates no weights, but every layer and expert is still a Python object and every op
a traced record: ``num_hidden_layers = 10**6`` ran for minutes and died of memory. The limits are far above any
public model (the deepest, Llama-3.1-405B, has 126 layers; DeepSeek-V3 has 256 routed experts in 58 of its 61
layers; the widest, 53,248-wide MLPs) and far below what exhausts a machine. Keys are checked wherever they occur
in the config (nested ``text_config`` / ``vision_config`` too). Imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

from ..sim.errors import WorkloadError

__all__ = ["CONFIG_LIMITS", "check_config_limits"]

MAX_LAYERS = 256
MAX_WIDTH = 262_144  # hidden, intermediate and head widths (elements)
MAX_HEADS = 4_096
MAX_VOCAB = 2_097_152
MAX_EXPERTS = 4_096
MAX_EXPERT_LAYERS = 65_536  # layers x routed experts (one traced record set per expert and layer)

_GROUPS: dict[str, tuple[int, tuple[str, ...]]] = {
    "layers": (MAX_LAYERS, ("num_hidden_layers", "num_layers", "num_single_layers", "n_layer", "n_layers",
                            "num_decoder_layers", "num_encoder_layers", "encoder_layers", "decoder_layers")),
    "width": (MAX_WIDTH, ("hidden_size", "d_model", "n_embd", "intermediate_size", "moe_intermediate_size",
                          "shared_expert_intermediate_size", "ffn_dim", "d_ff", "n_inner", "head_dim",
                          "attention_head_dim", "joint_attention_dim", "pooled_projection_dim", "kv_lora_rank",
                          "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "in_channels",
                          "out_channels")),
    "heads": (MAX_HEADS, ("num_attention_heads", "num_key_value_heads", "n_head", "num_heads")),
    "vocabulary": (MAX_VOCAB, ("vocab_size",)),
    "experts": (MAX_EXPERTS, ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                              "num_experts_per_tok", "n_shared_experts", "moe_topk")),
}
# key -> (limit, group), for the README and the error message
CONFIG_LIMITS: dict[str, tuple[int, str]] = {k: (lim, g) for g, (lim, keys) in _GROUPS.items() for k in keys}


def check_config_limits(cfg: dict[str, Any], what: str) -> None:
    """Raise :class:`WorkloadError` (one line) when a size in ``cfg`` (any nesting) is past its limit
    (:data:`CONFIG_LIMITS`), or the layers x routed experts product is past :data:`MAX_EXPERT_LAYERS`."""
    stack: list[Any] = [cfg]
    while stack:
        obj = stack.pop()
        if isinstance(obj, list):
            stack.extend(obj)
            continue
        if not isinstance(obj, dict):
            continue
        for key, val in obj.items():
            if isinstance(val, (dict, list)):
                stack.append(val)
            elif key in CONFIG_LIMITS and isinstance(val, int) and not isinstance(val, bool):
                limit, group = CONFIG_LIMITS[key]
                if val > limit:
                    raise WorkloadError(f"{what}: {key} = {val:,} is past npukit's limit of {limit:,} {group} "
                                        "(checked before the model is built)")
        layers = max((obj[k] for k in _GROUPS["layers"][1] if isinstance(obj.get(k), int)), default=0)
        experts = max((obj[k] for k in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
                       if isinstance(obj.get(k), int)), default=0)
        if layers * experts > MAX_EXPERT_LAYERS:
            raise WorkloadError(f"{what}: {layers:,} layers x {experts:,} experts is past npukit's limit of "
                                f"{MAX_EXPERT_LAYERS:,} (checked before the model is built)")
