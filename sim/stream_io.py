"""Read a Stream 2.1.1 (``stream-dse``) multi-core hardware YAML into a :class:`~npukit.sim.multicore.MultiCoreArch`.

A Stream chip file lists its ``cores`` (core id -> a core YAML, ZigZag's hardware format plus ``type``,
``operator_types`` and ``operand_precision``), the ``offchip_core_id`` (the core whose memory is DRAM) and
``core_connectivity`` (``link`` and ``bus`` entries: ``cores``, ``bandwidth`` in bits per cycle,
``unit_energy_cost`` in pJ per bit, defaulting to the file's ``unit_energy_cost``). npukit builds:

* **MAC cores**: compute cores with an array of two or more dimensions whose ``operator_types``, if listed, are
  matrix operators (GEMM, MatMul, Conv, Einsum): each a loop-nest core (:attr:`Core.nest`, the core YAML read by
  :func:`~npukit.sim.zigzag_io.load_zigzag_hardware`, mapped by npukit's loop-nest mapper), its operands at the
  core's ``operand_precision`` ``input`` width (or ``operand_bits``) and its partial sums at its ``accumulator``
  width (the operands' when absent, as Stream's cost estimator takes them). They have no vector unit when the chip
  has a vector core (Stream runs vector nodes only on cores that list them).
* **the SIMD core**: the compute cores with a one-dimensional array or elementwise ``operator_types``, pooled into
  npukit's one ``simd`` core with all their lanes (``tpu_v7_ironwood``'s four VPUs: a vector op split over all of
  them, each assumed to find its data in its own TensorCore); its bus is the widest ``bus`` entry holding one, or,
  where the vector cores share their top memory with MAC cores (``core_memory_sharing``), that memory's read port of
  each group, at 0 pJ per bit (the vector unit's own reads price it). Pooling-only and memory-only cores are left
  out with a one-line warning (npukit has no pooling operator; a memory core's memory is its sharers' top memory).
* **DRAM**: the off-chip core's widest port (bits per cycle / 8), or, where ``link`` entries join it to the cores,
  one channel per link at the link's width, all of them together at most the port (``simba``'s six column links
  behind a 64-bit port, ``tpu_v7_ironwood``'s four HBM links); each core's own port at most its widest such link.
* **the interconnect**: the narrowest ``link`` between two cores (not to the off-chip core).
* **the energy table** (:func:`stream_energy_table`): the first MAC core's ``unit_energy`` and memories and the
  off-chip memory's costs (Stream's own numbers), so DRAM, vector, link and bus energies are priced at the YAML's
  costs; a loop-nest core prices its own array and memories from its YAML directly.

A memory shared by several cores (``core_memory_sharing``) is each MAC core's own here: neither its capacity nor its
port is split between them. Not read (a one-line warning names each present): ``bandwidth`` (per-port ceilings),
``technology_node``; ``core_coordinates`` is read silently and not used (links get a mesh's mean hop count; with
hop-independent link cycles this changes cycles only through the link energy per hop). Source of the format:
KU Leuven MICAS, Stream (``stream-dse`` 2.1.1, MIT License), ``stream/inputs/examples/hardware/``.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._multicore_nest import with_bits
from .arch import Arch, Bits, SramKiB, VectorUnit
from .bounded import duplicate_key, short
from .energy import EnergyTable
from .errors import ConfigError
from .interconnect import Dram, Interconnect, SharedMemory
from .multicore import MAX_CORES, Core, MultiCoreArch
from .zigzag_io import _load_yaml, load_zigzag_hardware

MATRIX_OPS = {"gemm", "matmul", "conv", "einsum"}
_UNREAD = ("bandwidth", "technology_node")
_TOP = {"name", "cores", "offchip_core_id", "unit_energy_cost", "core_connectivity", "core_coordinates",
        "core_memory_sharing", *_UNREAD}


def _warning(path: Path, what: str) -> str:
    return f"warning: {path.name}: {what} is not modelled by npukit (ignored)"


def _bits(name: object, default: int) -> int:
    """Element width in bits of a Stream type name (``int8``, ``bf16``, ``fp32``, ``int24``, ``fp8_e4m3``): its first
    run of digits (before, every digit: ``fp8_e4m3`` read as 843 bits)."""
    m = re.search(r"[0-9]+", str(name or ""))
    return int(m.group()) if m and len(m.group()) <= 4 else default


def _core_file(root: Path, rel: object, cid: object) -> Path:
    """A core YAML named in the chip file: relative to it, else in its ``cores/`` folder (as Stream resolves it).
    The name must stay inside the chip file's folder (no absolute path, no ``..`` above it): a chip is one folder,
    and a file that names ``/etc/passwd`` or ``../../x.yaml`` is refused before anything is read."""
    if not isinstance(rel, str) or not rel:
        raise ConfigError(f"{root}: cores.{cid} must name a core YAML file, got {rel!r}")
    if Path(rel).is_absolute() or os.path.normpath(rel).split(os.sep)[0] == "..":
        raise ConfigError(f"{root}: core {cid}'s file {rel} is outside the chip file's folder; name it relative to "
                          "that folder (beside the chip file or in its cores/)")
    for p in (root.parent / rel, root.parent / "cores" / Path(rel).name):
        if p.is_file() and p.resolve() == root.resolve():
            raise ConfigError(f"{root}: core {cid}'s file {rel} is the chip file itself; name a core YAML")
        if p.is_file():
            if not p.resolve().is_relative_to(root.parent.resolve()):  # a link inside the folder pointing out of it
                raise ConfigError(f"{root}: core {cid}'s file {rel} leads outside the chip file's folder (a link to "
                                  f"{p.resolve()}); copy the core YAML into that folder")
            return p
    raise ConfigError(f"{root}: core {cid}'s file {rel} is not there (looked beside it and in cores/)")


def _dict(path: Path, what: str) -> dict[str, Any]:
    d = _load_yaml(path)
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: not a Stream {what} file (a mapping of fields)")
    return d


def _kind(core: dict[str, Any]) -> str:
    """``mac``, ``simd`` or ``other`` (pooling-only, memory-only or unknown) for a parsed core YAML."""
    sizes = (core.get("operational_array") or {}).get("sizes") or []
    ops = {str(o).lower() for o in core.get("operator_types") or []}
    if not str(core.get("type", "compute")).endswith("compute") or not sizes:
        return "other"
    if len(sizes) >= 2 and (not ops or ops <= MATRIX_OPS):
        return "mac"
    if len(sizes) == 1 or (ops and not ops & MATRIX_OPS and ops - {"maxpool", "averagepool", "globalaveragepool",
                                                                  "globalmaxpool"}):
        return "simd"
    return "other"


def _port_bits(mem: dict[str, Any]) -> int:
    """The widest port's ``bandwidth_max`` (bits per cycle); a quoted or fractional width is refused (``'64'`` and
    ``4.5`` were read as 64 and 4)."""
    widths = [p.get("bandwidth_max", 0) for p in mem.get("ports") or []]
    for w in widths:
        if not isinstance(w, int | float) or isinstance(w, bool) or w != w or w != int(w) or w < 0:
            raise ConfigError(f"a memory port's bandwidth_max must be a whole number of bits per cycle, got {short(w)}")
    return int(max(widths, default=0))


def _write_factor(mem: dict[str, Any], src: str, name: str) -> float:
    """A memory's write cost over its read cost (1 when both are 0); a write that costs energy beside a free read
    cannot be priced as a factor of the read, and is refused."""
    r, w = float(mem["r_cost"]), float(mem["w_cost"])
    if r == 0:
        if w == 0:
            return 1.0
        raise ConfigError(f"{src}: memory '{name}' has r_cost 0 and w_cost {w}: npukit prices a write as a factor of "
                          "the read; give the read its cost")
    return w / r


def stream_energy_table(name: str, mac_core: dict[str, Any], offchip: dict[str, Any],
                        link_pj_per_bit: float = 0.0) -> EnergyTable:
    """An npukit energy table of a Stream chip's own costs: MAC energy = the MAC core's ``unit_energy`` (per 8x8
    MAC); register pJ per bit = its smallest memory's ``r_cost`` per port bit; SRAM = its largest memory (capacity,
    ``r_cost`` per access of its port width, ``w_cost / r_cost`` for writes); DRAM = the off-chip memory's
    ``r_cost`` per access of its port width, ``w_cost`` per write (before, writes were priced at ``r_cost``), each
    plus ``link_pj_per_bit`` for every bit of the access: the link to the off-chip core it crosses, as Stream
    charges a transfer's links (before, left out: fusemax's 512 pJ/bit links).
    Floating-point ALU energies (the SIMD core's) are not in Stream's files: Horowitz, "Computing's energy
    problem", ISSCC 2014 (45 nm)."""
    mems = sorted((m for m in (mac_core.get("memories") or {}).items()), key=lambda kv: float(kv[1]["size"]))
    (reg_name, reg), (sram_name, sram) = mems[0], mems[-1]
    dram_name, dram = next(iter((offchip.get("memories") or {}).items()))
    dram_bits = max(1, _port_bits(dram))  # one access of the off-chip memory's port
    mac = float(mac_core["operational_array"]["unit_energy"])
    src = f"Stream {name}.yaml"
    data = {
        "name": f"stream-{name}", "description": f"costs of Stream's {name}.yaml",
        "int_add": {"intercept_pj": 0.0, "slope_pj_per_bit": 1e-9, "source": f"{src}: adds inside unit_energy"},
        "int_mult": {"pj_per_bit2": mac / 64, "source": f"{src}: operational_array unit_energy {mac} pJ per MAC"},
        "register": {"pj_per_bit": float(reg["r_cost"]) / max(1, _port_bits(reg)), "source": f"{src}: {reg_name}"},
        "sram": {"capacity_bytes": [float(sram["size"]) / 8], "pj_per_access": [float(sram["r_cost"])],
                 "access_bits": max(1, _port_bits(sram)), "write_factor": _write_factor(sram, src, sram_name),
                 "source": f"{src}: {sram_name}"},
        "dram": {"pj_per_access": float(dram["r_cost"]) + link_pj_per_bit * dram_bits, "access_bits": dram_bits,
                 "write_pj_per_access": float(dram.get("w_cost", dram["r_cost"])) + link_pj_per_bit * dram_bits,
                 "source": f"{src}: off-chip {dram_name}" + (f" and its links at {link_pj_per_bit:g} pJ/bit"
                                                              if link_pj_per_bit else "")},
        "fp16_add": {"pj": 0.4, "source": "Horowitz ISSCC 2014 (not in the Stream YAML)"},
        "fp16_mult": {"pj": 1.1, "source": "Horowitz ISSCC 2014 (not in the Stream YAML)"},
        "fp32_add": {"pj": 0.9, "source": "Horowitz ISSCC 2014 (not in the Stream YAML)"},
        "fp32_mult": {"pj": 3.7, "source": "Horowitz ISSCC 2014 (not in the Stream YAML)"},
    }
    return EnergyTable.from_dict(data, origin=src)


def load_stream_hardware(path: str | Path, objective: str = "latency", operand_bits: int | None = None,
                         warn: bool = True, warnings: list[str] | None = None) -> MultiCoreArch:
    """A Stream hardware YAML -> :class:`MultiCoreArch` (its :attr:`~MultiCoreArch.table` the chip's own costs);
    ``objective``: what the schedule search minimises (Stream's own is latency); ``operand_bits``: the operands'
    width (bits) of the MAC and vector cores in place of the MAC core's ``operand_precision`` input width (Stream
    takes it from the workload's tensors); ``warn``: name what is not modelled on stderr, or, given ``warnings``,
    append those lines to it instead (a caller that may still refuse its other inputs prints them once it goes on).
    Raises ConfigError naming the bad field or file (and then warns of nothing: a refused file prints one line)."""
    notes: list[str] = []
    try:
        march = _load(Path(path), objective, operand_bits, notes)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, ZeroDivisionError) as exc:
        raise ConfigError(f"{path}: a Stream hardware or core field is missing or malformed ({type(exc).__name__}: "
                          f"{str(exc)[:120]})") from None
    lines = [what if what.startswith("warning: ") else _warning(Path(path), what) for what in notes] if warn else []
    if warnings is not None:
        warnings += lines
    else:
        for line in lines:
            print(line, file=sys.stderr)
    return march


