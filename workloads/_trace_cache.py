"""On-disk cache of traced workloads (JSON), so that a real model is traced once per configuration.

An entry is ``<cache dir>/<name>-<key>.json``; the cache dir is ``traces`` under npukit's cache root
(``$NPUKIT_CACHE_DIR`` if set, else ``~/.cache/npukit``; never inside the repository). The key (see
:func:`npukit.workloads.real_models.workload_from_spec`) hashes everything a trace depends on, so an entry is
never stale, only unused. Entries are :mod:`npukit.sim.disk_cache` entries (a sha256 of the content): an entry
whose content does not match it (edited by hand), a corrupt or unreadable entry is ignored (the caller traces
again and rewrites it); a cache folder that cannot be written is skipped silently. The same layout stores the
lowered ONNX files (:mod:`npukit.workloads._onnx_cache`, another entry kind). Imports nothing heavy (no torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..sim import cache_subdir
from ..sim.dataflow import Dataflow
from ..sim.disk_cache import load_entry, store_entry
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload

FORMAT = 3  # bump when the entry layout changes (3: in a disk_cache entry, which carries the checksum)
KIND = "trace-workload"
_LAYER_EXTRAS = ("shared",)  # optional Layer fields, written only when not 1
_GEMM_KINDS = ("conv", "linear", "matmul", "attention", "gemm")  # Layer.kind


def cache_dir() -> Path:
    """The folder holding cached traces: ``traces`` under npukit's cache root (``$NPUKIT_CACHE_DIR`` or
    ``~/.cache/npukit``, :func:`npukit.sim.cache_root`)."""
    return cache_subdir("traces")


def workload_to_dict(wl: Workload) -> dict[str, Any]:
    """A JSON-ready dict of ``wl`` (its ``meta`` must hold JSON values only)."""
    layers: list[dict[str, Any]] = []
    for ly in wl.layers:
        if isinstance(ly, VectorOp):
            layers.append({"type": "vector", "name": ly.name, "op": ly.op, "elements": ly.elements, "reduce": ly.reduce,
                           "inputs": ly.inputs, "params": ly.params, "batch": ly.batch})
        else:
            row = {"type": "gemm", "name": ly.name, "M": ly.M, "N": ly.N, "K": ly.K, "batch": ly.batch,
                   "kind": ly.kind, "conv": list(ly.conv) if ly.conv is not None else None}
            extra = {f: getattr(ly, f) for f in _LAYER_EXTRAS if getattr(ly, f, 1) != 1}
            layers.append({**row, **extra})
    return {"format": FORMAT, "name": wl.name, "meta": wl.meta, "layers": layers}


def _is_count(v: Any) -> bool:
    """A positive integer (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _conv_row(x: dict[str, Any]) -> tuple[int, ...] | None:
    """The ``conv`` of a cached GEMM row: None, or 7 positive integers (ifmap_h, ifmap_w, fh, fw, cin, cout,
    stride) with the filter inside the padded input; raises :class:`WorkloadError` otherwise."""
    conv = x["conv"]
    if conv is None:
        return None
    if not isinstance(conv, list) or len(conv) != 7 or not all(_is_count(v) for v in conv):
        raise WorkloadError(f"conv of '{x['name']}' must be 7 positive integers, got {str(conv)[:60]}")
    if conv[2] > conv[0] or conv[3] > conv[1]:
        raise WorkloadError(f"conv of '{x['name']}' has a filter larger than its input")
    return tuple(conv)


def workload_from_dict(d: Any) -> Workload:
    """The :class:`Workload` :func:`workload_to_dict` wrote; raises :class:`WorkloadError` if ``d`` is not one
    (a wrong type, a layer field of the wrong type, a malformed ``conv`` or dataflow)."""
    try:
        if d["format"] != FORMAT or not isinstance(d["meta"], dict) or not isinstance(d["name"], str):
            raise WorkloadError("not a trace cache entry of this version")
        if not d["layers"]:
            raise WorkloadError("trace cache entry has no layers")
        layers: list[Layer | VectorOp] = []
        for x in d["layers"]:
            if not isinstance(x, dict) or not isinstance(x["name"], str) or not x["name"]:
                raise WorkloadError("a layer without a name")
            if x["type"] == "vector":
                if not isinstance(x["op"], str):
                    raise WorkloadError(f"vector op '{x['name']}' has no op class")
                layers.append(VectorOp(x["name"], x["op"], x["elements"], x["reduce"], x["inputs"], x["params"], x["batch"]))
            elif x["type"] == "gemm":
                if x["kind"] not in _GEMM_KINDS:
                    raise WorkloadError(f"layer '{x['name']}' has kind {str(x['kind'])[:40]!r}")
                extra = {f: x[f] for f in _LAYER_EXTRAS if f in x}
                layers.append(Layer(x["name"], x["M"], x["N"], x["K"], x["batch"], x["kind"], _conv_row(x), **extra))
            else:
                raise WorkloadError(f"unknown layer type {str(x['type'])[:40]!r}")
        wl = Workload(d["name"], layers, d["meta"])
        Dataflow.of(wl)  # a malformed dataflow (or repeated names beside one) is a WorkloadError here, not at simulation
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise WorkloadError(f"malformed trace cache entry ({type(e).__name__}: {e})") from None
    return wl


def load(path: Path, kind: str = KIND, key: str | None = None) -> Workload | None:
    """The workload cached at ``path``, or None if there is none, it is corrupt, too large or too deep, of another
    kind, its content does not match its checksum (an entry edited by hand is traced again, never used), it was
    stored for another ``key`` (an entry copied over another's file: made for other options or another config)
    or a layer field is malformed."""
    body = load_entry(path, kind)
    if body is None:
        return None
    if key is not None and (not isinstance(body, dict) or body.get("key") != key):
        return None
    try:
        return workload_from_dict(body)
    except WorkloadError:
        return None


def store(path: Path, wl: Workload, kind: str = KIND, key: str | None = None) -> Workload:
    """Write ``wl`` to ``path`` atomically (errors ignored: an unwritable folder is simply not cached), with the
    ``key`` it was made for (checked by :func:`load`); returns ``wl`` as a later :func:`load` gives it (JSON
    values: lists where ``meta`` had tuples)."""
    body = json.loads(json.dumps(workload_to_dict(wl)))
    if key is not None:
        body["key"] = key
    store_entry(path, kind, body)
    return workload_from_dict(body)
