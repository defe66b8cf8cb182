"""Multi-core NPUs: N cores (each a single-core :class:`~npukit.sim.arch.Arch`), a shared on-chip memory, DRAM
channels and an interconnect (:mod:`npukit.sim.interconnect`), read from TOML or built in.

TOML form (``npukit sim --arch multicore.toml``)::

    name = "quad"
    objective = "edp"                  # what the schedule search minimises: edp | energy | latency
    layer_cores = "all"                # a GEMM alone in its step runs on: all | search (also the fastest 1, 2, 4, ...)
    [[core]]
    arch = "npu128"                    # a built-in, or a core arch TOML path (relative to this file)
    count = 4                          # this many identical cores
    kind = "mac"                       # mac: runs GEMMs (and vector ops when there is no simd core)
    [[core]]
    arch = "npu32"
    kind = "simd"                      # runs the vector ops only (its vector unit)
    [interconnect]
    bandwidth_bytes_per_cycle = 32.0   # per link
    latency_cycles = 20
    energy_pj_per_bit = 0.1
    topology = "mesh"                  # mesh | ring | bus | crossbar
    source = "estimate"
    [shared_memory]
    kib = 8192
    bandwidth_bytes_per_cycle = 256
    [dram]
    channels = 4
    bandwidth_bytes_per_cycle = 64     # per channel
    [bus]                              # optional: what a vector op's operands cross to the simd core
    bandwidth_bytes_per_cycle = 16.0   # (Stream's shared 128-bit bus); absent: the [interconnect] links
    latency_cycles = 0
    energy_pj_per_bit = 0.0

A ``[[core]]`` may say ``vector_unit = false`` (a MAC core with only its array, as Stream's ``tpu_like`` cores):
then the arch needs a ``simd`` core, and every vector op runs there, its operands crossing the ``[bus]``.

The core description is pluggable: :func:`load_multicore_arch` takes ``load_core`` (default
:func:`~npukit.sim.arch.load_arch`), any function from a name or path to an ``Arch``. All cores share one clock
and one energy table (a chip whose cores differ in either is refused).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .arch import OBJECTIVES, Arch, load_arch
from .bounded import check_depth, check_size, short
from .energy import EnergyTable
from .errors import ConfigError
from .hardware import Hardware
from .interconnect import Dram, Interconnect, SharedMemory
from .textfile import check_file, read_text

CORE_KINDS = ("mac", "simd")
BUILTIN_MULTICORE = ("quad128", "hetero4", "tpu_v4")
_TOP_KEYS = ("name", "objective", "layer_cores", "core", "interconnect", "shared_memory", "dram", "bus")
LAYER_CORES = ("all", "search")
MAX_CORES = 1024  # cores of one multi-core arch, all [[core]] tables together
_CORE_KEYS = ("arch", "count", "kind", "name", "vector_unit")


@dataclass(frozen=True)
class Core:
    """One core: its single-core arch and its kind (``mac`` or ``simd``); ``vector_unit``: whether a MAC core
    has the vector unit its arch describes (False: only the array; its vector ops run on a ``simd`` core);
    ``nest``: a loop-nest :class:`~npukit.sim.hardware.Hardware` (a ZigZag or Stream core YAML) that costs this
    MAC core's GEMMs and convs through the loop-nest mapper (:mod:`npukit.sim._multicore_nest`) in place of
    ``arch``'s array and buffers; ``arch`` still gives the clock, the operand widths and the DRAM port."""

    arch: Arch
    kind: str = "mac"
    name: str = ""
    vector_unit: bool = True
    nest: Hardware | None = None

    def __post_init__(self) -> None:
        if self.kind not in CORE_KINDS:
            raise ConfigError(f"core kind {self.kind!r}: use one of {', '.join(CORE_KINDS)}")

    @cached_property
    def model(self) -> tuple[Arch, Hardware | None]:
        """What costs this core's work, its arch and its loop-nest hardware, their names left out: cores whose models
        are equal are identical (compare with ``==``; the hardware holds dicts, so a model is no dict key or set
        member). Before 2026-12-07 the names counted, so four equal 48 x 48 cores, two under another arch name, took
        the unequal-core path: 19,336 cycles where the same cores under one name take 14,014 (``chain/pipeline``)."""
        return replace(self.arch, name="-"), None if self.nest is None else replace(self.nest, name="-")

    @property
    def macs_per_cycle(self) -> int:
        """PEs of the core's array (the nest hardware's when it has one)."""
        return self.nest.array.units if self.nest is not None else self.arch.rows * self.arch.cols


