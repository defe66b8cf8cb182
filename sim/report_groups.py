"""Grouping a report's layers: per layer, per block or per operator type, and the top N plus "other".

A layer's name is its ledger scope without the workload (``llama-3.1-8b/model.layers.3.self_attn.q_proj``
-> ``model.layers.3.self_attn.q_proj``); its parts are the name split on ``.`` and ``/`` (PyTorch module
paths use ``.``, ONNX node names ``/``).

- ``layer``: each layer on its own.
- ``block``: with ``block_depth`` N, the name's first N parts; by default the repeated block a layer sits
  in: its name up to the first part that is a number followed by more parts (``model.layers.3``,
  ResNet's ``layer2.0``, ONNX ``/model/layers.3``, diffusers' ``transformer_blocks.7``); a layer outside
  every block keeps as many parts as the blocks' container has (``model.embed_tokens``, ``lm_head``,
  ``conv1``), its trailing repeat index dropped (``model.rotary_emb.mul.1`` -> ``model.rotary_emb``).
- ``op``: the operator type: the last part that is not a repeat index, without a ``_N`` suffix
  (``q_proj``, ``softmax``, ``add``, ``conv1``, ``downsample``; an ONNX node's ``MatMul``).

A group's numbers are its layers' sums (cycles, energy, MACs, DRAM bytes); its mapping efficiency is
the MAC-weighted mean of its layers'.
"""

from __future__ import annotations

import re
from collections import Counter

from .errors import ConfigError
from .report_model import LayerView

GROUPS = ("layer", "block", "op")
DEFAULT_TOP = 25
MAX_TOP = 60  # figures draw at most this many groups (plus "other"): their size stays bounded
_PART = re.compile(r"[^./]+")
_INDEX = re.compile(r"\d+")
_SUFFIX = re.compile(r"(?<=[^_])_\d+$")


def short_names(scopes: list[str]) -> list[str]:
    """Drop a first path component shared by every scope (the workload): the layer names."""
    heads = {s.split("/", 1)[0] for s in scopes}
    if len(heads) == 1 and all("/" in s for s in scopes):
        return [s.split("/", 1)[1] or "(root)" for s in scopes]
    return [s or "(root)" for s in scopes]


def _parts(name: str) -> list[re.Match[str]]:
    return list(_PART.finditer(name))


def _prefix(name: str, parts: list[re.Match[str]], n: int) -> str:
    """The name up to the end of its n-th part (separators kept), at least one part."""
    if not parts:
        return name
    return name[: parts[max(1, min(n, len(parts))) - 1].end()]


def _block_index(parts: list[re.Match[str]]) -> int | None:
    """Position of the first part that is a number with more parts after it (a repeated block's index)."""
    for i, p in enumerate(parts[:-1]):
        if i > 0 and _INDEX.fullmatch(p.group()):
            return i
    return None


def _without_index(parts: list[re.Match[str]]) -> list[re.Match[str]]:
    k = len(parts)
    while k > 1 and _INDEX.fullmatch(parts[k - 1].group()):
        k -= 1
    return parts[:k]


def block_names(names: list[str], depth: int | None = None) -> list[str]:
    """Each layer name's block (see the module docstring); ``depth``: keep that many parts instead."""
    parts = [_parts(n) for n in names]
    if depth is not None:
        return [_prefix(n, p, depth) for n, p in zip(names, parts, strict=True)]
    idx = [_block_index(p) for p in parts]
    common = Counter(i for i in idx if i is not None).most_common(1)
    container = common[0][0] if common else 1
    out = []
    for n, p, i in zip(names, parts, idx, strict=True):
        out.append(_prefix(n, p, i + 1) if i is not None else _prefix(n, p, min(container, len(_without_index(p)))))
    return out


def op_names(names: list[str]) -> list[str]:
    """Each layer name's operator type (see the module docstring)."""
    out = []
    for n in names:
        p = _without_index(_parts(n))
        leaf = p[-1].group() if p else n
        out.append(_SUFFIX.sub("", leaf) or leaf)
    return out


