"""Run names: the one rule that names a run's files by what it ran, the record of it in the ledger, and the
refusal to overwrite another run's files.

A run's file stem is ``WORKLOAD_ARCH_DATAFLOW_psumBITS[_OVERRIDE...]``:

* ``WORKLOAD``: the workload's name, then the options written in its spec, sorted by key: a number as key and
  value (``seq2048``, ``kv4096``), a word as the value alone (``prefill``, ``decode``), anything else as
  ``key-value``; then the ``--input-shape`` the same way (``in1x3x224x224`` or ``batch_size1``). So
  ``llama-3.1-8b:seq=2048,phase=prefill`` is ``llama-3.1-8b_prefill_seq2048``. A built-in named by its
  options (``gemm:M=8,N=8,K=8`` is ``gemm8x8x8``) does not repeat them. Options left at their defaults are not in
  the name (they do not differ); the ledger's ``meta["run"]`` records the spec as given and the workload's full
  options.
* ``ARCH``: the base arch's name (a built-in's or the ``name`` of its file), its dataflow and psum buffer width,
  then one token per other field a command-line override changed against that base (``mapping-fixed``,
  ``timing-double-buffered``, ``pe_psum24``, ``energy_table-aladdin40``: dotted keys by their last part).

A stem over :data:`MAX_STEM` characters is cut and ends in 8 hex digits of the sha256 of the whole stem, so two
long names still differ. :func:`refuse_existing` refuses (one :class:`ConfigError` line, before anything is
written) to replace a file an earlier run left, unless the caller passes ``overwrite``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .arch import Arch
from .errors import ConfigError
from .output import safe_filename
from .workload import BUILTIN_WORKLOADS

MAX_STEM = 120  # characters of a file stem (the OS allows 255 bytes per name; suffixes are added to the stem)
_SAME_IN_NAME = ("dataflow", "bits.psum_buffer", "name")  # arch fields every stem spells already


def spec_options(spec: str) -> dict[str, str]:
    """The ``key=value`` options written in a workload spec (``llama-3.1-8b:seq=512`` -> ``{'seq': '512'}``):
    everything from the first ``:``-separated part holding ``=``; ``{}`` when there is none."""
    parts = spec.strip().split(":")
    for i, part in enumerate(parts[1:], start=1):
        if "=" in part:
            text = ":".join(parts[i:])
            return dict(sorted((k.strip(), v.strip()) for k, _, v in (item.partition("=") for item in text.split(","))
                               if k.strip()))
    return {}


def option_token(key: str, value: Any) -> str:
    """One option as a name part: ``seq2048`` (a number), ``prefill`` (a word), ``key-value`` (anything else)."""
    text = str(value)
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return f"{key}{text}"
    if re.fullmatch(r"[A-Za-z]+", text):
        return text
    return f"{key}-{text}"


def workload_label(spec: str, name: str, input_shape: str | None = None) -> str:
    """The workload part of a run name (see the module docstring): ``name`` (the loaded workload's) with the
    options written in ``spec`` and the ``input_shape``."""
    head = spec.strip().partition(":")[0]
    opts = {} if head in BUILTIN_WORKLOADS and name != head else spec_options(spec)
    tokens = [option_token(k, v) for k, v in opts.items()]
    if input_shape:
        shape = input_shape.strip()
        if "=" in shape:
            tokens += [option_token(k.strip(), v.strip()) for k, _, v in (i.partition("=") for i in shape.split(","))]
        else:
            tokens.append("in" + "x".join(s.strip() for s in shape.split(",")))
    return "_".join([name, *tokens])


def arch_overrides(base: Arch, arch: Arch) -> dict[str, Any]:
    """Every field of ``arch`` that differs from ``base``, as dotted keys (``bits.pe_psum``) -> the new value."""
    a, b = arch.to_dict(), base.to_dict()
    out: dict[str, Any] = {}
    for key, val in a.items():
        if isinstance(val, dict):
            out.update({f"{key}.{k}": v for k, v in val.items() if b[key].get(k) != v})
        elif b.get(key) != val:
            out[key] = val
    return out


def override_tokens(overrides: Mapping[str, Any], skip: Iterable[str] = _SAME_IN_NAME) -> list[str]:
    """Name parts of arch overrides (key -> value), in key order; a file value by its stem."""
    out = []
    for key, val in sorted(overrides.items()):
        if key in skip:
            continue
        leaf = key.rpartition(".")[2]
        text = str(val)
        if "/" in text or text.endswith((".toml", ".yaml", ".yml", ".cfg")):
            text = Path(text).stem
        if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
            out.append(f"{leaf}{text}")
        else:
            out.append(f"{leaf}-{text}")
    return out


def run_stem(parts: Sequence[str]) -> str:
    """The file stem of a run from its name parts: each made safe (:func:`safe_filename`), joined by ``_``, and
    cut to :data:`MAX_STEM` characters, ending in a hash of the parts as given, when longer (or when a part was cut)."""
    raw = [str(p) for p in parts if str(p)]
    safe = [safe_filename(p) for p in raw]
    stem = "_".join(safe)
    if len(stem) > MAX_STEM or any(len(s) >= 100 for s in safe):
        digest = hashlib.sha256("\0".join(raw).encode()).hexdigest()[:8]
        stem = f"{stem[:MAX_STEM - 9].rstrip('_')}_{digest}"
    return stem


def single_core_stem(workload: str, base: Arch, arch: Arch) -> str:
    """The stem of a single-core run: workload label, base arch name, dataflow, psum width, other overrides."""
    return run_stem([workload, base.name, arch.dataflow, f"psum{arch.bits.psum_buffer}",
                     *override_tokens(arch_overrides(base, arch))])


def run_meta(spec: str, input_shape: str | None, workload_options: Any, arch_source: str, base: Arch | None,
             overrides: Mapping[str, Any], version: str, stem: str) -> dict[str, Any]:
    """What ``meta["run"]`` of a ledger records: the workload spec as given (and its full options, defaults
    included), the base arch (what ``--arch`` named, and its name) with every override, the mapping and
    objective, the npukit version and the file stem."""
    out: dict[str, Any] = {
        "workload_spec": spec, "input_shape": input_shape, "workload_options": workload_options,
        "arch": arch_source, "arch_base_name": base.name if base is not None else None,
        "arch_overrides": dict(overrides), "npukit": version, "stem": stem,
    }
    if base is not None:
        out["mapping"] = overrides.get("mapping", base.mapping)
        out["objective"] = overrides.get("objective", base.objective)
    return out


def refuse_existing(paths: Iterable[Path], overwrite: bool) -> None:
    """:class:`ConfigError` naming the first of ``paths`` that exists, unless ``overwrite``: a run never replaces
    another run's file silently. Call it before the first byte of output."""
    if overwrite:
        return
    for p in paths:
        if p.exists() or p.is_symlink():
            raise ConfigError(f"refusing to overwrite '{p}' (an earlier run wrote it); pass --overwrite to replace "
                              "it, or another --out")