@dataclass(frozen=True)
class MultiCoreArch:
    """A multi-core NPU: ``cores``, the ``interconnect``, the ``shared_memory``, the ``dram`` channels, and the
    ``objective`` its schedule search minimises; ``bus``: a second interconnect between the MAC cores and the
    ``simd`` core that a vector op's operands and result cross (one hop; Stream's shared bus), None: the
    ``interconnect`` links; ``layer_cores``: on how many MAC cores a GEMM in a step of its own may run, ``all`` of
    them, or ``search``: also only the fastest 1, 2, 4, ... of them (and ``n - 1``), kept where that
    ranks strictly better under the objective (:func:`~npukit.sim.schedule.layer_splits`; more splits to map, so a
    slower search)."""

    name: str
    cores: tuple[Core, ...]
    interconnect: Interconnect = field(default_factory=Interconnect)
    shared_memory: SharedMemory = field(default_factory=SharedMemory)
    dram: Dram = field(default_factory=Dram)
    objective: str = "edp"
    bus: Interconnect | None = None
    table: EnergyTable | None = None  # the chip's own energy table (a Stream YAML's costs); None: the first core's
    layer_cores: str = "all"

    def __post_init__(self) -> None:
        if not self.cores:
            raise ConfigError(f"multicore arch '{self.name}' has no cores; add [[core]] tables")
        if not any(c.kind == "mac" for c in self.cores):
            raise ConfigError(f"multicore arch '{self.name}' has no mac core; GEMMs need one")
        if not self.simd_cores and not all(c.vector_unit for c in self.cores):
            raise ConfigError(f"multicore arch '{self.name}': a core without a vector unit needs a simd core "
                              "(add a [[core]] with kind = \"simd\")")
        if len(self.simd_cores) > 1:  # before, accepted and all but the first listed left idle, silently
            raise ConfigError(f"multicore arch '{self.name}' has {len(self.simd_cores)} simd cores; npukit runs every "
                              "vector op on one: give one simd core (its vector unit as wide as theirs together)")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"multicore field 'objective' = {self.objective!r}: use one of {', '.join(OBJECTIVES)}")
        if self.layer_cores not in LAYER_CORES:
            raise ConfigError(f"multicore field 'layer_cores' = {self.layer_cores!r}: use one of "
                              f"{', '.join(LAYER_CORES)}")
        clocks = {c.arch.clock_ghz for c in self.cores}
        if len(clocks) > 1:
            raise ConfigError(f"multicore arch '{self.name}': cores must share one clock, got {sorted(clocks)} GHz")
        tables = sorted({c.arch.energy_table for c in self.cores})
        if len(tables) > 1 and self.table is None:  # before, the first core's table priced every core, silently
            raise ConfigError(f"multicore arch '{self.name}': cores must share one energy table (the chip is priced "
                              f"with one), got {', '.join(tables)}")

    @property
    def mac_cores(self) -> list[int]:
        """Indices of the MAC cores, fastest first (peak MACs per cycle x clock; of equal peaks, the wider DRAM port,
        then the larger buffers, then the more array rows, then the core's model by its text, so that file order
        decides only among identical cores): a split on fewer cores (``layer_cores = "search"``) takes the first,
        and the first is the reference core (the ledger's arch) and a K split's reducer. Before, equal peaks kept
        file order, so listing the same cores in another order changed results."""
        return list(self._mac_order)

    @cached_property
    def _mac_order(self) -> tuple[int, ...]:
        def key(i: int) -> tuple[Any, ...]:
            c = self.cores[i]
            kib = c.arch.sram_kib
            return (-c.macs_per_cycle * c.arch.clock_ghz, -c.arch.dram_bandwidth_bytes_per_cycle,
                    -(kib.ifmap + kib.filter + kib.psum + kib.ofmap), -c.arch.rows, repr(c.model))

        return tuple(sorted((i for i, c in enumerate(self.cores) if c.kind == "mac"), key=key))

    @property
    def simd_cores(self) -> list[int]:
        """Indices of the SIMD (vector-only) cores."""
        return [i for i, c in enumerate(self.cores) if c.kind == "simd"]

    @property
    def clock_ghz(self) -> float:
        return self.cores[0].arch.clock_ghz

    @property
    def energy_table(self) -> str:
        """The name of the energy table that prices the chip (:attr:`table`'s, else the first core's)."""
        return self.table.name if self.table is not None else self.cores[0].arch.energy_table

    @property
    def peak_macs_per_cycle(self) -> int:
        """MACs per cycle of all MAC cores together."""
        return sum(self.cores[i].macs_per_cycle for i in self.mac_cores)

    def with_(self, **changes: Any) -> MultiCoreArch:
        """Copy with :func:`chip_keys` (``chip.mac_cores``, ``interconnect.bandwidth_bytes_per_cycle``, ...) and
        single-core arch fields (``rows``, ``sram_kib.ifmap``, ...) changed: the latter on every MAC core (``clock_ghz``
        and ``energy_table`` on every core: they share one clock and the chip is priced with one table).
        ``chip.mac_cores`` needs identical MAC cores; it keeps the other cores and renumbers every core's name in order
        (``core0``, ``core1``, ...)."""
        return _with_overrides(self, changes)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"name": self.name, "objective": self.objective, "layer_cores": self.layer_cores,
                "cores": [{"kind": c.kind, "name": c.name, "vector_unit": c.vector_unit, "arch": c.arch.to_dict(),
                           **({"nest": c.nest.name} if c.nest is not None else {}),
                           **({"pes": c.macs_per_cycle} if c.kind == "mac" else {})} for c in self.cores],
                "interconnect": asdict(self.interconnect), "shared_memory": asdict(self.shared_memory),
                "dram": asdict(self.dram), "bus": asdict(self.bus) if self.bus is not None else None,
                "energy_table": self.energy_table}