def merge(scope: str, views: list[LayerView]) -> LayerView:
    """One view summing ``views`` (cycles, energy, MACs, DRAM bytes); facts: the kinds joined, the mapping
    when all agree, the MAC-weighted mapping efficiency and the number of layers."""
    if len(views) == 1:
        v = views[0]
        return LayerView(scope, dict(v.cycles), dict(v.energy_pj), v.macs, v.dram_bytes, {**v.facts, "layers": 1})
    cyc: dict[str, float] = {}
    energy: dict[str, float] = {}
    for v in views:
        for k, c in v.cycles.items():
            cyc[k] = cyc.get(k, 0.0) + c
        for k, e in v.energy_pj.items():
            energy[k] = energy.get(k, 0.0) + e
    facts: dict[str, object] = {"layers": sum(int(v.facts.get("layers", 1)) for v in views)}
    kinds = sorted({str(k) for v in views for k in str(v.facts.get("kind", "")).split("+") if k})
    if kinds:
        facts["kind"] = "+".join(kinds)
    maps = {str(v.facts["mapping"]) for v in views if "mapping" in v.facts}
    if len(maps) == 1:
        facts["mapping"] = maps.pop()
    elif maps:
        facts["mapping"] = "mixed"
    w = [(v.macs, v.facts.get("mapping_efficiency")) for v in views]
    w = [(m, e) for m, e in w if m > 0 and isinstance(e, int | float) and not isinstance(e, bool)]
    if w:
        facts["mapping_efficiency"] = sum(m * e for m, e in w) / sum(m for m, _ in w)
    return LayerView(scope, cyc, energy, sum(v.macs for v in views), sum(v.dram_bytes for v in views), facts)


def check_group(group: str, top: int, block_depth: int | None) -> None:
    """Raise :class:`ConfigError` for an unknown group, a top N outside 1..MAX_TOP or a bad block depth."""
    if group not in GROUPS:
        raise ConfigError(f"group must be one of {', '.join(GROUPS)}, got {group!r}")
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise ConfigError(f"top must be an integer from 1 to {MAX_TOP} (groups shown before 'other'), got {top!r}")
    if block_depth is not None:
        if isinstance(block_depth, bool) or not isinstance(block_depth, int) or block_depth < 1:
            raise ConfigError(f"block depth must be an integer >= 1 (name parts per block), got {block_depth!r}")
        if group != "block":
            raise ConfigError("block depth applies to grouping by block (--group block); drop it or group by block")


def group_layers(layers: list[LayerView], group: str, block_depth: int | None = None) -> list[LayerView]:
    """``layers`` grouped by ``group`` (``layer``, ``block`` or ``op``), in the order each group first
    appears; each view's scope is the group's name (layer names without the workload)."""
    names = short_names([layer.scope for layer in layers])
    if group == "layer":
        keys = names
    elif group == "block":
        keys = block_names(names, block_depth)
    else:
        keys = op_names(names)
    members: dict[str, list[LayerView]] = {}
    for key, layer in zip(keys, layers, strict=True):
        members.setdefault(key, []).append(layer)
    return [merge(key, views) for key, views in members.items()]


def top_groups(views: list[LayerView], n: int, key: str, noun: str = "layer") -> list[LayerView]:
    """All of ``views`` when there are at most ``n`` (in their order); else the ``n`` largest by ``key``
    (``energy``: pJ, ``cycles`` or ``macs``), largest first, and one ``other (K <noun>s)`` view summing
    the rest (its facts carry ``other: K``)."""
    if len(views) <= n:
        return list(views)
    ranked = sorted(views, key=lambda v: -_measure(v, key))
    rest = ranked[n:]
    other = merge(f"other ({len(rest)} {noun}s)", rest)
    other.facts["other"] = len(rest)
    return [*ranked[:n], other]


def _measure(v: LayerView, key: str) -> float:
    if key == "energy":
        return v.total_energy_pj
    if key == "cycles":
        return v.total_cycles
    if key == "macs":
        return v.macs
    raise ValueError(f"unknown ranking {key!r}")


def is_other(v: LayerView) -> bool:
    """The view :func:`top_groups` made of the layers left out."""
    return "other" in v.facts
