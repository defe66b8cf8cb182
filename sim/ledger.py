"""The Ledger: action counts and cycles under nested scopes, the one currency of npukit.

Every producer (the analytical NPU simulator, the cycle-level model, kernel benchmarks, PyTorch
models) records ``(component, action, bits) -> count`` under a scope path such as
``resnet18/layer3.0.conv2`` and cycles per scope. Energy is the ledger times an
:class:`~npukit.sim.energy.EnergyTable` (pJ). Ledgers merge and round-trip through JSON exactly.

Conventions: ``count`` is the number of actions (MACs, register writes of ``bits`` bits, memory
accesses of one ``bits``-wide element); ``bits`` is a tuple of widths in bits (see
:mod:`npukit.sim.energy`); cycles are clock cycles of the array's clock.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .bounded import MAX_INT, check_finite, load_json, short
from .energy import EnergyTable, load_table
from .errors import LedgerError
from .output import atomic_write_text
from .textfile import check_file, read_text

Key = tuple[str, str, str, tuple[int, ...]]  # (scope, component, action, bits)
FORMAT = "npukit-ledger/1"


MAX_BITS = 1 << 20  # widest access a ledger may record (bits)


def _norm_bits(bits: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    if isinstance(bits, int | float) and not isinstance(bits, bool):
        bits = (bits,)
    out = tuple(int(b) for b in bits)
    if any(b <= 0 or b > MAX_BITS for b in out) or any(b != bb for b, bb in zip(out, bits, strict=True)):
        raise LedgerError(f"bits must be positive integers up to {MAX_BITS:,}, got {short(bits)}")
    return out


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class Ledger:
    """Action counts and cycles under nested scopes.

    >>> led = Ledger()
    >>> with led.scope("net"), led.scope("fc"):
    ...     led.record("pe_array", "mac", (8, 8, 32), 1000)
    ...     led.add_cycles(100)
    >>> led.total_cycles()
    100
    """

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        self.counts: dict[Key, int | float] = defaultdict(int)
        self.cycles: dict[tuple[str, str], int | float] = defaultdict(int)
        self.components: dict[str, dict[str, Any]] = {}
        self.meta: dict[str, Any] = dict(meta or {})
        self.layers: dict[str, dict[str, Any]] = {}  # scope -> facts about it (see describe)
        self._stack: list[str] = []

    # ------------------------------------------------------------------ recording
    @contextmanager
    def scope(self, name: str) -> Iterator[Ledger]:
        """Nest subsequent records under ``name`` (joined with '/')."""
        self._stack.append(name)
        try:
            yield self
        finally:
            self._stack.pop()

    @property
    def current_scope(self) -> str:
        return _join(*self._stack)

    def _scope(self, scope: str | None) -> str:
        return _join(self.current_scope, scope) if scope else self.current_scope

    def declare(self, component: str, **attrs: Any) -> None:
        """Attach attributes to a component (e.g. ``kind='sram', capacity_bytes=65536``)."""
        old = self.components.get(component)
        if old is not None and old != attrs:
            raise LedgerError(f"component '{component}' declared twice with different attributes: {old} vs {attrs}")
        self.components[component] = dict(attrs)

    def describe(self, scope: str | None = None, **facts: Any) -> None:
        """Attach facts to a scope (JSON scalars: e.g. ``kind='conv'``, ``mapping_efficiency=0.75``
        (fraction of the PEs a fold covers), ``mapping='NMK M/1'``); later facts update earlier ones.
        Reports show them per layer; ledgers without them stay valid."""
        for key, value in facts.items():
            if value is not None and not isinstance(value, str | int | float | bool):
                raise LedgerError(f"fact '{key}' of scope '{self._scope(scope)}' must be a string or number, got {value!r}")
        self.layers.setdefault(self._scope(scope), {}).update(facts)

    def record(
        self, component: str, action: str, bits: int | tuple[int, ...], count: float, scope: str | None = None
    ) -> None:
        """Add ``count`` actions of ``action`` at ``bits`` on ``component``."""
        if not isinstance(count, int | float) or isinstance(count, bool) or not math.isfinite(count) or count < 0:
            raise LedgerError(f"count for {component}.{action} must be a finite number >= 0, got {count!r}")
        if count == 0:
            return
        self.counts[(self._scope(scope), component, action, _norm_bits(bits))] += count

    def add_cycles(self, cycles: float, kind: str = "compute", scope: str | None = None) -> None:
        """Add ``cycles`` clock cycles of ``kind`` (``compute``, ``stall``, ...) to a scope."""
        if not isinstance(cycles, int | float) or not math.isfinite(cycles) or cycles < 0:
            raise LedgerError(f"cycles must be a finite number >= 0, got {cycles!r}")
        self.cycles[(self._scope(scope), kind)] += cycles

    # ------------------------------------------------------------------ combining
    def merge(self, other: Ledger, prefix: str = "") -> Ledger:
        """Add ``other`` into this ledger (its scopes prefixed by ``prefix``); returns self."""
        for comp, attrs in other.components.items():
            self.declare(comp, **attrs)
        for (sc, comp, act, bits), n in other.counts.items():
            self.counts[(_join(prefix, sc), comp, act, bits)] += n
        for (sc, kind), c in other.cycles.items():
            self.cycles[(_join(prefix, sc), kind)] += c
        for sc, facts in other.layers.items():
            self.layers.setdefault(_join(prefix, sc), {}).update(facts)
        for k, v in other.meta.items():
            self.meta.setdefault(k, v)
        return self

    @classmethod
    def merged(cls, *ledgers: Ledger) -> Ledger:
        out = cls()
        for led in ledgers:
            out.merge(led)
        return out

    # ------------------------------------------------------------------ queries
    def scopes(self, depth: int | None = None) -> list[str]:
        """Distinct scopes in first-recorded order, truncated to ``depth`` path components."""
        seen: dict[str, None] = {}
        for sc, _ in self.cycles:
            seen.setdefault(_truncate(sc, depth), None)
        for sc, *_ in self.counts:
            seen.setdefault(_truncate(sc, depth), None)
        return list(seen)

    def total_cycles(self, kind: str | None = None, scope_prefix: str = "") -> float:
        """Sum of cycles (of one ``kind`` or all) under ``scope_prefix``."""
        return sum(
            c for (sc, k), c in self.cycles.items() if (kind is None or k == kind) and _under(sc, scope_prefix)
        )

    def cycles_by_scope(self, depth: int | None = None, kind: str | None = None) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (sc, k), c in self.cycles.items():
            if kind is None or k == kind:
                out[_truncate(sc, depth)] += c
        return dict(out)

    def count(self, component: str | None = None, action: str | None = None, scope_prefix: str = "") -> float:
        """Total count of matching actions."""
        return sum(
            n
            for (sc, comp, act, _), n in self.counts.items()
            if (component is None or comp == component) and (action is None or act == action) and _under(sc, scope_prefix)
        )

    def _energy_items(self, table: EnergyTable | str) -> Iterator[tuple[Key, float]]:
        tab = load_table(table) if isinstance(table, str) else table
        memo: dict[tuple[str, str, tuple[int, ...]], float] = {}
        for key, n in self.counts.items():
            _, comp, act, bits = key
            mk = (comp, act, bits)
            if mk not in memo:
                memo[mk] = tab.action_energy(act, bits, self.components.get(comp), comp)
            e = n * memo[mk]
            if not math.isfinite(e):
                check_finite(e, f"energy of component '{comp}' action '{act}' (scope '{key[0]}')", LedgerError)
            yield key, e

    def energy(self, table: EnergyTable | str, scope_prefix: str = "") -> float:
        """Total energy in pJ; :class:`LedgerError` naming the component when it is not finite."""
        by = self.energy_by(table, "component", scope_prefix=scope_prefix)
        return _finite_total(by, "total energy")

    def energy_by(self, table: EnergyTable | str, by: str = "component", depth: int | None = None,
                  scope_prefix: str = "") -> dict[str, float]:
        """Energy (pJ) grouped by ``component``, ``action`` or ``scope`` (truncated to ``depth``); every value
        finite (:class:`LedgerError` naming the group otherwise)."""
        if by not in ("component", "action", "scope"):
            raise LedgerError(f"energy_by: 'by' must be component, action or scope, not '{by}'")
        out: dict[str, float] = defaultdict(float)
        for (sc, comp, act, _), e in self._energy_items(table):
            if not _under(sc, scope_prefix):
                continue
            key = comp if by == "component" else act if by == "action" else _truncate(sc, depth)
            out[key] += e
        for key, e in out.items():
            check_finite(e, f"energy of {by} '{key}'", LedgerError)
        return dict(out)

    def energy_matrix(self, table: EnergyTable | str, depth: int | None = None) -> dict[str, dict[str, float]]:
        """scope (truncated to ``depth``) -> component -> energy in pJ."""
        out: dict[str, dict[str, float]] = {}
        for (sc, comp, _, _), e in self._energy_items(table):
            row = out.setdefault(_truncate(sc, depth), {})
            row[comp] = row.get(comp, 0.0) + e
        for sc, row in out.items():
            for comp, e in row.items():
                check_finite(e, f"energy of component '{comp}' in scope '{sc}'", LedgerError)
        return out

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": FORMAT,
            "meta": self.meta,
            "components": self.components,
            "counts": [
                {"scope": sc, "component": c, "action": a, "bits": list(b), "count": n}
                for (sc, c, a, b), n in self.counts.items()
            ],
            "cycles": [{"scope": sc, "kind": k, "cycles": c} for (sc, k), c in self.cycles.items()],
        }
        if self.layers:  # optional: ledgers written before it, or by producers without layer facts, lack it
            out["layers"] = self.layers
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "<dict>") -> Ledger:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise LedgerError(f"{origin} is not an npukit ledger (expected \"format\": \"{FORMAT}\")")
        for key, typ, what in (("meta", dict, "an object"), ("components", dict, "an object"),
                               ("counts", list, "a list"), ("cycles", list, "a list"), ("layers", dict, "an object")):
            if key in data and not isinstance(data[key], typ):
                raise LedgerError(f"{origin} is a malformed ledger ('{key}' must be {what}, got "
                                  f"{type(data[key]).__name__}); regenerate it with npukit sim")
        try:
            led = cls(meta=data.get("meta", {}))
            for comp, attrs in data.get("components", {}).items():
                led.declare(comp, **attrs)
            for row in data["counts"]:
                key = (_text(row["scope"], "scope"), _text(row["component"], "component"), _text(row["action"], "action"))
                led.counts[(*key, _norm_bits(row["bits"]))] += _amount(row["count"])
            for row in data["cycles"]:
                led.cycles[(_text(row["scope"], "scope"), _text(row["kind"], "kind"))] += _amount(row["cycles"])
            for sc, facts in data.get("layers", {}).items():
                if not isinstance(facts, dict):
                    raise TypeError(f"the facts of layer '{sc}' are not an object")
                led.describe(sc, **facts)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LedgerError(f"{origin} is a malformed ledger ({exc!r}); regenerate it with npukit sim") from None
        return led

    def check_amounts(self) -> None:
        """:class:`LedgerError` naming the first count or cycle number above :data:`~npukit.sim.bounded.MAX_INT`:
        a ledger file may not hold it (:meth:`load` refuses it), so a producer checks before it saves."""
        for (sc, comp, act, _), n in self.counts.items():
            if n > MAX_INT:
                raise LedgerError(f"the count of {comp}.{act} in '{sc}' is {_big(n)}, above the ledger's limit of "
                                  f"{MAX_INT:,}")
        for (sc, kind), c in self.cycles.items():
            if c > MAX_INT:
                raise LedgerError(f"the {kind} cycles of '{sc}' are {_big(c)}, above the ledger's limit of {MAX_INT:,}")

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str, origin: str = "<json>") -> Ledger:
        return cls.from_dict(load_json(text, origin, LedgerError), origin)

    def save(self, path: str | Path) -> Path:
        """Write JSON atomically (temp file + rename: never half-written)."""
        path = Path(path)
        atomic_write_text(path, self.to_json())
        return path

    @classmethod
    def load(cls, path: str | Path) -> Ledger:
        path = check_file(path, "ledger file", LedgerError, "pass a ledger .json file")
        return cls.from_json(read_text(path, "ledger file", LedgerError), str(path))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return (
            dict(self.counts) == dict(other.counts)
            and dict(self.cycles) == dict(other.cycles)
            and self.components == other.components
            and self.meta == other.meta
            and self.layers == other.layers
        )

    def __repr__(self) -> str:
        return f"Ledger({len(self.counts)} counts, {len(self.cycles)} cycle entries, {self.total_cycles():g} cycles)"


def _truncate(scope: str, depth: int | None) -> str:
    if depth is None:
        return scope
    return "/".join(scope.split("/")[:depth])


def _under(scope: str, prefix: str) -> bool:
    return not prefix or scope == prefix or scope.startswith(prefix.rstrip("/") + "/")


def _amount(v: Any) -> float:
    """A count or cycle number read from a ledger file: finite and >= 0 (ValueError otherwise)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v in (float("inf"), float("-inf")) or v < 0:
        raise ValueError(f"count {short(v)} is not a finite number >= 0")
    if v > MAX_INT:
        raise ValueError(f"count {short(v)} is out of range (at most {MAX_INT:,})")
    return v


def _big(v: float) -> str:
    """A number above :data:`MAX_INT` as text: digits grouped up to 10^30, else 3 significant digits."""
    return f"{v:,.0f}" if v < 1e30 else f"{v:.3g}"


def _finite_total(parts: dict[str, float], what: str) -> float:
    """The sum of ``parts`` (each finite), checked finite itself (a sum of large parts can overflow)."""
    return check_finite(sum(parts.values()), what, LedgerError)


def _text(v: Any, what: str) -> str:
    """A ledger key field (scope, component, action, kind): a string (TypeError otherwise)."""
    if not isinstance(v, str):
        raise TypeError(f"'{what}' must be a string, got {short(v)}")
    return v
