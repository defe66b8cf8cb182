"""OmniMoE (or PEER) as a drop-in MLP of a transformers Llama/Qwen-family model.

``replace_mlp(model, OmniMoEConfig(num_experts=..., top_k=...))`` swaps every decoder layer's
SwiGLU MLP (a module named ``mlp`` with ``gate_proj``/``up_proj``/``down_proj``, as in
``LlamaMLP``, ``Qwen2MLP``, ``Qwen3MLP``) for an :class:`~npukit.models.omnimoe.OmniMoE` layer (shared
dense SwiGLU + atomic experts); ``replace_mlp(model, PEERConfig(...))`` for the PEER baseline
(:class:`~npukit.models.omnimoe.PEER`, whose state dict and outputs equal the pinned PEER-pytorch
package's ``PEER``; ``impl='peer-pytorch'`` uses that package's module itself). Sizes left out
default to those of the MLP being replaced (hidden size, and for OmniMoE the shared SwiGLU's
intermediate size); with ``copy_mlp`` the shared SwiGLU starts from the replaced MLP's weights.

The choice is recorded in ``model.config.npukit_replace_mlp`` (a plain dict, so ``save_pretrained``
writes it into config.json); :func:`load_replaced` rebuilds the same model from a
``save_pretrained`` folder and loads its state dict (the ``from_pretrained`` semantics: every
weight and buffer restored, tied weights re-tied, nothing missing or unexpected).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npukit.sim.errors import ConfigError

from ._no_remote_code import NO_REMOTE_CODE, auto_kwargs, config_dict, refuse_remote_code

__all__ = ["OmniMoEConfig", "PEERConfig", "active_mlp_params", "load_replaced", "replace_mlp"]

CONFIG_KEY = "npukit_replace_mlp"


@dataclass(frozen=True)
class OmniMoEConfig:
    """OmniMoE layer sizes: ``num_experts`` atomic experts (n*n routable, n = isqrt), ``top_k`` per
    token; ``intermediate_size`` of the shared SwiGLU (None: the replaced MLP's);
    ``router_temperature`` (1.0: the reference's routing; see :class:`~npukit.models.omnimoe.OmniMoE`)."""

    num_experts: int
    top_k: int
    intermediate_size: int | None = None
    backend: str = "auto"
    deterministic: bool = False
    router_temperature: float = 1.0
    kind: str = dataclasses.field(default="omnimoe", init=False)


@dataclass(frozen=True)
class PEERConfig:
    """PEER layer sizes: ``num_experts`` (a square), ``heads`` product-key retrievals of
    ``experts_per_head`` experts, query/key width ``dim_key`` (None: hidden // 2);
    ``non_competing_scores`` False: softmax over a head's experts (the paper's), True: ReLU.
    ``impl``: ``npukit`` (kernels with FLOP/byte accounting) or ``peer-pytorch`` (the package's module)."""

    num_experts: int
    heads: int = 8
    experts_per_head: int = 16
    dim_key: int | None = None
    non_competing_scores: bool = False
    impl: str = "npukit"
    kind: str = dataclasses.field(default="peer", init=False)


def _as_dict(cfg: OmniMoEConfig | PEERConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _from_dict(d: dict[str, Any]) -> OmniMoEConfig | PEERConfig:
    d = dict(d)
    kind = d.pop("kind", None)
    cls = {"omnimoe": OmniMoEConfig, "peer": PEERConfig}.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ConfigError(f"config.{CONFIG_KEY} has kind {kind!r}; expected 'omnimoe' or 'peer'")
    return cls(**d)


def _mlps(model: Any) -> list[tuple[Any, Any]]:
    """(parent, mlp) for every SwiGLU MLP named ``mlp`` in the model (one per decoder layer)."""
    out = []
    for m in model.modules():
        mlp = getattr(m, "mlp", None)
        if mlp is not None and all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj")):
            out.append((m, mlp))
    return out


def _build(cfg: OmniMoEConfig | PEERConfig, mlp: Any, hidden_act: str) -> Any:
    from .omnimoe import PEER, OmniMoE

    hidden, inter = mlp.gate_proj.in_features, mlp.gate_proj.out_features
    if isinstance(cfg, OmniMoEConfig):
        return OmniMoE(hidden, cfg.intermediate_size or inter, cfg.num_experts, cfg.top_k, hidden_act=hidden_act,
                       backend=cfg.backend, deterministic=cfg.deterministic, router_temperature=cfg.router_temperature)
    if cfg.impl == "peer-pytorch":
        from PEER_pytorch import PEER as RefPEER

        if cfg.num_experts < 1 or round(cfg.num_experts**0.5) ** 2 != cfg.num_experts:
            raise ConfigError(f"PEER needs a square num_experts (n*n), got {cfg.num_experts}")
        return RefPEER(hidden, heads=cfg.heads, num_experts=cfg.num_experts, num_experts_per_head=cfg.experts_per_head,
                       dim_key=cfg.dim_key, non_competing_scores=cfg.non_competing_scores)
    if cfg.impl != "npukit":
        raise ConfigError(f"PEERConfig.impl must be 'npukit' or 'peer-pytorch', got {cfg.impl!r}")
    return PEER(hidden, heads=cfg.heads, num_experts=cfg.num_experts, experts_per_head=cfg.experts_per_head,
                dim_key=cfg.dim_key, non_competing_scores=cfg.non_competing_scores)


def replace_mlp(model: Any, config: OmniMoEConfig | PEERConfig, *, copy_mlp: bool = True) -> Any:
    """Replace every decoder layer's MLP of ``model`` (in place) and return it.

    ``copy_mlp``: an OmniMoE layer whose shared SwiGLU has the replaced MLP's shape starts from its
    weights (so a trained model keeps its MLP as the shared expert). Raises ConfigError when the model
    has no SwiGLU ``mlp`` modules, its activation is not SiLU (OmniMoE's), or a size is invalid."""
    import torch

    if not isinstance(config, OmniMoEConfig | PEERConfig):
        raise ConfigError(f"replace_mlp needs an OmniMoEConfig or a PEERConfig, got {type(config).__name__}")
    pairs = _mlps(model)
    if not pairs:
        raise ConfigError(f"{type(model).__name__} has no SwiGLU 'mlp' modules (gate_proj/up_proj/down_proj) "
                          "to replace; pass a Llama/Qwen-family transformers model")
    hf_cfg = getattr(model, "config", None)
    hidden_act = getattr(hf_cfg, "hidden_act", "silu")
    if isinstance(config, OmniMoEConfig) and hidden_act != "silu":
        raise ConfigError(f"OmniMoE's shared MLP is SwiGLU (SiLU); the model's hidden_act is {hidden_act!r}")
    for parent, mlp in pairs:
        new = _build(config, mlp, hidden_act)
        w = mlp.gate_proj.weight
        new = new.to(device=w.device, dtype=w.dtype)
        if copy_mlp and isinstance(config, OmniMoEConfig) and new.gate_proj.weight.shape == w.shape:
            with torch.no_grad():
                for name in ("gate_proj", "up_proj", "down_proj"):
                    getattr(new, name).weight.copy_(getattr(mlp, name).weight)
        parent.mlp = new
    if hf_cfg is not None:
        setattr(hf_cfg, CONFIG_KEY, _as_dict(config))
    return model


def active_mlp_params(mlp: Any) -> int:
    """Weights one token touches in one MLP layer (routers and product keys included; experts: only
    the ``top_k`` chosen ones): dense SwiGLU 3*H*I, OmniMoE 3*H*I + 2*n*H + 2*k*H, PEER
    H*2*h*dk + h*n*2*dk + 2*h*k_h*H."""
    from .omnimoe import PEER, OmniMoE

    if isinstance(mlp, OmniMoE):
        dense = sum(p.numel() for name, p in mlp.named_parameters() if not name.endswith("_embed.weight"))
        return dense + mlp.top_k * 2 * mlp.hidden_size
    if isinstance(mlp, PEER):
        return mlp.to_queries[0].weight.numel() + mlp.keys.numel() + mlp.top_k * 2 * mlp.dim
    if all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj")):
        return sum(getattr(mlp, a).weight.numel() for a in ("gate_proj", "up_proj", "down_proj"))
    raise ConfigError(f"active_mlp_params: unknown MLP type {type(mlp).__name__}")


def load_replaced(path: str | Path, model_cls: Any = None) -> Any:
    """A model saved with ``save_pretrained`` after :func:`replace_mlp`, rebuilt and loaded.

    ``model_cls``: a transformers model class (default ``AutoModelForCausalLM``). The config's
    ``npukit_replace_mlp`` entry says which layer to rebuild; a folder without it loads as is. Raises
    ConfigError when the folder holds no config/weights or the weights do not fit."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"'{path}' holds no config.json; pass a folder written by save_pretrained")
    refuse_remote_code(config_dict(path / "config.json", ConfigError), f"'{path / 'config.json'}'", ConfigError)
    config = AutoConfig.from_pretrained(path, **NO_REMOTE_CODE)
    cls = model_cls or AutoModelForCausalLM
    entry = getattr(config, CONFIG_KEY, None)
    if entry is None:
        return cls.from_pretrained(path, **auto_kwargs(cls))
    model = cls.from_config(config, **auto_kwargs(cls)) if hasattr(cls, "from_config") else cls(config)
    replace_mlp(model, _from_dict(entry), copy_mlp=False)
    state = _read_state(path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    missing = [k for k in missing if k not in tied and not _is_tied(model, k)]
    if missing or unexpected:
        raise ConfigError(f"weights in '{path}' do not fit the rebuilt model: missing {missing[:3]}, "
                          f"unexpected {list(unexpected)[:3]}")
    return model.eval()


def _is_tied(model: Any, key: str) -> bool:
    """Whether ``key`` is the output embedding tied to the input one (save_pretrained drops it)."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return (out is not None and inp is not None and out.weight is inp.weight and key.endswith("weight")
            and key.startswith("lm_head"))


def _read_state(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ConfigError(f"'{path}' holds no model.safetensors; pass a folder written by save_pretrained")
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(path / f)))
    return state
