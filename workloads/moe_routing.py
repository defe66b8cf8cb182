"""Routing of a mixture-of-experts layer as a workload option: how many tokens each expert computes.

A model traced on the meta device has no token values, so its router decides nothing; the tracer asks this module
how the ``T x k`` (token, expert) pairs of one MoE layer (``T`` tokens, each routed to ``k`` of ``N`` experts)
fall on the experts. The ``routing=`` option of a real model (see :mod:`npukit.workloads.real_models`) is one of

* ``uniform`` (the default): every expert is equally likely, per-token hit probability ``q_i = k/N``;
* ``zipf:S``: expert ``i`` (0-based) is chosen with probability proportional to ``(i+1)^-S`` (S >= 0; 0 is uniform),
  ``q_i = min(1, c (i+1)^-S)`` with ``c`` such that ``sum q_i = k`` (a token picks k *distinct* experts, so no
  expert is hit by more than every token);
* ``FILE.json``: per-expert token counts, e.g. measured on a real run: a JSON list of N non-negative numbers (one
  list for every MoE layer), or ``{"counts": [...]}``, or ``{"counts": [[...], [...], ...]}`` with one list per MoE
  layer in program order. Counts that sum to ``T x k`` with none above ``T`` are used as they are; any other counts
  are read as relative loads ``q_i`` proportional to them (capped at 1 as for zipf) and go through the rule below.

**The rule** (:func:`expert_loads`). From the per-token hit probabilities ``q_i`` (``sum q_i = k``):

1. the number of distinct experts hit is the expectation ``D = round(sum_i 1 - (1 - q_i)^T)``, at least ``k`` and at
   most ``min(N, T x k)``; with uniform routing this is ``N (1 - (1 - k/N)^T)``: ``k`` experts for one decode token,
   all ``N`` for a long prefill;
2. those are the ``D`` experts with the largest ``q_i`` (ties: lowest index first);
3. the ``T x k`` pairs are dealt out over them: one each, the rest in proportion to ``q_i``, no expert above ``T``
   (largest-remainder rounding, so the counts are integers that sum to exactly ``T x k``).

**Weight-fetch consequence**: the tracer records GEMMs only for experts with a non-zero count, so a decode step
fetches the weights of the ``D`` experts some token hit and no others: per MoE layer
``D x (weights of one expert) x bytes per weight`` of DRAM reads (Mixtral-8x7B, one token: 2 of 8 experts;
a batch of B tokens: ``8 (1 - (3/4)^B)`` on average, rounded). Imports nothing heavy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..sim import check_size, load_json
from ..sim.errors import WorkloadError

__all__ = ["ROUTING_FORMS", "Routing", "expected_distinct", "expert_loads", "hit_probabilities", "parse_routing"]

ROUTING_FORMS = "uniform, zipf:S (S from 0 to 16) or FILE.json (per-expert token counts)"
MAX_ZIPF = 16.0


@dataclass(frozen=True)
class Routing:
    """A routing rule: ``kind`` uniform | zipf | file; ``s`` the zipf exponent; ``counts`` the file's lists
    (one per MoE layer, or one for all); ``text`` the option as given (a file as its resolved path)."""

    kind: str = "uniform"
    s: float = 0.0
    counts: tuple[tuple[float, ...], ...] = ()
    text: str = "uniform"

    @property
    def per_layer(self) -> bool:
        """Whether the rule gives each MoE layer its own counts (a file with several lists)."""
        return len(self.counts) > 1

    def counts_for(self, layer: int, num_experts: int, what: str) -> tuple[float, ...] | None:
        """The file's counts for MoE layer ``layer`` (0-based, program order), None for uniform/zipf."""
        if self.kind != "file":
            return None
        if self.per_layer and layer >= len(self.counts):  # one list (not per layer) serves every MoE layer
            raise WorkloadError(f"{what}: routing file '{self.text}' gives counts for {len(self.counts)} MoE layers, "
                                f"the model has more")
        row = self.counts[layer] if self.per_layer else self.counts[0]
        if len(row) != num_experts:
            raise WorkloadError(f"{what}: routing file '{self.text}' gives {len(row)} counts, the layer has "
                                f"{num_experts} experts")
        return row


def parse_routing(text: str, what: str, base_dir: str | Path | None = None) -> Routing:
    """The :class:`Routing` of the option text ``uniform``, ``zipf:S`` or ``FILE.json`` (relative to ``base_dir``,
    default the working directory); raises :class:`WorkloadError` with one line."""
    text = text.strip()
    if text == "uniform":
        return Routing()
    if text.startswith("zipf:"):
        raw = text[len("zipf:"):]
        try:
            s = float(raw)
        except ValueError:
            s = math.nan
        if not 0.0 <= s <= MAX_ZIPF:
            raise WorkloadError(f"{what}: routing=zipf:S needs S from 0 to {MAX_ZIPF:g}, got '{raw}'")
        return Routing("zipf", s, text=f"zipf:{s:g}")
    if text.lower().endswith(".json"):
        path = Path(text).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        return Routing("file", counts=_read_counts(path, what), text=str(path))
    raise WorkloadError(f"{what}: routing must be {ROUTING_FORMS}, got '{text}'")