#: The chip-level fields :meth:`MultiCoreArch.with_` (and a sweep's ``[grid]``) may change besides the MAC cores'
#: arch fields; the fabric's are ``TABLE.FIELD`` of :data:`FABRIC_TABLES`.
CHIP_KEYS = ("chip.mac_cores", "chip.objective", "chip.layer_cores")
FABRIC_TABLES: dict[str, type] = {"interconnect": Interconnect, "shared_memory": SharedMemory, "dram": Dram,
                                  "bus": Interconnect}


def chip_keys() -> list[str]:
    """Every chip-level key :meth:`MultiCoreArch.with_` takes: :data:`CHIP_KEYS`, then ``interconnect.*``,
    ``shared_memory.*``, ``dram.*`` and ``bus.*`` (one per field of those tables)."""
    return [*CHIP_KEYS, *(f"{t}.{f}" for t, cls in FABRIC_TABLES.items() for f in cls.__dataclass_fields__)]


def _renumbered(cores: list[Core]) -> tuple[Core, ...]:
    """``cores`` with each name's trailing digits replaced by its position (``core3`` at 5 -> ``core5``)."""
    return tuple(replace(c, name=f"{c.name.rstrip('0123456789') or 'core'}{i}") for i, c in enumerate(cores))


def _with_overrides(m: MultiCoreArch, changes: dict[str, Any]) -> MultiCoreArch:
    chip = set(chip_keys())
    core_changes = {k: v for k, v in changes.items() if k not in chip}
    cores = list(m.cores)
    if core_changes:
        made: dict[tuple[Arch, str], Arch] = {}
        clock = {k: core_changes[k] for k in ("clock_ghz", "energy_table") if k in core_changes}
        for i, c in enumerate(cores):
            if c.kind == "mac" or clock:  # a simd core takes the clock and the table only
                if (c.arch, c.kind) not in made:
                    made[c.arch, c.kind] = c.arch.with_(**(core_changes if c.kind == "mac" else clock))
                cores[i] = replace(c, arch=made[c.arch, c.kind])
    if "chip.mac_cores" in changes:
        n = changes["chip.mac_cores"]
        others = [c for c in cores if c.kind != "mac"]
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= MAX_CORES - len(others):
            raise ConfigError(f"multicore field 'chip.mac_cores' must be an integer from 1 to "
                              f"{MAX_CORES - len(others)}, got {short(n)}")
        macs = [c for c in cores if c.kind == "mac"]
        if any((c.arch, c.vector_unit, c.nest) != (macs[0].arch, macs[0].vector_unit, macs[0].nest) for c in macs):
            raise ConfigError(f"multicore arch '{m.name}': 'chip.mac_cores' needs identical MAC cores; this chip's differ "
                              "(vary the count of each [[core]] table in its own arch file)")
        cores = [macs[0]] * n + others
    out = replace(m, cores=_renumbered(cores) if "chip.mac_cores" in changes else tuple(cores))
    fabric: dict[str, Any] = {}
    for table in FABRIC_TABLES:
        sub = {k.partition(".")[2]: v for k, v in changes.items() if k.startswith(f"{table}.") and k in chip}
        if not sub:
            continue
        if table == "bus" and m.bus is None:
            raise ConfigError(f"multicore arch '{m.name}' has no [bus]; 'bus.*' cannot change it")
        fabric[table] = replace(getattr(m, table), **sub)  # each table checks its numbers
    for key, field_name in (("chip.objective", "objective"), ("chip.layer_cores", "layer_cores")):
        if key in changes:
            fabric[field_name] = changes[key]
    return replace(out, **fabric) if fabric else out


