"""NPU architecture configuration: TOML files of npukit and SCALE-Sim ``.cfg`` files.

All sizes are explicit about units: array dimensions in PEs, bit-widths in bits, SRAM capacities
in KiB (1024 bytes), DRAM bandwidth in bytes per cycle, clock in GHz.
"""

from __future__ import annotations

import configparser
import functools
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .bounded import MIN_RATE, check_depth, check_number, short
from .datapath import (
    BITS_ALIASES,
    DATAFLOWS,
    PSUM_POLICIES,
    PSUM_SEMANTICS,
    SCALE_FORMS,
    TIMING_MODES,
    Bits,
    check_psum_widths,
    rename,
)
from .energy import BUILTIN_TABLES
from .errors import ConfigError
from .textfile import check_file, read_text

MEMORY_MODES = ("npukit", "scalesim")
MAPPING_MODES = ("search", "fixed")
OBJECTIVES = ("edp", "energy", "latency")
BANDWIDTH_MODES = ("user", "calc")
BUILTIN_ARCHS = ("npu128", "npu32")
MAX_STATIONARY_WORDS = 65536  # words per PE register file
MAX_VECTOR_LANES = 1 << 20
VECTOR_NUMBERS = ("fp", "int")
VECTOR_OVERLAP = ("serial", "overlap")


@dataclass(frozen=True)
class SramKiB:
    """On-chip buffer capacities in KiB."""

    ifmap: float = 2048
    filter: float = 2048
    psum: float = 1024
    ofmap: float = 1024


@dataclass(frozen=True)
class VectorUnit:
    """The vector unit beside the array (:mod:`npukit.sim.vector_unit`): ``lanes`` lanes of one add or
    multiply per cycle each at ``bits`` bits, ``number`` ``fp`` (16 or 32 bits) or ``int``;
    ``overlap``: ``serial`` (its cycles follow the GEMMs') or ``overlap`` (pipelined with the array:
    an op hides behind the GEMM cycles before it)."""

    lanes: int = 128
    bits: int = 16
    number: str = "fp"
    overlap: str = "serial"


@dataclass(frozen=True)
class PsumQuantHW:
    """The psum quantization hardware, charged only when ``bits.psum_buffer`` < ``bits.pe_psum``
    (see :mod:`npukit.sim.psum_path` for what each part costs).

    ``policy``: ``psumquant`` (a quantizer per psum, the crest-factor feature unit on every input tile
    and the scale predictor), ``static`` (quantizer with one scale per layer), ``none`` (psums only
    saturated to ``bits.psum_buffer``). ``semantics``: ``buffer`` (one scale per output row and N-tile shared
    by all K-tiles, so the features of the whole input row are needed before the first K-tile: one
    extra ifmap SRAM pass) or ``transfer`` (one scale per row, K-tile and N-tile, features computed as
    the tile streams in; each psum is dequantized into a ``pe_psum``-bit running psum). ``scale_form``:
    ``mult_shift`` (the step is a ``multiplier_bits``-bit multiplier and a shift) or ``pow2`` (a shift:
    no multiplier). ``multiplier_bits``: width of the quantizer's scale multiplier (bits);
    ``predictor_features``: length of the predictor's dot product; ``top_k``: the peak selector's size.
    """

    policy: str = "psumquant"
    semantics: str = "buffer"
    scale_form: str = "mult_shift"
    multiplier_bits: int = 16
    predictor_features: int = 8
    top_k: int = 8


