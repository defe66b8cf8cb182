"""The one workload loader: every form of workload string, one ``key=val`` option grammar, one error.

Forms (:data:`WORKLOAD_FORMS`)::

    resnet18[:image=N]  minilm-l6[:seq=N]  llama3-8b-layer[:seq=N,phase=prefill|decode]   built-ins
    gemm:M=512,N=512,K=512                                                                 one GEMM
    layers.csv                                                                             SCALE-Sim topology
    model.onnx[:NAME=N,...]                  ONNX (``input_shape``, or dynamic dims by name as options: sweeps)
    llama-3.1-8b[:seq=..]  flux.1-kontext-dev[:res=..]  qwen-image-edit[:res=..]           real models
    hf:CONFIG.json[:key=val,...]  diffusers:CONFIG.json[:key=val,...]                      any real config
    torch:resnet18  torch:minilm                                                           built-in PyTorch models
    FILE.py:FACTORY  module:FACTORY                     imports and runs that code: only with allow_code=True

The built-ins and ``gemm:`` import nothing heavy; the real models and PyTorch models import torch (and
transformers / diffusers) only when loaded; ``.onnx`` imports onnx only then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from npukit.sim import Workload, WorkloadError
from npukit.sim.workload import BUILTIN_WORKLOADS, load_topology_csv

WORKLOAD_FORMS = (
    "a built-in (resnet18[:image=N], minilm-l6[:seq=N], llama3-8b-layer[:seq=N,phase=prefill|decode])",
    "gemm:M=..,N=..,K=..",
    "a SCALE-Sim topology FILE.csv",
    "an ONNX FILE.onnx[:DIM=N,...]",
    "a real model (llama-3.1-8b, mixtral-8x7b, deepseek-v2-lite, flux.1-kontext-dev, qwen-image-edit)[:key=val,...]",
    "hf:CONFIG.json[:key=val,...] or diffusers:CONFIG.json[:key=val,...]",
    "torch:NAME (resnet18, minilm)",
    "FILE.py:FACTORY or module:FACTORY (runs that code; refused where code may not run)",
)

# the forms that import and run the user's Python code
CODE_FORMS = ("code",)


def parse_options(text: str, types: Mapping[str, Callable[[str], Any]], what: str, *,
                  other: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """``key=val,key=val`` -> ``{key: types[key](val)}``, the one option grammar of every workload form.

    ``types`` maps each accepted key to a converter (``int``, ``str``, ...); ``other``, when given, converts the
    value of any key not in ``types`` (open key sets: an ONNX model's dynamic dim names); ``what`` names the
    workload in errors. An empty item, an item without ``=``, an unknown or repeated key, or a value the
    converter refuses raises :class:`WorkloadError` with one line naming the keys it takes."""
    takes = ", ".join([*(f"{k}=..." for k in types), *(["NAME=..."] if other is not None else [])])
    out: dict[str, Any] = {}
    if not text.strip():
        return out
    for item in text.split(","):
        key, eq, val = (s.strip() for s in item.partition("="))
        if not eq or not key or not val:
            raise WorkloadError(f"workload '{what}': bad option '{item.strip()}'; write key=value (takes {takes})")
        convert = types.get(key, other)
        if convert is None:
            raise WorkloadError(f"workload '{what}': unknown option '{key}' (takes {takes})")
        if key in out:
            raise WorkloadError(f"workload '{what}': option '{key}' is given twice")
        try:
            out[key] = convert(val)
        except ValueError:
            name = getattr(convert, "__name__", "a valid value")
            raise WorkloadError(f"workload '{what}': option {key} must be {name}, got '{val}'") from None
    return out


def workload_form(spec: str) -> str:
    """Which form ``spec`` is: builtin, csv, onnx, real, config, torch or code (see :data:`WORKLOAD_FORMS`);
    raises :class:`WorkloadError` naming the forms when it is none of them."""
    from .real_models import REAL_MODELS

    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(f"workload spec must be a non-empty string, got {spec!r}; expected {_forms()}")
    spec = spec.strip()
    prefix = spec.partition(":")[0]
    low = spec.lower()
    if prefix in BUILTIN_WORKLOADS:
        return "builtin"
    if low.endswith(".onnx") or _onnx_split(spec)[0].lower().endswith(".onnx"):
        return "onnx"
    if low.endswith(".csv") or (":" not in spec and Path(spec).exists()):
        return "csv"
    if prefix in ("hf", "diffusers"):
        return "config"
    if prefix in REAL_MODELS:
        return "real"
    if prefix == "torch":
        return "torch"
    if ":" in spec:
        return "code"
    raise WorkloadError(f"unknown workload '{spec}': expected {_forms()}")


def _onnx_split(spec: str) -> tuple[str, str]:
    """``FILE.onnx:DIM=N,...`` -> (``FILE.onnx``, ``DIM=N,...``); ``FILE.onnx:`` -> (``FILE.onnx``, '') (no options:
    before, the trailing colon sent it to the Python-code form's message); any other string -> (itself, '')."""
    head, sep, tail = spec.strip().rpartition(":")
    if sep and head.lower().endswith(".onnx") and ("=" in tail or not tail.strip()):
        return head, tail.strip()
    return spec.strip(), ""


def _forms() -> str:
    return "; ".join(WORKLOAD_FORMS)


def resolve_paths(spec: str, base_dir: str | Path) -> tuple[str, list[Path]]:
    """``spec`` with its file parts (a .csv/.onnx path, an hf:/diffusers: config, a ``routing=FILE.json``) made
    absolute against ``base_dir`` when relative, and the files the workload is read from (for content hashes)."""
    form = workload_form(spec)
    spec = spec.strip()
    base = Path(base_dir)
    if form in ("csv", "onnx"):
        path_text, opts = _onnx_split(spec) if form == "onnx" else (spec, "")
        p = _beside(path_text, base)
        return str(p) + (f":{opts}" if opts else ""), [p]
    if form == "config":
        from .real_models import _split_path_options

        prefix, _, rest = spec.partition(":")
        path_text, opts = _split_path_options(rest)
        p = _beside(path_text, base)
        opts, files = _resolve_routing(opts, base)
        return f"{prefix}:{p}" + (f":{opts}" if opts else ""), [p, *files]
    if form == "real":
        name, _, opts = spec.partition(":")
        opts, files = _resolve_routing(opts, base)
        return name + (f":{opts}" if opts else ""), files
    return spec, []


def _beside(path_text: str, base: Path) -> Path:
    """``path_text`` (``~`` expanded) as an absolute path, read against ``base`` when relative."""
    p = Path(path_text).expanduser()
    return p if p.is_absolute() else base / p


def _resolve_routing(opts: str, base: Path) -> tuple[str, list[Path]]:
    """A real model's options with a ``routing=FILE.json`` made absolute against ``base``, and that file (if any)."""
    items, files = [], []
    for item in opts.split(",") if opts else []:
        key, eq, val = item.partition("=")
        if eq and key.strip() == "routing" and val.strip().lower().endswith(".json"):
            p = _beside(val.strip(), base)
            item, files = f"{key}={p}", [*files, p]
        items.append(item)
    return ",".join(items), files


def load_workload(spec: str, *, input_shape: str | None = None, allow_code: bool = False,
                  base_dir: str | Path | None = None) -> Workload:
    """The :class:`~npukit.sim.Workload` of any workload string (see :data:`WORKLOAD_FORMS`).

    ``input_shape``: the example input of a PyTorch model (``1,3,224,224``) or an ONNX file's input shape or
    named dynamic dims (``batch_size=1,sequence_length=128``); ``allow_code``: whether ``FILE.py:FACTORY`` /
    ``module:FACTORY`` may import and run that Python code (the CLI allows it, sweep specs do not);
    ``base_dir``: the folder relative file paths are read from (default: the working directory).
    Every failure raises :class:`WorkloadError` (a :class:`~npukit.sim.ConfigError`) with one line."""
    form = workload_form(spec)
    spec = spec.strip()
    if base_dir is not None:
        spec, _ = resolve_paths(spec, base_dir)
    if input_shape is not None and form in ("builtin", "csv"):
        raise WorkloadError(f"workload '{spec}': an input shape applies to PyTorch and ONNX models only")
    if form == "builtin":
        name, _, params = spec.partition(":")
        fn, types = BUILTIN_WORKLOADS[name]
        kwargs = parse_options(params, types, spec)
        if name == "gemm" and set(kwargs) != {"M", "N", "K"}:
            raise WorkloadError("workload 'gemm' needs M, N and K, e.g. gemm:M=512,N=512,K=512")
        return fn(**kwargs)
    if form == "csv":
        return load_topology_csv(spec)
    if form == "onnx":
        from .onnx_workload import onnx_workload

        path, dims = _onnx_split(spec)
        if dims and input_shape is not None:
            raise WorkloadError(f"workload '{spec}': give the dynamic dims either as options or as an input shape, "
                                "not both")
        return onnx_workload(path, dims or input_shape)
    if form == "code" and not allow_code:
        raise WorkloadError(f"workload '{spec}': FILE.py:FACTORY and module:FACTORY import and run Python code, "
                            f"which is refused here; use {_forms().rsplit('; ', 1)[0]}")
    from .real_models import workload_from_spec

    return workload_from_spec(spec, input_shape)
