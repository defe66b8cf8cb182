"""Energy tables: per-action energies (pJ) loaded from TOML data files.

A table is a built-in name (``horowitz45``, ``aladdin40``; files in ``sim/tables/``) or the path to
a TOML file of the same schema. Every value in a shipped table has its literature source beside it.

Actions and the ``bits`` tuple each takes (all energies in pJ):

==============  ============  =========================================================
action          bits          energy
==============  ============  =========================================================
``mac``         (a, b, p)     int multiply a x b bits plus int add at p bits
``int_mult``    (a, b)        ``pj_per_bit2 * a * b`` (quadratic)
``int_add``     (p,)          ``intercept_pj + slope_pj_per_bit * p`` (linear)
``reg_write``   (w,)          ``register.pj_per_bit * w``
``reg_read``    (w,)          ``register.read_pj_per_bit * w`` (optional key, default 0: a flip-flop
                              read is part of the datapath's switching, which the MAC energy holds)
``sram_read``   (w,)          ``w * e_bit(capacity)``; capacity from the component's attributes
``sram_write``  (w,)          ``write_factor * w * e_bit(capacity)``
``dram_read``   (w,)          ``w * dram.pj_per_access / dram.access_bits``
``dram_write``  (w,)          ``w * dram.write_pj_per_access / dram.access_bits`` (optional key,
                              default ``pj_per_access``)
``fp_add``      (16|32,)      ``fp16_add`` / ``fp32_add``
``fp_mult``     (16|32,)      ``fp16_mult`` / ``fp32_mult``
``fp_mac``      (16|32,)      fp multiply plus fp add
==============  ============  =========================================================

``e_bit(C)``, the SRAM energy per bit at capacity C bytes, is a piecewise power law through the
table's cited points (straight lines in log-log space, exact at every point, end slopes
extrapolated).

**Per-component energies.** A table may price the width-carrying actions of one component directly,
in pJ per bit, overriding the rules above for that component only (the way an Accelergy ERT or a
ZigZag memory gives each instance its own access energy)::

    [components.filter_sram]
    sram_read = 0.0        # pJ per bit
    sram_write = 0.0
    source = "where the numbers come from"

Allowed actions there: ``reg_write``, ``reg_read``, ``sram_read``, ``sram_write``, ``dram_read``,
``dram_write``.

**Area and leakage.** A table may carry an ``[area]`` section (area in um^2 and leakage in mW per bit,
bit^2 or unit, at ``source_nm``; the keys and their scaling rules are in :mod:`npukit.sim.area`), and a
``[components.NAME]`` section may give ``area_um2`` (um^2 per instance) and ``leakage_mw`` (mW per
instance) for that component. Tables without them use :data:`npukit.sim.area.DEFAULT_AREA`.

**Accelergy ERTs.** A ``.yaml``/``.yml`` path is read as an Accelergy energy reference table
(``ERT.yaml``: per-component action energies in pJ per action; :mod:`npukit.sim.accelergy`). Its
components price every action of the npukit component with the same name (the ERT name's last dotted
part, ``[..]`` ranges dropped: ``system.npu.psum_buffer[0..3]`` prices ``psum_buffer``); components
it does not list fall back to ``horowitz45``.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bounded import check_depth, check_number, short
from .errors import EnergyTableError
from .textfile import check_file, read_text

BUILTIN_TABLES = ("horowitz45", "aladdin40")

# section -> {key: "number" | "numbers" | "text"}; "source" is required in every section.
_SCHEMA: dict[str, dict[str, str]] = {
    "int_add": {"intercept_pj": "number", "slope_pj_per_bit": "number"},
    "int_mult": {"pj_per_bit2": "number"},
    "register": {"pj_per_bit": "number", "read_pj_per_bit": "optional"},
    "sram": {
        "capacity_bytes": "numbers",
        "pj_per_access": "numbers",
        "access_bits": "number",
        "write_factor": "number",
    },
    "dram": {"pj_per_access": "number", "access_bits": "number", "write_pj_per_access": "optional"},
    "fp16_add": {"pj": "number"},
    "fp16_mult": {"pj": "number"},
    "fp32_add": {"pj": "number"},
    "fp32_mult": {"pj": "number"},
}
_TOP_KEYS = {"name", "technology_nm", "description", "components", "area"}
# actions a [components.NAME] section may price, in pJ per bit
COMPONENT_ACTIONS = ("reg_write", "reg_read", "sram_read", "sram_write", "dram_read", "dram_write")
# per-instance area (um^2) and leakage (mW) a [components.NAME] section may give (npukit.sim.area)
COMPONENT_AREA_KEYS = ("area_um2", "leakage_mw")

ACTIONS = (
    "mac", "int_mult", "int_add", "reg_write", "reg_read", "sram_read", "sram_write",
    "dram_read", "dram_write", "fp_add", "fp_mult", "fp_mac", "transfer",
)


def _check_number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EnergyTableError(f"energy table key '{where}' must be a number, got {short(value)}")
    check_number(value, f"energy table key '{where}'", EnergyTableError)  # range first: no float overflow below
    if not math.isfinite(value) or value < 0:
        raise EnergyTableError(f"energy table key '{where}' must be a finite energy >= 0, got {short(value)}")
    return float(value)


@dataclass(frozen=True)
class EnergyTable:
    """Per-action energies in pJ; build with :meth:`load`."""

    name: str
    sections: dict[str, dict[str, Any]] = field(repr=False)
    components: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    technology_nm: float | None = None
    description: str = ""
    path: str = ""
    # Accelergy ERT: component -> ERT action name -> [(bits argument or None, pJ per action)]
    actions: dict[str, dict[str, list[tuple[Any, float]]]] = field(default_factory=dict, repr=False)
    action_sources: dict[str, str] = field(default_factory=dict, repr=False)  # component -> where its ERT entry is
    area: dict[str, Any] | None = field(default=None, repr=False)  # the [area] rules (npukit.sim.area); None: defaults

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, name_or_path: str | Path) -> EnergyTable:
        """Load a built-in table by name or a user table from a TOML path."""
        if Path(str(name_or_path)).suffix.lower() in (".yaml", ".yml"):
            from .accelergy import load_ert

            return load_ert(name_or_path)
        text, origin = _read_table_text(name_or_path)
        try:
            data = tomllib.loads(check_depth(text, f"energy table {origin}", EnergyTableError))
        except tomllib.TOMLDecodeError as exc:
            raise EnergyTableError(f"energy table {origin} is not valid TOML: {exc}") from None
        return cls.from_dict(data, origin=origin)

    @classmethod
    def from_dict(cls, data: dict[str, Any], origin: str = "<dict>") -> EnergyTable:
        """Validate a parsed table; raises :class:`EnergyTableError` naming the offending key."""
        for key in data:
            if key not in _SCHEMA and key not in _TOP_KEYS:
                raise EnergyTableError(
                    f"energy table {origin}: unknown key '{key}' (known sections: {', '.join(_SCHEMA)})"
                )
        sections: dict[str, dict[str, Any]] = {}
        for sec, fields in _SCHEMA.items():
            if sec not in data:
                raise EnergyTableError(f"energy table {origin}: missing section '[{sec}]'")
            raw = data[sec]
            if not isinstance(raw, dict):
                raise EnergyTableError(f"energy table {origin}: '{sec}' must be a [section]")
            for key in raw:
                if key not in fields and key != "source":
                    raise EnergyTableError(
                        f"energy table {origin}: unknown key '{sec}.{key}' (expected: {', '.join(fields)}, source)"
                    )
            out: dict[str, Any] = {}
            for key, kind in fields.items():
                where = f"{sec}.{key}"
                if key not in raw:
                    if kind == "optional":
                        continue
                    raise EnergyTableError(f"energy table {origin}: missing energy '{where}'")
                if kind in ("number", "optional"):
                    out[key] = _check_number(where, raw[key])
                else:
                    vals = raw[key]
                    if not isinstance(vals, list) or not vals:
                        raise EnergyTableError(f"energy table {origin}: '{where}' must be a non-empty list")
                    out[key] = [_check_number(f"{where}[{i}]", v) for i, v in enumerate(vals)]
            if "source" not in raw or not str(raw["source"]).strip():
                raise EnergyTableError(f"energy table {origin}: '{sec}.source' is missing; cite where the values come from")
            out["source"] = str(raw["source"])
            sections[sec] = out
        sram = sections["sram"]
        if len(sram["capacity_bytes"]) != len(sram["pj_per_access"]):
            raise EnergyTableError(
                f"energy table {origin}: 'sram.capacity_bytes' and 'sram.pj_per_access' differ in length"
            )
        caps = sram["capacity_bytes"]
        if any(c <= 0 for c in caps) or any(b <= a for a, b in zip(caps, caps[1:], strict=False)):
            raise EnergyTableError(f"energy table {origin}: 'sram.capacity_bytes' must be positive and increasing")
        if any(e <= 0 for e in sram["pj_per_access"]):
            raise EnergyTableError(f"energy table {origin}: 'sram.pj_per_access' must be > 0")
        for sec in ("sram", "dram"):
            if sections[sec]["access_bits"] <= 0:
                raise EnergyTableError(f"energy table {origin}: '{sec}.access_bits' must be > 0")
        return cls(
            name=str(data.get("name", Path(origin).stem)),
            sections=sections,
            components=_components(data.get("components", {}), origin),
            technology_nm=data.get("technology_nm"),
            description=str(data.get("description", "")),
            path=origin,
            area=_area_section(data, origin),
        )

    # ------------------------------------------------------------------ primitives
    def int_add(self, bits: int) -> float:
        """Integer adder of ``bits`` bits, pJ."""
        s = self.sections["int_add"]
        return s["intercept_pj"] + s["slope_pj_per_bit"] * bits

    def int_mult(self, a_bits: int, b_bits: int) -> float:
        """Integer multiplier of a x b bits, pJ."""
        return self.sections["int_mult"]["pj_per_bit2"] * a_bits * b_bits

    def mac(self, a_bits: int, b_bits: int, pe_psum_bits: int) -> float:
        """Integer MAC: a x b multiply plus accumulate at ``pe_psum_bits``, pJ."""
        return self.int_mult(a_bits, b_bits) + self.int_add(pe_psum_bits)

    def register_bit(self) -> float:
        """One flip-flop write, pJ per bit."""
        return self.sections["register"]["pj_per_bit"]

    def register_read_bit(self) -> float:
        """One flip-flop read, pJ per bit (0 unless the table gives ``register.read_pj_per_bit``)."""
        return self.sections["register"].get("read_pj_per_bit", 0.0)

    def sram_bit(self, capacity_bytes: float) -> float:
        """SRAM read energy per bit at ``capacity_bytes``, pJ (piecewise power law through the points)."""
        if capacity_bytes <= 0:
            raise EnergyTableError(f"SRAM capacity must be > 0 bytes, got {capacity_bytes}")
        s = self.sections["sram"]
        caps = s["capacity_bytes"]
        per_bit = [e / s["access_bits"] for e in s["pj_per_access"]]
        if len(caps) == 1:
            return per_bit[0]
        x = math.log(capacity_bytes)
        i = 0
        while i < len(caps) - 2 and x > math.log(caps[i + 1]):
            i += 1
        x0, x1 = math.log(caps[i]), math.log(caps[i + 1])
        y0, y1 = math.log(per_bit[i]), math.log(per_bit[i + 1])
        return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))

    def dram_bit(self, write: bool = False) -> float:
        """DRAM read (or ``write``) energy per bit, pJ."""
        s = self.sections["dram"]
        per = s.get("write_pj_per_access", s["pj_per_access"]) if write else s["pj_per_access"]
        return per / s["access_bits"]

    def fp(self, op: str, bits: int) -> float:
        """Floating-point ``add`` or ``mult`` at 16 or 32 bits, pJ."""
        if bits not in (16, 32):
            raise EnergyTableError(f"floating-point energy exists for 16 and 32 bits, not {bits}")
        return self.sections[f"fp{bits}_{op}"]["pj"]

    # ------------------------------------------------------------------ dispatch
    def action_energy(self, action: str, bits: tuple[int, ...], attrs: dict[str, Any] | None = None,
                      component: str | None = None) -> float:
        """Energy of one ``action`` at ``bits`` (pJ); ``attrs`` are the component's attributes,
        ``component`` its name (for the table's per-component energies)."""
        attrs = attrs or {}
        ert = self.actions.get(component or "")
        if ert is not None:
            e = ert_energy(ert, action, bits)
            if e is not None:
                return e
        own = self.components.get(component or "")
        if own is not None and action in own:
            if len(bits) != 1:
                raise EnergyTableError(f"action '{action}' got bits {bits!r}; it takes one width")
            return own[action] * bits[0]
        try:
            if action == "mac":
                a, b, p = bits
                return self.mac(a, b, p)
            if action == "int_mult":
                a, b = bits
                return self.int_mult(a, b)
            if action == "int_add":
                (p,) = bits
                return self.int_add(p)
            if action == "reg_write":
                (w,) = bits
                return self.register_bit() * w
            if action == "reg_read":
                (w,) = bits
                return self.register_read_bit() * w
            if action in ("sram_read", "sram_write"):
                (w,) = bits
                if "capacity_bytes" not in attrs:
                    raise EnergyTableError(
                        f"action '{action}' needs the component's capacity_bytes; declare it in the ledger"
                    )
                e = w * self.sram_bit(float(attrs["capacity_bytes"]))
                return e * (self.sections["sram"]["write_factor"] if action == "sram_write" else 1.0)
            if action in ("dram_read", "dram_write"):
                (w,) = bits
                return w * self.dram_bit(write=action == "dram_write")
            if action in ("fp_add", "fp_mult"):
                (w,) = bits
                return self.fp(action[3:], w)
            if action == "fp_mac":
                (w,) = bits
                return self.fp("mult", w) + self.fp("add", w)
            if action == "transfer":  # bits over an interconnect link: priced by the link's own declaration
                (w,) = bits
                if "energy_pj_per_bit" not in attrs:
                    raise EnergyTableError("action 'transfer' needs the component's energy_pj_per_bit; declare it")
                return w * float(attrs["energy_pj_per_bit"])
        except ValueError:
            raise EnergyTableError(f"action '{action}' got bits {bits!r}; see npukit.sim.energy for its form") from None
        raise EnergyTableError(f"unknown action '{action}' (known: {', '.join(ACTIONS)})")

    def sources(self) -> dict[str, str]:
        """Section name (``components.NAME`` for per-component energies) -> literature source."""
        out = {sec: vals["source"] for sec, vals in self.sections.items()}
        out.update({f"components.{name}": vals["source"] for name, vals in self.components.items()})
        if self.area is not None:
            out["area"] = self.area["source"]
        out.update({f"ERT {name}": src for name, src in self.action_sources.items()})
        return out


# npukit action -> Accelergy action names that price it, in order of preference (after its own name)
ERT_ACTIONS: dict[str, tuple[str, ...]] = {
    "mac": ("mac_random", "mac"), "fp_mac": ("mac_random", "mac"),
    "sram_read": ("read",), "dram_read": ("read",), "reg_read": ("read",),
    "sram_write": ("write",), "dram_write": ("write",), "reg_write": ("write",),
    "int_add": ("add",), "fp_add": ("add",), "int_mult": ("multiply", "mult"), "fp_mult": ("multiply", "mult"),
}


def bits_argument(bits: tuple[int, ...]) -> int | list[int]:
    """The ``bits`` argument an ERT entry or an Accelergy action count carries for ``bits``."""
    return bits[0] if len(bits) == 1 else list(bits)


def ert_energy(entries: dict[str, list[tuple[Any, float]]], action: str, bits: tuple[int, ...]) -> float | None:
    """pJ of one ``action`` at ``bits`` from one component's ERT entries (None when none prices it): the
    first of the action's names present; among its entries the one whose ``bits`` argument equals
    ``bits``, else the first without a ``bits`` argument (EnergyTableError when every entry has
    another width)."""
    for name in (action, *ERT_ACTIONS.get(action, ())):
        rows = entries.get(name)
        if not rows:
            continue
        want = bits_argument(bits)
        for arg, e in rows:
            if arg == want:
                return e
        for arg, e in rows:
            if arg is None:
                return e
        widths = ", ".join(str(a) for a, _ in rows)
        raise EnergyTableError(f"the ERT prices action '{name}' at bits {widths} only, not {want}; "
                               f"add an entry with arguments: {{bits: {want}}}")
    return None


def _components(raw: Any, origin: str) -> dict[str, dict[str, Any]]:
    """Validate the optional ``[components.NAME]`` sections (pJ per bit per action, and a source)."""
    if not isinstance(raw, dict):
        raise EnergyTableError(f"energy table {origin}: 'components' must hold [components.NAME] sections")
    out: dict[str, dict[str, Any]] = {}
    for name, sec in raw.items():
        if not isinstance(sec, dict):
            raise EnergyTableError(f"energy table {origin}: 'components.{name}' must be a [section]")
        vals: dict[str, Any] = {}
        for key, v in sec.items():
            if key == "source":
                continue
            if key not in COMPONENT_ACTIONS and key not in COMPONENT_AREA_KEYS:
                raise EnergyTableError(
                    f"energy table {origin}: unknown key 'components.{name}.{key}' "
                    f"(expected pJ per bit for: {', '.join(COMPONENT_ACTIONS)}; {', '.join(COMPONENT_AREA_KEYS)}; and source)"
                )
            vals[key] = _check_number(f"components.{name}.{key}", v)
        if not str(sec.get("source", "")).strip():
            raise EnergyTableError(
                f"energy table {origin}: 'components.{name}.source' is missing; cite where the values come from"
            )
        vals["source"] = str(sec["source"])
        out[str(name)] = vals
    return out


def _area_section(data: dict[str, Any], origin: str) -> dict[str, Any] | None:
    """The table's optional ``[area]`` section, validated (:func:`npukit.sim.area.parse_area_section`)."""
    if "area" not in data:
        return None
    from .area import parse_area_section

    return parse_area_section(data["area"], origin)


def _read_table_text(name_or_path: str | Path) -> tuple[str, str]:
    name = str(name_or_path)
    if name in BUILTIN_TABLES:
        return (Path(__file__).parent / "tables" / f"{name}.toml").read_text(), name  # package data beside this file
    path = Path(name)
    if path.suffix != ".toml" and not path.exists():
        raise EnergyTableError(
            f"unknown energy table '{name}': use one of {', '.join(BUILTIN_TABLES)} or a path to a .toml file"
        )
    path = check_file(path, "energy table file", EnergyTableError)
    return read_text(path, "energy table file", EnergyTableError), str(path)


_CACHE: dict[str, EnergyTable] = {}


def load_table(name_or_path: str | Path) -> EnergyTable:
    """Load (and cache, for built-ins) an energy table."""
    key = str(name_or_path)
    if key in BUILTIN_TABLES:
        if key not in _CACHE:
            _CACHE[key] = EnergyTable.load(key)
        return _CACHE[key]
    return EnergyTable.load(name_or_path)
