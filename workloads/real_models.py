"""Whole real models, built by their own libraries from a config file, as npukit workloads.

Spec forms (the ``--workload`` of ``npukit sim``), read by :func:`workload_from_spec`:

* a built-in of :data:`REAL_MODELS`: ``llama-3.1-8b`` and ``llama-3.1-70b`` (transformers ``LlamaForCausalLM``),
  the mixtures of experts ``mixtral-8x7b`` (``MixtralForCausalLM``) and ``deepseek-v2-lite`` (``DeepseekV2ForCausalLM``:
  2 shared + 64 routed experts),
  ``flux.1-kontext-dev`` (diffusers ``FluxTransformer2DModel``), ``qwen-image-edit`` (diffusers
  ``QwenImageTransformer2DModel``), each from its public config in ``workloads/configs/`` (sources in the files);
* ``hf:path/to/config.json``: transformers ``AutoConfig`` + ``AutoModelForCausalLM`` (else ``AutoModel``);
* ``diffusers:path/to/config.json``: the diffusers class named by the config's ``_class_name`` (supported:
  :data:`DIFFUSION_CLASSES`);

each optionally followed by ``:key=value,...``. Language models take ``seq=N`` (prompt tokens, default 2048),
``batch=B`` (default 1), ``phase=prefill|decode`` (default prefill) and, for decode, ``kv=L``: one new token per
sequence attending to a KV cache of L tokens (its attention GEMMs have K/N = L + 1, and each layer appends its new
key and value rows: a ``kv_append`` op). Mixture-of-experts models take ``routing=uniform|zipf:S|FILE.json`` (how the
tokens fall on the experts, default uniform: :mod:`npukit.workloads.moe_routing`; only the experts some token hits
are computed and fetched). ``mlp=omnimoe|peer`` replaces every decoder MLP of a Llama/Qwen-family model with
:func:`npukit.models.replace_mlp` (OmniMoE: expert-centric; PEER: token-centric gather), sized by ``experts=N`` (a
square, default 1,048,576), ``topk=K`` (default 32), ``heads=H`` (PEER, default 8; K/H experts per head) and
``shared=I`` (OmniMoE's shared SwiGLU, default the replaced MLP's size). ``meta['active_params']`` counts the
parameters one token touches. Config sizes are checked before anything is built
(:mod:`npukit.workloads._config_limits`). Diffusion transformers take ``res=R`` (image side in pixels, a multiple of
16, default 1024: (R/16)^2 tokens per image after the VAE's 8x and the 2x2 patching), ``seq=N`` (text tokens,
default 512), ``ref=K`` (reference images at the same resolution whose tokens join the sequence: 1 for the edit
built-ins, else 0), ``batch=B`` and ``steps=S`` (denoising steps, default 1). The workload is one transformer
forward; ``steps`` multiplies every layer's and vector op's ``batch`` by S (``meta['steps']``). Classifier-free
guidance is not added: give ``batch=2`` for a cond + uncond pair per step.

The model is instantiated on ``torch.device("meta")`` (no weights, nothing downloaded or computed) in the config's
``torch_dtype`` (else bfloat16) with PyTorch's SDPA attention and traced once with
:func:`npukit.workloads.trace.trace_workload`, GEMMs and vector ops. The attention GEMMs are the full Lq x Lk
products the SDPA kernel is given (causal masking does not halve them). Meta tensors hold no values, so
transformers' packed-sequence detection (data-dependent) is skipped: each batch row is one sequence.

Traces are cached as JSON (:mod:`npukit.workloads._trace_cache`) in ``traces`` under npukit's cache root
(``$NPUKIT_CACHE_DIR`` or ``~/.cache/npukit``), keyed by the config file's content hash, the trace options,
the npukit version, the torch/transformers/diffusers versions and the hash of the tracer's
source; ``steps`` is applied after the cache.
Importing this module imports nothing heavy: torch and the model libraries load only when a trace is needed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..models import NO_REMOTE_CODE, refuse_remote_code
from ..sim import check_integers, check_size, load_json
from ..sim.dataflow import GATHERED
from ..sim.dataflow import KEY as DATAFLOW
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload
from . import _trace_cache
from ._config_limits import check_config_limits
from ._mlp_option import check_mlp_options, mlp_config
from .loader import parse_options
from .moe_routing import Routing, parse_routing

__all__ = ["REAL_MODELS", "DIFFUSION_CLASSES", "RealModel", "workload_from_spec", "real_model_workload"]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass(frozen=True)
class RealModel:
    """A built-in real model: its config file (in ``workloads/configs``), library and default reference images."""

    config: str
    library: str  # 'transformers' | 'diffusers'
    ref: int = 0

    @property
    def path(self) -> Path:
        return CONFIG_DIR / self.config


REAL_MODELS: dict[str, RealModel] = {
    "llama-3.1-8b": RealModel("llama-3.1-8b.json", "transformers"),
    "llama-3.1-70b": RealModel("llama-3.1-70b.json", "transformers"),
    "mixtral-8x7b": RealModel("mixtral-8x7b.json", "transformers"),
    "deepseek-v2-lite": RealModel("deepseek-v2-lite.json", "transformers"),
    "flux.1-kontext-dev": RealModel("flux.1-kontext-dev.json", "diffusers", ref=1),
    "qwen-image-edit": RealModel("qwen-image-edit.json", "diffusers", ref=1),
}

# diffusers classes whose forward inputs this module knows how to build
DIFFUSION_CLASSES = ("FluxTransformer2DModel", "QwenImageTransformer2DModel")

_PREFIXES = {"hf": "transformers", "diffusers": "diffusers"}
_LM_OPTIONS = {"seq": "N", "batch": "B", "phase": "prefill|decode", "kv": "L", "routing": "uniform|zipf:S|FILE.json",
               "mlp": "omnimoe|peer", "experts": "N", "topk": "K", "heads": "H", "shared": "I"}
_DIFFUSION_OPTIONS = {"res": "R", "seq": "N", "ref": "K", "batch": "B", "steps": "S"}
_LIMITS = {"seq": 1 << 20, "kv": 1 << 20, "batch": 4096, "res": 16384, "ref": 8, "steps": 10000,
           "experts": 1 << 22, "topk": 4096, "heads": 256, "shared": 1 << 18}
# the model-spec loader (model_specs.py) does not shape traces
_TRACER_SOURCES = ("trace.py", "_trace_record.py", "_trace_lower.py", "_trace_meta.py", "_trace_cache.py",
                   "real_models.py", "_trace_moe.py", "moe_routing.py", "_mlp_option.py", "_diffusion_inputs.py")


# ---------------------------------------------------------------------------- spec parsing
def workload_from_spec(spec: str, input_shape: str | None = None) -> Workload:
    """The workload for any spec ``npukit.sim`` does not know: a real model (see the module docstring) or a
    PyTorch model (``torch:NAME``, ``FILE.py:FACTORY``, ``module:FACTORY``, see
    :func:`npukit.workloads.model_specs.workload_from_model_spec`; ``input_shape`` applies to those only). Every failure
    raises :class:`WorkloadError` with one line."""
    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(f"workload spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    prefix, _, rest = spec.partition(":")
    if prefix in _PREFIXES:
        path_text, opts = _split_path_options(rest)
        if not path_text:
            raise WorkloadError(f"workload '{spec}': give a config file, e.g. {prefix}:path/to/config.json")
        path = Path(path_text).expanduser()
        name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
        _no_input_shape(spec, input_shape)
        return real_model_workload(_PREFIXES[prefix], path, opts, name or "model", spec=spec)
    if prefix in REAL_MODELS:
        _no_input_shape(spec, input_shape)
        m = REAL_MODELS[prefix]
        return real_model_workload(m.library, m.path, rest, prefix, spec=spec, ref_default=m.ref, builtin=True)
    if ":" in spec:
        from .model_specs import workload_from_model_spec

        return workload_from_model_spec(spec, input_shape)
    from .loader import WORKLOAD_FORMS

    raise WorkloadError(f"unknown workload '{spec}': expected {'; '.join(WORKLOAD_FORMS)}")


def _split_path_options(rest: str) -> tuple[str, str]:
    """``path[:key=val,...]`` -> (path, options): the options start at the first ``:`` followed by ``key=``
    (so that an option value may hold a ``:``, as ``routing=zipf:1.2`` does), else at a trailing ``:``."""
    m = re.search(r":(?=[A-Za-z_][A-Za-z0-9_]*=)", rest)
    if m and m.start() > 0:
        return rest[: m.start()], rest[m.end():]
    if rest.endswith(":"):
        return rest[:-1], ""
    return rest, ""


def _no_input_shape(spec: str, input_shape: str | None) -> None:
    if input_shape is not None:
        raise WorkloadError(f"workload '{spec}': --input-shape does not apply to a real model; "
                            f"use its options (seq=, batch=, res=)")


def _parse_options(spec: str, text: str, family: str, ref_default: int) -> dict[str, Any]:
    """Validate ``key=val,...`` for a model family ('lm' or 'diffusion') and fill in the defaults."""
    allowed = _LM_OPTIONS if family == "lm" else _DIFFUSION_OPTIONS
    given: dict[str, str] = parse_options(text, dict.fromkeys(allowed, str), spec)
    opts: dict[str, Any] = {}
    for key, val in given.items():
        if key == "phase":
            if val not in ("prefill", "decode"):
                raise WorkloadError(f"workload '{spec}': phase must be prefill or decode, not '{val}'")
            opts[key] = val
            continue
        if key == "mlp":
            if val not in ("omnimoe", "peer"):
                raise WorkloadError(f"workload '{spec}': mlp must be omnimoe or peer, not '{val}'")
            opts[key] = val
            continue
        if key == "routing":
            opts[key] = parse_routing(val, f"workload '{spec}'").text
            continue
        low = 0 if key == "ref" else 1
        if not re.fullmatch(r"[0-9]+", val) or not low <= int(val) <= _LIMITS[key]:
            raise WorkloadError(f"workload '{spec}': {key} must be an integer from {low} to {_LIMITS[key]:,}, got '{val}'")
        opts[key] = int(val)
    if family == "lm":
        check_mlp_options(spec, opts)
        phase = opts.setdefault("phase", "prefill")
        if phase == "decode":
            if "seq" in opts:
                raise WorkloadError(f"workload '{spec}': decode runs one new token per sequence; "
                                    f"give the cache length with kv=L, not seq")
            if "kv" not in opts:
                raise WorkloadError(f"workload '{spec}': phase=decode needs the KV-cache length, e.g. kv=4096")
        elif "kv" in opts:
            raise WorkloadError(f"workload '{spec}': kv=L applies to phase=decode only")
        else:
            opts.setdefault("seq", 2048)
    else:
        if opts.setdefault("res", 1024) % 16:
            raise WorkloadError(f"workload '{spec}': res must be a multiple of 16 (8x VAE, 2x2 patches), got {opts['res']}")
        opts.setdefault("seq", 512)
        opts.setdefault("ref", ref_default)
        opts.setdefault("steps", 1)
    opts.setdefault("batch", 1)
    return dict(sorted(opts.items()))


def _read_config(path: Path, library: str, spec: str) -> tuple[bytes, dict[str, Any]]:
    try:
        check_size(path, f"workload '{spec}': config file", WorkloadError)
        raw = path.read_bytes()
    except FileNotFoundError:
        raise WorkloadError(f"workload '{spec}': config file '{path}' does not exist") from None
    except OSError as e:
        raise WorkloadError(f"workload '{spec}': cannot read config file '{path}': {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WorkloadError(f"workload '{spec}': config file '{path}' is not valid JSON ({e})") from None
    cfg = load_json(text, f"workload '{spec}': config file '{path}'", WorkloadError)
    if not isinstance(cfg, dict):
        raise WorkloadError(f"workload '{spec}': config file '{path}' must hold a JSON object")
    refuse_remote_code(cfg, f"workload '{spec}': config file '{path}'", WorkloadError)
    check_integers(cfg, f"workload '{spec}': config file '{path}'", WorkloadError)
    check_config_limits(cfg, f"workload '{spec}': config file '{path}'")
    if library == "transformers" and not isinstance(cfg.get("model_type"), str):
        raise WorkloadError(f"workload '{spec}': config file '{path}' has no \"model_type\" (a transformers config.json)")
    if library == "diffusers":
        cls = cfg.get("_class_name")
        if not isinstance(cls, str):
            raise WorkloadError(f"workload '{spec}': config file '{path}' has no \"_class_name\" (a diffusers config.json)")
        if cls not in DIFFUSION_CLASSES:
            raise WorkloadError(f"workload '{spec}': diffusers class '{cls}' is not supported "
                                f"(supported: {', '.join(DIFFUSION_CLASSES)})")
    return raw, cfg


# ---------------------------------------------------------------------------- workloads
def real_model_workload(library: str, config: str | Path, options: str = "", name: str | None = None, *,
                        spec: str | None = None, ref_default: int = 0, builtin: bool = False) -> Workload:
    """The workload of the model ``config`` (a transformers or diffusers config.json) builds, with ``options``
    (``key=val,...``, see the module docstring). Cached; raises :class:`WorkloadError` with one line."""
    path = Path(config)
    name = name or path.stem
    if spec is None:
        spec = f"{name}:{options}" if options else name
    if library not in _PREFIXES.values():
        raise WorkloadError(f"workload '{spec}': library must be transformers or diffusers, not '{library}'")
    family = "lm" if library == "transformers" else "diffusion"
    opts = _parse_options(spec, options, family, ref_default)
    raw, cfg = _read_config(path, library, spec)
    steps = opts.get("steps", 1)
    trace_opts = {k: v for k, v in opts.items() if k != "steps"}
    routing = parse_routing(opts["routing"], f"workload '{spec}'") if "routing" in opts else Routing()
    if routing.kind == "file":  # the trace depends on the file's content, not only its name
        trace_opts["routing_sha256"] = hashlib.sha256(json.dumps(routing.counts).encode()).hexdigest()
    key = _cache_key(library, raw, name, trace_opts)
    entry = _trace_cache.cache_dir() / f"{_safe(name)}-{key[:24]}.json"
    wl = _trace_cache.load(entry, key=key)  # None too for an entry made for another key (copied over this file)
    if wl is None or wl.name != name:
        traced = _trace(library, cfg, trace_opts, name, spec, repeats=builtin and not routing.per_layer,
                        routing=routing)
        traced.meta.update({
            "source": library,
            "config": path.name if builtin else str(path),
            "config_source": cfg.get("_source", ""),
            "config_sha256": hashlib.sha256(raw).hexdigest(),
            "options": trace_opts,
        })
        wl = _trace_cache.store(entry, traced, key=key)
    return _with_steps(wl, steps) if family == "diffusion" else wl


def _with_steps(wl: Workload, steps: int) -> Workload:
    """``wl`` repeated ``steps`` times: every layer's and vector op's ``batch`` multiplied."""
    meta = dict(wl.meta, steps=steps, options=dict(wl.meta.get("options", {}), steps=steps))
    if steps == 1:
        return Workload(wl.name, list(wl.layers), meta)
    layers: list[Layer | VectorOp] = [replace(ly, batch=ly.batch * steps) for ly in wl.layers]
    return Workload(wl.name, layers, meta)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:64] or "model"


def _version(dist: str) -> str:
    from importlib import metadata  # here, not at the top: 13 ms that `npukit sim` on a file never needs

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _cache_key(library: str, raw: bytes, name: str, trace_opts: dict[str, Any]) -> str:
    from npukit import __version__

    here = Path(__file__).resolve().parent
    tracer = hashlib.sha256(b"".join((here / f).read_bytes() for f in _TRACER_SOURCES)).hexdigest()
    key = {
        "format": _trace_cache.FORMAT, "library": library, "name": name, "config": hashlib.sha256(raw).hexdigest(),
        "options": trace_opts, "npukit": __version__, "tracer": tracer,
        "torch": _version("torch"), library: _version(library),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------- tracing (imports torch)
# the built-ins' repeated blocks: config key -> module list (all blocks of a list have one shape)
_TRACED_BLOCKS = 2  # blocks of each list traced; the last of them is repeated (it reads the one before, as later ones do)
_REPEATS = {
    "LlamaForCausalLM": {"num_hidden_layers": "model.layers"},
    "MixtralForCausalLM": {"num_hidden_layers": "model.layers"},
    "FluxTransformer2DModel": {"num_layers": "transformer_blocks", "num_single_layers": "single_transformer_blocks"},
    "QwenImageTransformer2DModel": {"num_layers": "transformer_blocks"},
}


def _trace(library: str, cfg: dict[str, Any], opts: dict[str, Any], name: str, spec: str,
           repeats: bool = False, routing: Routing | None = None) -> Workload:
    """Build and trace the model; with ``repeats`` (the built-ins, whose blocks are identical by construction)
    two blocks of each repeated list are traced and the second one's ops are repeated with the block index renamed,
    which gives the same workload and dataflow as tracing all of them (the second block reads the first, as every
    later block reads the one before it), in a fraction of the time."""
    import torch

    from .trace import _one_line, trace_workload

    clean = {k: v for k, v in cfg.items() if not k.startswith("_")}
    lists = _REPEATS.get(str(cfg.get("_class_name") or (cfg.get("architectures") or [""])[0]), {}) if repeats else {}
    counts = {lists[k]: clean[k] for k in lists if isinstance(clean.get(k), int) and clean[k] > 1}
    for key in lists:
        if lists[key] in counts:
            clean[key] = _TRACED_BLOCKS
    try:
        model, inputs, dtype = (_build_lm if library == "transformers" else _build_diffusion)(clean, cfg, opts, spec)
    except WorkloadError:
        raise
    except Exception as e:
        raise WorkloadError(f"workload '{spec}': {library} could not build the model: {_one_line(e)}") from e
    with torch.no_grad(), _meta_safe():
        wl = trace_workload(model, inputs, name, routing=routing)
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == "eager":
        wl = _eager_attention_kinds(wl, model)
    moe = wl.meta.get("moe")
    if "routing" in opts and not moe:
        raise WorkloadError(f"workload '{spec}': routing= says how tokens fall on the experts of mixture-of-experts "
                            f"layers, and {type(model).__name__} has none; run it without routing=")
    params = sum(p.numel() for p in model.parameters())
    inactive = dict(moe["inactive_params"]) if moe else {}
    for prefix, n in counts.items():
        block = model.get_submodule(f"{prefix}.0")
        params += (n - _TRACED_BLOCKS) * sum(p.numel() for p in block.parameters())
        wl = _repeat_block(wl, prefix, n, spec)
        for mod in [m for m in inactive if m.startswith(f"{prefix}.0.")]:
            inactive.update({f"{prefix}.{i}." + mod[len(prefix) + 3:]: inactive[mod] for i in range(_TRACED_BLOCKS, n)})
    if moe:
        moe["layers"] = sum(1 for _ in inactive) if counts else moe["layers"]
        moe["inactive_params"] = inactive
        wl.meta["active_params"] = params - sum(inactive.values())
    wl = _share_kv_heads(wl, clean)
    wl.meta["class"] = type(model).__name__
    wl.meta["params"] = params
    wl.meta["dtype"] = str(dtype).removeprefix("torch.")
    wl.meta["input_shapes"] = [s for s in wl.meta.get("input_shapes", []) if "=[" in s]
    return wl


def _repeat_block(wl: Workload, prefix: str, n: int, spec: str) -> Workload:
    """``wl`` (blocks ``prefix.0`` and ``prefix.1`` traced, each contiguous) with block 1's ops repeated as blocks
    2..n-1, and its dataflow likewise: block ``i`` reads block ``i - 1`` where block 1 reads block 0, and what read
    block 1 after the blocks reads block ``n - 1``."""
    last = _TRACED_BLOCKS - 1
    head = f"{prefix}.{last}."
    idx = [i for i, ly in enumerate(wl.layers) if ly.name.startswith(head)]
    if not idx or idx != list(range(idx[0], idx[-1] + 1)):
        raise WorkloadError(f"workload '{spec}': the ops of {prefix}.{last} are not contiguous in the trace; "
                            "npukit cannot repeat that block")
    seg = wl.layers[idx[0]: idx[-1] + 1]

    def renamed(name: str, i: int) -> str:  # a name of block 1 (or 0) as block i (or i - 1) has it
        mark = GATHERED if name.startswith(GATHERED) else ""  # a producer read through a gather of rows
        for b in (last, last - 1):
            if name.startswith(f"{mark}{prefix}.{b}."):
                return f"{mark}{prefix}.{i - last + b}." + name[len(f"{mark}{prefix}.{b}."):]
        return name

    reps = [replace(ly, name=renamed(ly.name, i)) for i in range(_TRACED_BLOCKS, n) for ly in seg]
    meta = dict(wl.meta)
    flow = wl.meta.get(DATAFLOW)
    if isinstance(flow, dict):
        after = {ly.name for ly in wl.layers[idx[-1] + 1:]}
        new = {k: [renamed(p, n - 1) for p in v] if k in after else v for k, v in flow.items()}
        for i in range(_TRACED_BLOCKS, n):
            new.update({renamed(ly.name, i): [renamed(p, i) for p in flow[ly.name]] for ly in seg if ly.name in flow})
        meta[DATAFLOW] = new
    return Workload(wl.name, wl.layers[: idx[-1] + 1] + reps + wl.layers[idx[-1] + 1:], meta)


def _share_kv_heads(wl: Workload, cfg: dict[str, Any]) -> Workload:
    """Grouped-query attention: each KV head serves ``num_attention_heads / num_key_value_heads`` consecutive
    query heads (transformers' ``repeat_kv`` order), so the attention GEMMs fetch keys and values once per
    group (:attr:`npukit.sim.Layer.shared`)."""
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if not isinstance(heads, int) or not isinstance(kv, int) or not 0 < kv < heads or heads % kv:
        return wl
    g = heads // kv
    layers = [replace(ly, shared=g) if isinstance(ly, Layer) and ly.kind == "attention" and ly.batch % heads == 0
              else ly for ly in wl.layers]
    return Workload(wl.name, layers, wl.meta)


@contextmanager
def _meta_safe() -> Iterator[None]:
    """Skip transformers' packed-sequence detection during a trace (it reads tensor values; meta tensors have none):
    every batch row is one sequence, as the inputs built here are."""
    import sys

    mu = sys.modules.get("transformers.masking_utils")
    original = getattr(mu, "find_packed_sequence_indices", None)
    if original is not None:
        mu.find_packed_sequence_indices = lambda *a, **k: None  # type: ignore[union-attr]
    try:
        yield
    finally:
        if original is not None:
            mu.find_packed_sequence_indices = original  # type: ignore[union-attr]


def _dtype(cfg: dict[str, Any]) -> Any:
    import torch

    name = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    dtype = getattr(torch, str(name), None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.bfloat16


def _build_lm(clean: dict[str, Any], cfg: dict[str, Any], opts: dict[str, Any], spec: str) -> tuple[Any, Any, Any]:
    """A transformers model on the meta device and its keyword inputs (token ids, and a filled KV cache for decode)."""
    import inspect

    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.for_model(**clean)  # a config class transformers ships (CONFIG_MAPPING), never auto_map
    dtype = _dtype(cfg)
    # SDPA, else (a class that refuses it, e.g. GPT-OSS with its attention sinks) eager attention: on the meta
    # device only shapes matter, and both issue the same Lq x Lk GEMMs
    attn = "sdpa" if _supports_sdpa(config) else "eager"
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn, **NO_REMOTE_CODE)
            causal = True
        except ValueError:
            model = AutoModel.from_config(config, dtype=dtype, attn_implementation=attn, **NO_REMOTE_CODE)
            causal = False
        if "mlp" in opts:
            from ..models import replace_mlp

            _refuse_moe_layers(model, opts["mlp"], spec)
            replace_mlp(model, mlp_config(opts), copy_mlp=False)
    b = opts["batch"]
    meta = torch.device("meta")
    takes_cache = "use_cache" in inspect.signature(model.forward).parameters
    if opts["phase"] == "prefill":
        inputs: dict[str, Any] = {"input_ids": torch.zeros(b, opts["seq"], dtype=torch.long, device=meta)}
        if takes_cache:
            inputs["use_cache"] = False
        return model, inputs, dtype
    if not causal or not takes_cache:
        raise WorkloadError(f"workload '{spec}': phase=decode needs a causal language model with a KV cache, "
                            f"not {type(model).__name__}")
    from transformers import DynamicCache

    text = model.config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    # per layer (key heads, key width, value width) of the cache; multi-head latent attention (DeepSeek-V2/V3) caches
    # its compressed latent and rotary key as one head each, as transformers' DeepseekV2Attention does
    rank, rope = getattr(text, "kv_lora_rank", None), getattr(text, "qk_rope_head_dim", None)
    kv_heads, k_dim, v_dim = (1, rank, rope) if rank and rope else (kv_heads, head_dim, head_dim)
    cache = DynamicCache(config=model.config)
    for i in range(text.num_hidden_layers):  # L cached tokens per layer (shapes only)
        k = torch.empty(b, kv_heads, opts["kv"], k_dim, dtype=dtype, device=meta)
        cache.update(k, torch.empty(b, kv_heads, opts["kv"], v_dim, dtype=dtype, device=meta), i)
    inputs = {"input_ids": torch.zeros(b, 1, dtype=torch.long, device=meta), "past_key_values": cache, "use_cache": True}
    return model, inputs, dtype


def _supports_sdpa(config: Any) -> bool:
    """Whether the transformers class of ``config`` (the causal LM, else the base model) takes SDPA attention."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING

    for mapping in (MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING):
        try:
            cls = mapping[type(config)]
        except (KeyError, ValueError):
            continue
        return bool(getattr(cls, "_supports_sdpa", True))
    return True


def _eager_attention_kinds(wl: Workload, model: Any) -> Workload:
    """Eager attention issues its scores and context GEMMs as ``torch.matmul`` (kind ``matmul``): mark those
    inside an attention module (a class named ``*Attention``) as ``attention``, as SDPA's are."""
    def in_attention(name: str) -> bool:
        for path in (name, name.rpartition(".")[0]):
            try:
                if type(model.get_submodule(path)).__name__.endswith("Attention"):
                    return True
            except AttributeError:
                continue
        return False

    layers = [replace(ly, kind="attention") if isinstance(ly, Layer) and ly.kind == "matmul" and in_attention(ly.name)
              else ly for ly in wl.layers]
    return Workload(wl.name, layers, wl.meta)


def _refuse_moe_layers(model: Any, mlp: str, spec: str) -> None:
    """Refuse ``mlp=omnimoe|peer`` on a model with mixture-of-experts layers: it replaces the dense SwiGLU MLPs
    only, so a model mixing MoE and dense layers (DeepSeek-V2, Qwen2-MoE's ``mlp_only_layers``) would silently
    become a hybrid; the error names the MoE layers (the modules holding the experts)."""
    from ._trace_moe import _kind

    moe = [name.rpartition(".")[0] or name for name, m in model.named_modules() if name and _kind(m) in ("hf", "unknown")]
    if not moe:
        return
    shown = ", ".join(moe[:3]) + (f", ... {moe[-1]}" if len(moe) > 3 else "")
    raise WorkloadError(f"workload '{spec}': mlp={mlp} replaces dense SwiGLU MLPs only, and {type(model).__name__} "
                        f"has {len(moe)} mixture-of-experts layer{'s' if len(moe) > 1 else ''} ({shown}); "
                        "run it without mlp=")


def _build_diffusion(clean: dict[str, Any], cfg: dict[str, Any], opts: dict[str, Any], spec: str) -> tuple[Any, Any, Any]:
    """A diffusers transformer on the meta device and the keyword inputs of one denoising step."""
    import logging

    import diffusers
    import torch

    cls = getattr(diffusers, cfg["_class_name"])
    dtype = _dtype(cfg)
    log = logging.getLogger("diffusers")
    level = log.level
    log.setLevel(logging.ERROR)  # '.to(dtype)' warns about float32 modules; there are none here
    try:
        with torch.device("meta"):
            model = cls.from_config(clean).to(dtype)
    finally:
        log.setLevel(level)
    from ._diffusion_inputs import DIFFUSION_INPUTS

    return model, DIFFUSION_INPUTS[cfg["_class_name"]](model.config, opts, dtype), dtype