def _ids(root: Path, cores_in: dict[Any, Any]) -> dict[Any, int]:
    """The chip's core ids (YAML key -> int), each a distinct integer >= 0: ``0`` and ``"0"``, or a key written
    twice (the YAML parser keeps the last silently), would make two cores one."""
    ids: dict[Any, int] = {}
    if len(cores_in) > MAX_CORES:
        raise ConfigError(f"{root}: {len(cores_in):,} cores; a chip has at most {MAX_CORES:,}")
    for cid in cores_in:
        if isinstance(cid, bool) or not isinstance(cid, int | str) or not str(cid).strip().isdigit():
            raise ConfigError(f"{root}: core id {cid!r} must be an integer >= 0")
        if int(cid) in ids.values():
            raise ConfigError(f"{root}: core id {int(cid)} is listed twice under cores")
        ids[cid] = int(cid)
    dup = duplicate_key(root.read_text(encoding="utf-8"))
    if dup is not None:
        raise ConfigError(f"{root}: key {dup!r} is written twice in one mapping (YAML keeps only the last)")
    return ids


def _entries(root: Path, top: dict[str, Any], ids: set[int]) -> list[tuple[str, list[int], float, float]]:
    """``core_connectivity`` as (type, cores, bits per cycle, pJ per bit) tuples, checked: every core one of
    ``ids``; a ``link`` joins two distinct cores, a ``bus`` two or more."""
    def number(v: object) -> bool:  # a YAML number: not a bool, not a quoted string (True was 1 bit, '32' 32)
        return isinstance(v, int | float) and not isinstance(v, bool)

    def core_id(c: object) -> bool:  # an id as the cores table takes it: a number or a quoted one
        return (isinstance(c, int) and not isinstance(c, bool)) or (isinstance(c, str) and c.isascii()
                                                                  and c.isdigit() and len(c) <= 6)

    default_pj = top.get("unit_energy_cost")
    default_pj = 0.0 if default_pj is None else default_pj
    if not number(default_pj):  # true was 1 pJ/bit
        raise ConfigError(f"{root}: unit_energy_cost must be a number (pJ per bit), got {short(default_pj)}")
    conns = top.get("core_connectivity") or []
    if not isinstance(conns, list):
        raise ConfigError(f"{root}: core_connectivity must be a list of link and bus entries")
    out = []
    for e in conns:
        try:
            cs, bw = e["cores"], e["bandwidth"]
            pj = e.get("unit_energy_cost")
            pj = default_pj if pj is None else pj  # null: the chip's default, as when absent
            if not isinstance(cs, list) or not all(core_id(c) for c in cs) or not number(bw) or not number(pj):
                raise ValueError("cores a list of core ids, bandwidth and unit_energy_cost numbers")  # '01' was [0, 1]
            out.append((str(e["type"]), [int(c) for c in cs], float(bw), float(pj)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{root}: core_connectivity entry {short(e)} needs type, cores and bandwidth "
                              f"({exc})") from None
    pairs: dict[tuple[int, ...], float] = {}
    for kind, cs, bw, _ in out:
        key = (kind, *sorted(cs))
        if key in pairs and pairs[key] != bw:  # which width the chip has is not said
            raise ConfigError(f"{root}: cores {sorted(cs)} are joined by two {kind}s of {pairs[key]:g} and {bw:g} "
                              "bits/cycle; give one")
        pairs[key] = bw
    for kind, cs, _, _ in out:
        ghost = sorted(set(cs) - ids)
        if ghost:
            raise ConfigError(f"{root}: a core_connectivity {kind} names core {ghost[0]}, which is not under cores")
        if kind not in ("link", "bus"):
            raise ConfigError(f"{root}: core_connectivity type {kind!r}: use link or bus")
        if len(set(cs)) < 2 or (kind == "link" and len(cs) != 2):
            raise ConfigError(f"{root}: a core_connectivity {kind} joins {cs}: a link needs two distinct cores, "
                              "a bus two or more")
    if not all(1 <= bw < math.inf and 0 <= pj < math.inf for _, _, bw, pj in out):  # 1e-300 gave 2e301 cycles
        raise ConfigError(f"{root}: core_connectivity bandwidths must be finite and at least 1 bit per cycle, "
                          "energies finite and >= 0 (pJ per bit)")
    return out


def _load(root: Path, objective: str, operand_bits: int | None, notes: list[str]) -> MultiCoreArch:
    """The chip file at ``root`` read; what is not modelled is appended to ``notes`` (warned once it loads)."""

    def _warn(_: Path, what: str) -> None:
        notes.append(what)

    top = _dict(root, "hardware")
    for k in top:
        if k not in _TOP:
            _warn(root, f"field '{k}'")
        elif k in _UNREAD:
            _warn(root, f"'{k}'")
    cores_in = top.get("cores")
    if not isinstance(cores_in, dict) or not cores_in:
        raise ConfigError(f"{root}: not a Stream hardware file (needs 'cores': core id -> core YAML)")
    off_id = top.get("offchip_core_id")
    if isinstance(off_id, bool | float) or off_id not in cores_in:  # True == 1 and 6.0 == 6 matched core keys
        raise ConfigError(f"{root}: offchip_core_id {off_id!r} is not one of its core ids")
    ids = _ids(root, cores_in)
    files = {ids[cid]: _core_file(root, rel, cid) for cid, rel in cores_in.items()}
    parsed = {cid: _dict(p, "core") for cid, p in files.items()}
    off_id = int(off_id)
    if str(parsed[off_id].get("type", "")).endswith("compute"):
        raise ConfigError(f"{root}: offchip_core_id {off_id} names a compute core ({files[off_id].name}); it must name "
                          "the off-chip memory core (type zigzag.offchip)")
    name = str(top.get("name", root.stem))
    kinds = {cid: "dram" if cid == off_id else _kind(c) for cid, c in parsed.items()}
    macs = [cid for cid, k in kinds.items() if k == "mac"]
    simds = [cid for cid, k in kinds.items() if k == "simd"]
    if not macs:
        raise ConfigError(f"{root}: no MAC core (a compute core with a 2-D or larger array running matrix operators)")
    for cid, k in kinds.items():
        if k == "other":
            _warn(root, f"core {cid} ({files[cid].name}: not a MAC or SIMD core)")
    off_mems = list((parsed[off_id].get("memories") or {}).values())
    if not off_mems:
        raise ConfigError(f"{root}: the off-chip core {off_id} ({files[off_id].name}) has no memory")
    port = _port_bits(off_mems[0]) / 8
    if len(off_mems) > 1:  # before, the others were dropped silently
        first = next(iter(parsed[off_id]["memories"]))
        _warn(root, f"the off-chip core's memories after its first, '{first}' ({files[off_id].name})")
    if not 0 < port < math.inf:
        raise ConfigError(f"{root}: the off-chip memory of core {off_id} has no port bandwidth")
    entries = _entries(root, top, set(files))
    _sharing(top, set(files), root)  # checked here: only chips with a SIMD core use it below
    # the links npukit models: none that touches a compute core it leaves out (a pooling core), so such a link
    # neither adds a DRAM channel nor sets the link width (before, a 16-bit pooling link to DRAM cut the DRAM
    # bandwidth 4x); a memory-only core's links stay (ironwood's VMEM -> HBM links are its DRAM channels)
    dropped = {c for c, k in kinds.items() if k == "other" and str(parsed[c].get("type", "compute")).endswith("compute")}
    links = [e for e in entries if e[0] == "link" and not set(e[1]) & dropped]
    to_off = [e for e in links if off_id in e[1]]
    # one DRAM channel per link to the off-chip core, all together at most its port (simba: six 256-bit column links
    # behind a 64-bit port; ironwood: four 13,400-bit HBM links, together its 53,600-bit port)
    dram = Dram(len(to_off), min(min(e[2] for e in to_off) / 8, port / len(to_off))) if to_off else Dram(1, port)
    core_port = min(max(e[2] for e in to_off) / 8, port) if to_off else port
    # the lead MAC core (its widths for the simd core, its costs for the chip's table): the one with the most PEs, of
    # equal ones the one whose file's content sorts last, so not the order they are listed in (before, the first
    # listed: reversing a mixed chip's cores moved a GEMM 1.7x)
    lead = max(macs, key=lambda c: (math.prod(int(d) for d in parsed[c]["operational_array"]["sizes"]),
                                    json.dumps(parsed[c], sort_keys=True, default=str), -macs.index(c)))
    mac0 = parsed[lead]
    wbits, acc = _widths(mac0, operand_bits)
    nests: dict[int, Any] = {}  # each distinct core file's loop-nest Hardware (validated before an Arch is built)
    archs: dict[int, Arch] = {}

    def made(cid: int) -> tuple[Arch, Any]:
        """Core ``cid``'s Arch (its own operand widths, array and top memory; the chip's DRAM port) and loop-nest
        Hardware, made once per distinct core file content."""
        first = next(c for c in [lead, *macs] if parsed[c] == parsed[cid])
        if first not in archs:
            core = parsed[first]
            nests[first] = _nest(files[first], core, operand_bits, notes)
            w, a = _widths(core, operand_bits)
            sizes = [int(s) for s in core["operational_array"]["sizes"]] + [1]
            kib = max(float(m["size"]) for m in core["memories"].values()) / 8 / 1024
            archs[first] = Arch(name=name, rows=sizes[0], cols=sizes[1], dataflow="ws", timing="double-buffered",
                                bits=Bits(input=w, weight=w, pe_psum=a, psum_buffer=a, output=w),
                                sram_kib=SramKiB(kib / 4, kib / 4, kib / 4, kib / 4),
                                dram_bandwidth_bytes_per_cycle=core_port, stationary_words=1)
        return archs[first], nests[first]

    arch = made(lead)[0]
    src = f"Stream {name}.yaml"
    # one link width for every pair of cores: the narrowest between two cores (ironwood: the 364-bit ICI link
    # between its chips, which a split over both chips' MXUs crosses; its die-to-die links are wider)
    narrow = min((e for e in links if e not in to_off), key=lambda e: e[2], default=None)
    ic = Interconnect(narrow[2] / 8 if narrow else 8.0, 0.0, narrow[3] if narrow else 0.0, "mesh", src)
    if narrow is None and len(macs) > 1:  # before, silently (fusemax)
        notes.append(f"warning: {root.name}: no link joins two cores; npukit takes 64 bits/cycle at 0 pJ/bit between "
                     "its MAC cores (what a split over them moves)")
    cores = tuple(Core(a, "mac", f"core{cid}", vector_unit=not simds, nest=h) for cid in macs for a, h in [made(cid)])
    bus = None
    if simds:
        # npukit has one simd core: Stream's vector cores (ironwood: one VPU per TensorCore, four) pooled into one
        # with all their lanes, a vector op split over all of them as Stream splits it, on one bus
        sc = parsed[simds[0]]
        vbits = operand_bits or _bits((sc.get("operand_precision") or {}).get("input"), 16 if wbits >= 16 else wbits)
        lanes = sum(math.prod(int(d) for d in parsed[c]["operational_array"]["sizes"]) for c in simds)
        vec = VectorUnit(lanes=lanes, bits=vbits, number="fp" if vbits in (16, 32) else "int")
        cores += (Core(replace(arch, vector=vec), "simd", "simd" + "+".join(map(str, simds))),)
        on = [e for e in entries if e[0] == "bus" and set(simds) & set(e[1])]
        shared = [g for g in _sharing(top) if set(g) & set(simds) and set(g) & set(macs)]
        if on:
            e = max(on, key=lambda e: e[2])
            bus = Interconnect(e[2] / 8, 0.0, e[3], "bus", src)
        elif shared:  # the vector cores read the MAC cores' results in place, at their top memory's read port
            mem = max((sc.get("memories") or {}).values(), key=lambda m: float(m["size"]))
            bus = Interconnect(len(shared) * _port_bits(mem) / 8, 0.0, 0.0, "bus", f"{src} core_memory_sharing")
    # every DRAM bit crosses one link to the off-chip core: their mean energy (one DRAM channel per link), else a bus
    # holding it
    via = to_off or [e for e in entries if e[0] == "bus" and off_id in e[1]]
    off_pj = sum(e[3] for e in via) / len(via) if via else 0.0
    for kind, cs, bits, _ in entries:  # npukit's bus runs to the simd core; another is not (before: dropped silently)
        if kind == "bus" and not set(simds) & set(cs):
            _warn(root, f"the bandwidth of the bus joining cores {cs} ({bits:g} bits/cycle; no SIMD core on it"
                  + ("; its energy per bit is charged to DRAM transfers)" if via and via[0][1] == cs else ")"))
    table = stream_energy_table(name, mac0, parsed[off_id], off_pj)
    return MultiCoreArch(name, cores, ic, SharedMemory(0.0), dram, objective, bus, table)


def _sharing(top: dict[str, Any], ids: set[int] | None = None, root: Path | None = None) -> list[list[int]]:
    """``core_memory_sharing``: groups of cores with one top memory (``"3, 0, 1, 2"``: the first owns it); with
    ``ids``, every core must be one of them."""
    groups = [[int(c) for c in str(g).split(",")] for g in top.get("core_memory_sharing") or []]
    ghost = sorted({c for g in groups for c in g} - ids) if ids is not None else []
    if ghost:
        raise ConfigError(f"{root}: core_memory_sharing names core {ghost[0]}, which is not under cores")
    return groups


def _widths(core: dict[str, Any], operand_bits: int | None) -> tuple[int, int]:
    """(operand, partial-sum) bits of a MAC core: ``operand_bits`` or its ``operand_precision`` input (8 when
    absent); its accumulator, at least the operands' (the operands' when absent, as Stream takes it)."""
    prec = core.get("operand_precision") or {}
    w = operand_bits or _bits(prec.get("input"), 8)
    return w, max(_bits(prec.get("accumulator"), w), w)


def _nest(path: Path, core: dict[str, Any], operand_bits: int | None, notes: list[str]):  # -> Hardware
    """A MAC core's loop-nest Hardware: its YAML at its widths (:func:`_widths`); the core file's warning lines
    (whole lines, ``warning: ...``) are appended to ``notes``."""
    w, acc = _widths(core, operand_bits)
    return with_bits(load_zigzag_hardware(path, notes), w, w, w, acc)