def single_core(arch: Arch) -> MultiCoreArch:
    """A one-core multicore arch equal to ``arch`` (no shared memory; DRAM = the core's port)."""
    return MultiCoreArch(arch.name, (Core(arch, "mac", "core0"),), dram=Dram(1, arch.dram_bandwidth_bytes_per_cycle),
                         objective=arch.objective)


def homogeneous(arch: Arch, n: int, interconnect: Interconnect | None = None, shared_kib: float = 0.0,
                dram: Dram | None = None, simd: Arch | None = None, name: str | None = None) -> MultiCoreArch:
    """``n`` copies of ``arch`` as MAC cores (plus one ``simd`` core when given); DRAM default: ``n`` channels of
    the core's port bandwidth (bytes/cycle), so every core keeps its own single-core bandwidth."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ConfigError(f"core count must be a positive integer, got {n!r}")
    cores = tuple(Core(arch, "mac", f"core{i}") for i in range(n))
    if simd is not None:
        cores += (Core(simd, "simd", f"simd{n}"),)
    return MultiCoreArch(name or f"{arch.name}x{n}", cores, interconnect or Interconnect(), SharedMemory(shared_kib),
                         dram or Dram(n, arch.dram_bandwidth_bytes_per_cycle), arch.objective)


def is_multicore_toml(path: str | Path) -> bool:
    """True when ``path`` is a TOML file with ``[[core]]`` tables (or a built-in multicore preset name)."""
    if str(path) in BUILTIN_MULTICORE:
        return True
    p = Path(path)
    if p.suffix.lower() != ".toml" or not p.is_file():
        return False
    check_size(p, "arch file", ConfigError)
    text = check_depth(p.read_text(errors="replace"), f"arch file '{p}'", ConfigError)
    try:
        return "core" in tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return False


def load_multicore_arch(name_or_path: str | Path, load_core: Callable[[str], Arch] = load_arch) -> MultiCoreArch:
    """Load a built-in preset (:data:`BUILTIN_MULTICORE`) or a multicore TOML file; ``load_core`` reads each
    ``[[core]]``'s ``arch`` (a path relative to the TOML file is resolved there)."""
    name = str(name_or_path)
    if name in BUILTIN_MULTICORE:
        path = Path(__file__).parent / "archs" / f"{name}.toml"
        text, origin = path.read_text(), name
    else:
        path = check_file(name, "multicore arch file", ConfigError, f"pass a .toml with [[core]] tables or one of "
                          f"{', '.join(BUILTIN_MULTICORE)}")
        text, origin = read_text(path, "multicore arch file", ConfigError), str(path)
    check_depth(text, f"multicore arch file '{origin}'", ConfigError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin} is not valid TOML: {exc}") from None
    return multicore_from_dict(data, origin, path.parent, load_core)