def _read_counts(path: Path, what: str) -> tuple[tuple[float, ...], ...]:
    try:
        check_size(path, f"{what}: routing file", WorkloadError)
        data = load_json(path.read_text(encoding="utf-8"), f"{what}: routing file '{path}'", WorkloadError)
    except FileNotFoundError:
        raise WorkloadError(f"{what}: routing file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"{what}: cannot read routing file '{path}' ({e})") from None
    if isinstance(data, dict):
        data = data.get("counts")
    rows = data if isinstance(data, list) and data and all(isinstance(r, list) for r in data) else [data]
    out = []
    for row in rows:
        ok = isinstance(row, list) and row and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c >= 0 for c in row)
        if not ok or not any(row):
            raise WorkloadError(f"{what}: routing file '{path}' must hold a list of non-negative per-expert token "
                                "counts (not all zero), {\"counts\": [...]} or one such list per MoE layer")
        out.append(tuple(float(c) for c in row))
    return tuple(out)


# ---------------------------------------------------------------------------- the rule
def hit_probabilities(weights: list[float] | tuple[float, ...], top_k: int) -> list[float]:
    """Per-token hit probabilities ``q_i = min(1, c w_i)`` with ``sum q_i = top_k`` (water-filling on the cap of 1)."""
    n = len(weights)
    k = min(top_k, sum(1 for w in weights if w > 0))
    q = [0.0] * n
    free = [i for i in range(n) if weights[i] > 0]
    budget = float(k)
    while free:
        total = sum(weights[i] for i in free)
        scale = budget / total
        capped = [i for i in free if weights[i] * scale >= 1.0]
        if not capped:
            for i in free:
                q[i] = weights[i] * scale
            break
        for i in capped:
            q[i] = 1.0
        budget -= len(capped)
        free = [i for i in free if weights[i] * scale < 1.0]
        if budget <= 0:
            break
    return q


def expected_distinct(q: list[float], tokens: int) -> float:
    """Expected number of distinct experts hit by ``tokens`` tokens: ``sum_i 1 - (1 - q_i)^tokens``."""
    return sum(1.0 - (1.0 - qi) ** tokens for qi in q if qi > 0)


def _probabilities(routing: Routing, num_experts: int, top_k: int, layer: int, what: str) -> list[float]:
    if routing.kind == "uniform":
        return [top_k / num_experts] * num_experts
    if routing.kind == "zipf":
        return hit_probabilities([(i + 1) ** -routing.s for i in range(num_experts)], top_k)
    row = routing.counts_for(layer, num_experts, what)
    return hit_probabilities(list(row or ()), top_k)


def expert_loads(routing: Routing, tokens: int, top_k: int, num_experts: int, layer: int = 0,
                 what: str = "workload") -> list[int]:
    """Tokens each of ``num_experts`` experts computes when ``tokens`` tokens are each routed to ``top_k`` of them,
    by the rule of the module docstring; ``layer`` is the MoE layer's index (program order) for per-layer files.
    The counts are integers summing to ``tokens x top_k`` (fewer only when a file names fewer than ``top_k``
    experts), none above ``tokens``."""
    if tokens < 1 or top_k < 1 or num_experts < 1:
        raise WorkloadError(f"{what}: an MoE layer needs tokens, top_k and experts >= 1, got {tokens}, {top_k}, "
                            f"{num_experts}")
    if top_k > num_experts:
        raise WorkloadError(f"{what}: top_k = {top_k} is more than the layer's {num_experts} experts")
    if routing.kind == "file":
        row = routing.counts_for(layer, num_experts, what) or ()
        if sum(row) == tokens * top_k and all(float(c).is_integer() and c <= tokens for c in row):
            return [int(c) for c in row]  # measured at this token count: as given
    if routing.kind == "uniform":  # the same rule, without per-expert lists to sort (a million atomic experts)
        d = max(top_k, min(round(num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)), num_experts,
                           tokens * top_k))
        extra = _deal(tokens * top_k - d, [1.0] * d, tokens - 1)
        return [1 + e for e in extra] + [0] * (num_experts - d)
    k = top_k
    q = _probabilities(routing, num_experts, top_k, layer, what)
    hit = [i for i in range(num_experts) if q[i] > 0]
    k = min(k, len(hit))
    pairs = tokens * k
    d = round(expected_distinct(q, tokens))
    d = max(k, min(d, len(hit), pairs))
    chosen = sorted(hit, key=lambda i: (-q[i], i))[:d]
    loads = [0] * num_experts
    extra = _deal(pairs - d, [q[i] for i in chosen], tokens - 1)
    for i, e in zip(chosen, extra, strict=True):
        loads[i] = 1 + e
    return loads


def _deal(total: int, weights: list[float], cap: int) -> list[int]:
    """``total`` items dealt out in proportion to ``weights`` with at most ``cap`` each (largest remainder)."""
    n = len(weights)
    out = [0] * n
    if total <= 0 or n == 0:
        return out
    if len(set(weights)) == 1:  # equal weights (uniform): exact and fast for a million experts
        base, rest = divmod(total, n)
        return [min(cap, base + (1 if i < rest else 0)) for i in range(n)]
    share = [0.0] * n
    free = list(range(n))
    left = float(total)
    while free and left > 0:
        w = sum(weights[i] for i in free)
        over = [i for i in free if left * weights[i] / w >= cap]
        if not over:
            for i in free:
                share[i] = left * weights[i] / w
            break
        for i in over:
            share[i] = float(cap)
        left -= cap * len(over)
        capped = set(over)
        free = [i for i in free if i not in capped]
    out = [min(cap, math.floor(s)) for s in share]
    short = total - sum(out)
    order = sorted(range(n), key=lambda i: (-(share[i] - math.floor(share[i])), i))
    for i in order:
        if short <= 0:
            break
        if out[i] < cap:
            out[i] += 1
            short -= 1
    return out