@dataclass(frozen=True)
class Arch:
    """A systolic-array NPU. Build with :func:`load_arch` or directly.

    ``stationary_words``: how many words of the stationary operand each PE holds (ws: weights, is:
    inputs; os: no effect). 1 is a TPU-style PE with one weight register (SCALE-Sim's model); a
    register file of d words holds d K-folds at once, so each output's psum is accumulated over d
    K-folds inside the array before it leaves for the psum buffer (as ZigZag's ``tpu_like``, whose
    PEs have a 128-byte weight register file). See :mod:`npukit.sim._mapping`.
    """

    name: str = "npu128"
    rows: int = 128
    cols: int = 128
    dataflow: str = "ws"
    timing: str = "scalesim"
    bits: Bits = field(default_factory=Bits)
    sram_kib: SramKiB = field(default_factory=SramKiB)
    dram_bandwidth_bytes_per_cycle: float = 64.0
    clock_ghz: float = 1.0
    energy_table: str = "horowitz45"
    memory: str = "npukit"
    mapping: str = "search"
    objective: str = "edp"
    bandwidth_mode: str = "user"
    # SCALE-Sim's USER-mode read rates (words/cycle, its [layout] IfmapSRAMBankBandwidth /
    # FilterSRAMBankBandwidth) and its Bandwidth key (the ofmap drain rate; 0 = dram_bandwidth_bytes_per_cycle)
    scalesim_ifmap_bank_bw: int = 10
    scalesim_filter_bank_bw: int = 10
    scalesim_bandwidth: int = 0
    stationary_words: int = 1
    psum_quant: PsumQuantHW = field(default_factory=PsumQuantHW)
    vector: VectorUnit = field(default_factory=VectorUnit)

    def __post_init__(self) -> None:
        validate_arch(self)

    def with_(self, **changes: Any) -> Arch:
        """Copy with top-level fields and dotted sub-fields changed, e.g. ``{'bits.psum_buffer': 8}``."""
        return apply_overrides(self, changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sram_bytes(self, buffer: str) -> float:
        """Capacity of ``ifmap``, ``filter``, ``psum`` or ``ofmap`` in bytes."""
        return getattr(self.sram_kib, buffer) * 1024.0


def _pos_int(where: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"arch field '{where}' must be a positive integer, got {short(v)}")
    check_number(v, f"arch field '{where}'", ConfigError)


def _pos_num(where: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v != v or v == float("inf"):
        raise ConfigError(f"arch field '{where}' must be a positive number, got {short(v)}")
    check_number(v, f"arch field '{where}'", ConfigError)  # a 401-digit integer would overflow float later


def validate_arch(a: Arch) -> None:
    _pos_int("rows", a.rows)
    _pos_int("cols", a.cols)
    if a.dataflow not in DATAFLOWS:
        raise ConfigError(f"unknown dataflow '{a.dataflow}': use one of {', '.join(DATAFLOWS)}")
    if a.timing not in TIMING_MODES:
        raise ConfigError(f"unknown timing mode '{a.timing}': use one of {', '.join(TIMING_MODES)}")
    for k, v in asdict(a.bits).items():
        _pos_int(f"bits.{k}", v)
        if v > 64:
            raise ConfigError(f"arch field 'bits.{k}' = {v} is over 64 bits; use 1..64")
    # one design for every workload: the K-fold count is not known, so the buffer is at most pe_psum
    check_psum_widths(a.bits.pe_psum, a.bits.psum_buffer, None, f"arch '{a.name}'",
                      ("bits.pe_psum", "bits.psum_buffer"))
    for k, v in asdict(a.sram_kib).items():
        _pos_num(f"sram_kib.{k}", v)
    for name, rate in (("dram_bandwidth_bytes_per_cycle", a.dram_bandwidth_bytes_per_cycle), ("clock_ghz", a.clock_ghz)):
        _pos_num(name, rate)
        if rate < MIN_RATE:
            raise ConfigError(f"arch field '{name}' = {short(rate)} is too small: a rate must be at least "
                              f"{MIN_RATE:.4g} (1 / (2^63 - 1)), or the cycles divided by it overflow")
    _pos_int("stationary_words", a.stationary_words)
    _pos_int("scalesim_ifmap_bank_bw", a.scalesim_ifmap_bank_bw)
    _pos_int("scalesim_filter_bank_bw", a.scalesim_filter_bank_bw)
    if isinstance(a.scalesim_bandwidth, bool) or not isinstance(a.scalesim_bandwidth, int) or a.scalesim_bandwidth < 0:
        raise ConfigError(f"arch field 'scalesim_bandwidth' must be an integer >= 0, got {a.scalesim_bandwidth!r}")
    if a.stationary_words > MAX_STATIONARY_WORDS:
        raise ConfigError(
            f"arch field 'stationary_words' = {a.stationary_words} is over {MAX_STATIONARY_WORDS}; "
            f"use 1..{MAX_STATIONARY_WORDS} words per PE"
        )
    for key, val, allowed in (
        ("memory", a.memory, MEMORY_MODES), ("mapping", a.mapping, MAPPING_MODES), ("objective", a.objective, OBJECTIVES),
        ("bandwidth_mode", a.bandwidth_mode, BANDWIDTH_MODES), ("psum_quant.policy", a.psum_quant.policy, PSUM_POLICIES),
        ("psum_quant.semantics", a.psum_quant.semantics, PSUM_SEMANTICS),
        ("psum_quant.scale_form", a.psum_quant.scale_form, SCALE_FORMS),
    ):
        if val not in allowed:
            raise ConfigError(f"arch field '{key}' = {val!r}: use one of {', '.join(allowed)}")
    for key in ("multiplier_bits", "predictor_features", "top_k"):
        v = getattr(a.psum_quant, key)
        _pos_int(f"psum_quant.{key}", v)
        if v > 64:
            raise ConfigError(f"arch field 'psum_quant.{key}' = {v} is over 64; use 1..64")
    _pos_int("vector.lanes", a.vector.lanes)
    _pos_int("vector.bits", a.vector.bits)
    if a.vector.lanes > MAX_VECTOR_LANES:
        raise ConfigError(f"arch field 'vector.lanes' = {a.vector.lanes} is over {MAX_VECTOR_LANES}; use 1..{MAX_VECTOR_LANES}")
    if a.vector.number not in VECTOR_NUMBERS:
        raise ConfigError(f"arch field 'vector.number' = {a.vector.number!r}: use one of {', '.join(VECTOR_NUMBERS)}")
    if a.vector.overlap not in VECTOR_OVERLAP:
        raise ConfigError(f"arch field 'vector.overlap' = {a.vector.overlap!r}: use one of {', '.join(VECTOR_OVERLAP)}")
    if a.vector.number == "fp" and a.vector.bits not in (16, 32):
        raise ConfigError(f"arch field 'vector.bits' = {a.vector.bits} with number = 'fp': use 16 or 32")
    if a.vector.bits > 64:
        raise ConfigError(f"arch field 'vector.bits' = {a.vector.bits} is over 64 bits; use 1..64")
    if not isinstance(a.name, str) or not a.name.strip():
        raise ConfigError(f"arch field 'name' must be a non-empty string, got {a.name!r}")
    if a.memory == "scalesim" and a.stationary_words != 1:
        raise ConfigError("memory = 'scalesim' models SCALE-Sim's PEs, one stationary word each; "
                          "set stationary_words = 1 with it")
    if not isinstance(a.energy_table, str) or not a.energy_table.strip():
        raise ConfigError(f"arch field 'energy_table' must be a table name or .toml path, got {a.energy_table!r}; "
                          "use horowitz45, aladdin40 or a path")
    if a.memory == "scalesim" and a.mapping != "fixed":
        raise ConfigError(
            "memory = 'scalesim' reproduces SCALE-Sim's own loop order; set mapping = 'fixed' with it"
        )


_TOP = {f for f in Arch.__dataclass_fields__}
_SUB = {"bits": Bits, "sram_kib": SramKiB, "psum_quant": PsumQuantHW, "vector": VectorUnit}


def arch_from_dict(data: dict[str, Any], origin: str = "<dict>", base: Arch | None = None) -> Arch:
    """Build an :class:`Arch` from a parsed TOML table; unknown keys are errors naming the key."""
    kwargs: dict[str, Any] = {}
    defaults = base if base is not None else Arch()
    for key, val in data.items():
        if key not in _TOP:
            raise ConfigError(f"{origin}: unknown arch key '{key}' (known: {', '.join(sorted(_TOP))})")
        if key in _SUB:
            if not isinstance(val, dict):
                raise ConfigError(f"{origin}: '{key}' must be a table like [{key}]")
            cls = _SUB[key]
            if key == "bits":  # the deprecated width names (one warning each)
                val = rename(val, BITS_ALIASES, f"{origin}: [bits]", stacklevel=5)
            for sub in val:
                if sub not in cls.__dataclass_fields__:
                    raise ConfigError(
                        f"{origin}: unknown key '{key}.{sub}' (known: {', '.join(cls.__dataclass_fields__)})"
                    )
            kwargs[key] = replace(getattr(defaults, key), **val)
        else:
            kwargs[key] = val
    try:
        return replace(defaults, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def apply_overrides(arch: Arch, changes: dict[str, Any]) -> Arch:
    """Apply ``{'rows': 64, 'bits.psum_buffer': 8, 'sram_kib.psum': 256}`` style overrides."""
    nested: dict[str, Any] = {}
    for key, val in changes.items():
        if "." in key:
            top, sub = key.split(".", 1)
            nested.setdefault(top, {})[sub] = val
        else:
            nested[key] = val
    return arch_from_dict(nested, origin="override", base=arch)


def load_arch(name_or_path: str | Path) -> Arch:
    """Load a built-in arch (``npu128``, ``npu32``), an npukit TOML file or a SCALE-Sim ``.cfg``."""
    return load_arch_source(name_or_path)[0]


@dataclass(frozen=True)
class ArchSource:
    """Where an arch's values came from: ``origin`` (a built-in name or a file), ``base`` (what the keys
    the file leaves out are taken from: a built-in arch named by the file's ``base`` key, else npukit's
    defaults, :class:`Arch`'s field defaults) and ``inherited`` (``(dotted key, value)`` for each of them)."""

    origin: str
    base: str
    inherited: tuple[tuple[str, Any], ...] = ()

    def line(self) -> str:
        """One line naming every inherited key and its value (a table left out whole as ``[table]`` and its
        key count), or "" when the file gives them all."""
        if not self.inherited:
            return ""
        keys = [k for k, _ in self.inherited]
        parts: list[str] = []
        for key, val in self.inherited:
            table = key.split(".")[0] if "." in key else ""
            n = len(_SUB[table].__dataclass_fields__) if table else 0
            if table and sum(k.startswith(table + ".") for k in keys) == n:
                if f"[{table}]" not in parts[-1:]:
                    parts.append(f"[{table}]")
            else:
                parts.append(f"{key}={val}")
        return (f"arch {self.origin}: {len(keys)} keys not in the file, taken from {self.base}: "
                + ", ".join(parts))


@functools.cache
def defaults_name() -> str:
    """How the keys a file without ``base`` inherits are named: npukit's defaults, and how they differ from npu128."""
    ref = load_arch("npu128")
    diff = [f"{k} = {v}" for k, v in _left_out({}, Arch()) if k != "name" and v != dict(_left_out({}, ref))[k]]
    return "npukit's defaults (npukit.sim.arch.Arch: npu128" + (f" but {', '.join(diff)})" if diff else ")")


def load_arch_source(name_or_path: str | Path) -> tuple[Arch, ArchSource]:
    """:func:`load_arch` and where its values came from (:class:`ArchSource`). A TOML file may name a
    built-in arch to start from, ``base = "npu128"``; the keys it leaves out are taken from that arch,
    or from npukit's defaults without ``base``, and are listed in the ArchSource."""
    name = str(name_or_path)
    if name in BUILTIN_ARCHS:
        text = (Path(__file__).parent / "archs" / f"{name}.toml").read_text()  # package data beside this file
        return _arch_from_toml_text(text, name)[0], ArchSource(name, "built-in")  # complete by design
    path = check_file(name, "arch file", ConfigError,
                      f"pass a .toml or SCALE-Sim .cfg file, or one of {', '.join(BUILTIN_ARCHS)}")
    if path.suffix == ".cfg":
        return load_scalesim_cfg(path), ArchSource(str(path), "SCALE-Sim's .cfg (see load_scalesim_cfg)")
    arch, source = _arch_from_toml_text(read_text(path, "arch file", ConfigError), str(path))
    table = Path(arch.energy_table)
    if arch.energy_table not in BUILTIN_TABLES and not table.is_absolute() and (path.parent / table).is_file():
        arch = replace(arch, energy_table=str(path.parent / table))  # a table path beside the arch file
    return arch, source


def _arch_from_toml_text(text: str, origin: str) -> tuple[Arch, ArchSource]:
    try:
        data = tomllib.loads(check_depth(text, origin, ConfigError))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin} is not valid TOML: {exc}") from None
    if not data:
        raise ConfigError(f"{origin}: the arch file sets nothing (write base = \"npu128\" to use a built-in arch "
                          "as it is)")
    base_name = data.pop("base", None)
    if base_name is None:
        base, where = Arch(), ("built-in" if origin in BUILTIN_ARCHS else defaults_name())
    elif base_name in BUILTIN_ARCHS:
        base, where = load_arch(base_name), f"base = {base_name!r}"
    else:
        raise ConfigError(f"{origin}: base = {short(base_name)} is not a built-in arch; use one of "
                          f"{', '.join(BUILTIN_ARCHS)} or leave base out")
    arch = arch_from_dict(data, origin, base=base)
    return arch, ArchSource(origin, where, _left_out(data, arch))


def _left_out(data: dict[str, Any], arch: Arch) -> tuple[tuple[str, Any], ...]:
    """(dotted key, value in ``arch``) for every arch key ``data`` (a parsed TOML table) does not give."""
    out: list[tuple[str, Any]] = []
    for key in Arch.__dataclass_fields__:
        if key in _SUB:
            given = data.get(key, {})
            given = {BITS_ALIASES.get(k, k) for k in given} if key == "bits" else set(given)
            sub = getattr(arch, key)
            out += [(f"{key}.{f}", getattr(sub, f)) for f in sub.__dataclass_fields__ if f not in given]
        elif key not in data:
            out.append((key, getattr(arch, key)))
    return tuple(out)


_CFG_KEYS = {
    "arrayheight": "rows",
    "arraywidth": "cols",
    "ifmapsramszkb": "ifmap",
    "ifmapsramsz": "ifmap",
    "filtersramszkb": "filter",
    "filtersramsz": "filter",
    "ofmapsramszkb": "ofmap",
    "ofmapsramsz": "ofmap",
    "dataflow": "dataflow",
    "bandwidth": "bandwidth",
}


def load_scalesim_cfg(path: str | Path) -> Arch:
    """Read a SCALE-Sim v2/v3 ``.cfg`` (``[architecture_presets]``).

    Mapping: ArrayHeight -> rows, ArrayWidth -> cols, Ifmap/Filter/OfmapSramSzkB -> SRAM KiB, the
    psum buffer takes the ofmap size (SCALE-Sim accumulates in its ofmap SRAM), Bandwidth (words
    per cycle) x input bytes -> DRAM bytes per cycle, ``[run_presets] InterfaceBandwidth`` CALC ->
    ``bandwidth_mode = "calc"`` (no stalls) and USER -> ``"user"``; timing ``scalesim``, and SCALE-Sim's
    own loop order and memory accounting (``mapping = "fixed"``, ``memory = "scalesim"``), so that the
    numbers are SCALE-Sim's. Override with ``--memory npukit --mapping search`` to see npukit's.
    """
    path = Path(path)
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    try:
        cp.read_string(read_text(check_file(path, "SCALE-Sim config", ConfigError), "SCALE-Sim config", ConfigError))
    except configparser.Error as exc:
        msg = str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not a valid SCALE-Sim .cfg file: {msg}") from None
    if not cp.has_section("architecture_presets"):
        raise ConfigError(f"{path}: SCALE-Sim .cfg needs an [architecture_presets] section")
    found: dict[str, str] = {}
    for key, val in cp.items("architecture_presets"):
        if key in _CFG_KEYS:
            found[_CFG_KEYS[key]] = val.strip().strip('"')
    for need in ("rows", "cols", "dataflow"):
        if need not in found:
            raise ConfigError(f"{path}: [architecture_presets] lacks {need!r} (ArrayHeight/ArrayWidth/Dataflow)")

    def num(k: str, conv: type = int) -> Any:
        try:
            return conv(found[k])
        except ValueError:
            raise ConfigError(f"{path}: '{k}' must be a number, got {found[k]!r}") from None

    run_name = cp.get("general", "run_name", fallback=path.stem).strip().strip('"')
    base = Arch()
    sram = {k: num(k, float) for k in ("ifmap", "filter", "ofmap") if k in found}
    if "ofmap" in sram:
        sram["psum"] = sram["ofmap"]
    bw_mode = cp.get("run_presets", "InterfaceBandwidth", fallback="USER").strip().strip('"').upper()
    if bw_mode not in ("USER", "CALC"):
        raise ConfigError(f"{path}: [run_presets] InterfaceBandwidth must be USER or CALC, got {bw_mode!r}")
    data: dict[str, Any] = {
        "name": run_name,
        "rows": num("rows"),
        "cols": num("cols"),
        "dataflow": found["dataflow"].lower(),
        "sram_kib": sram,
        "memory": "scalesim",
        "mapping": "fixed",
        "bandwidth_mode": bw_mode.lower(),
    }
    if "bandwidth" in found:
        data["dram_bandwidth_bytes_per_cycle"] = num("bandwidth", float) * base.bits.input / 8
        data["scalesim_bandwidth"] = int(num("bandwidth", float))
    for key, field_ in (("ifmapsrambankbandwidth", "scalesim_ifmap_bank_bw"),
                        ("filtersrambankbandwidth", "scalesim_filter_bank_bw")):
        if cp.has_option("layout", key):
            try:
                data[field_] = int(cp.get("layout", key).strip().strip('"'))
            except ValueError:
                raise ConfigError(f"{path}: [layout] {key} must be an integer") from None
    return arch_from_dict(data, str(path), base=base)