def multicore_from_dict(data: dict[str, Any], origin: str = "<dict>", base_dir: Path | None = None,
                        load_core: Callable[[str], Arch] = load_arch) -> MultiCoreArch:
    """Build a :class:`MultiCoreArch` from a parsed TOML table; unknown keys are errors naming the key."""
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"{origin}: unknown multicore key '{key}' (known: {', '.join(_TOP_KEYS)})")
    tables = data.get("core")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{origin}: a multicore arch needs [[core]] tables")
    for key in ("name", "objective", "layer_cores"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{origin}: '{key}' must be a string, got {short(data[key])}")
    cores: list[Core] = []
    for t in tables:
        if not isinstance(t, dict):
            raise ConfigError(f"{origin}: each core must be a [[core]] table, got {short(t)}")
        unknown = set(t) - set(_CORE_KEYS)
        if unknown:
            raise ConfigError(f"{origin}: unknown [[core]] key '{sorted(unknown)[0]}' (known: {', '.join(_CORE_KEYS)})")
        vec = t.get("vector_unit", True)
        if not isinstance(vec, bool):
            raise ConfigError(f"{origin}: [[core]] vector_unit must be true or false, got {vec!r}")
        ref = t.get("arch")
        if not isinstance(ref, str):
            raise ConfigError(f"{origin}: every [[core]] needs arch = a built-in name or a core TOML path")
        if base_dir is not None and not Path(ref).is_absolute() and (base_dir / ref).is_file():
            ref = str(base_dir / ref)
        arch = load_core(ref)
        for key in ("name", "kind"):
            if key in t and not isinstance(t[key], str):
                raise ConfigError(f"{origin}: [[core]] {key} must be a string, got {short(t[key])}")
        count = t.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_CORES - len(cores):
            raise ConfigError(f"{origin}: [[core]] count must be an integer from 1 to {MAX_CORES} cores in all, "
                              f"got {short(count)}" + (f" after {len(cores)} cores" if cores else ""))
        for _ in range(count):
            cores.append(Core(arch, t.get("kind", "mac"), f"{t.get('name', 'core')}{len(cores)}", vec))
    sub: dict[str, Any] = {}
    for key, cls in (("interconnect", Interconnect), ("shared_memory", SharedMemory), ("dram", Dram),
                     ("bus", Interconnect)):
        if key == "bus" and key not in data:
            continue
        val = data.get(key, {})
        if not isinstance(val, dict):
            raise ConfigError(f"{origin}: '{key}' must be a table like [{key}]")
        for k in val:
            if k not in cls.__dataclass_fields__:
                raise ConfigError(f"{origin}: unknown key '{key}.{k}' (known: {', '.join(cls.__dataclass_fields__)})")
        try:
            sub[key] = cls(**val)
        except TypeError as exc:
            raise ConfigError(f"{origin}: {key}: {exc}") from None
    if "dram" not in data:
        port = cores[0].arch.dram_bandwidth_bytes_per_cycle
        sub["dram"] = Dram(max(1, sum(c.kind == "mac" for c in cores)), port)
    return MultiCoreArch(str(data.get("name", Path(origin).stem)), tuple(cores), sub["interconnect"],
                         sub["shared_memory"], sub["dram"], str(data.get("objective", cores[0].arch.objective)),
                         sub.get("bus"), layer_cores=str(data.get("layer_cores", "all")))


def with_objective(m: MultiCoreArch, objective: str) -> MultiCoreArch:
    """Copy with another search objective."""
    return replace(m, objective=objective)
