"""The on-chip fabric of a multi-core NPU: the interconnect, the shared on-chip memory and the DRAM channels.

Units: bandwidths in bytes per clock cycle (of the cores' clock), latencies in cycles, energies in pJ per bit,
capacities in KiB (1024 bytes).

Every byte that moves between two cores, or between a core and the shared memory, crosses the interconnect once
per hop: it costs ``energy_pj_per_bit`` per bit and occupies a link for ``bytes / bandwidth`` cycles, plus
``latency_cycles`` once per transfer. DRAM traffic is priced by the cores' energy table (the ``dram`` component)
and not charged to the interconnect a second time: a single-core NPU's DRAM energy already covers the wire from
the memory controller to the array's buffers. The shared memory is an SRAM of its capacity, priced like the
cores' buffers (the ``shared_memory`` component, or a ``[components.shared_memory]`` section of the energy table).

Default values are estimates, marked so (``source = "estimate"``): 0.1 pJ per bit per hop stands for an on-chip
link of about a millimetre (an estimate, not a cited figure), and the bandwidths mirror Stream's
``tpu_like_quad_core`` example hardware (32 bytes/cycle between cores, a 128 bytes/cycle bus to off-chip memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .bounded import MIN_RATE, check_number, short
from .errors import ConfigError

TOPOLOGIES = ("mesh", "ring", "bus", "crossbar")


MAX_CHANNELS = 1 << 20  # DRAM channels a multi-core arch may declare


def _positive(where: str, v: object, allow_zero: bool = False) -> None:
    """Raise ConfigError unless ``v`` is a finite real number (at most :data:`npukit.sim.bounded.MAX_INT` in
    magnitude, so that no product of the fabric's numbers overflows from one field alone), positive or, with
    ``allow_zero``, non-negative."""
    kind = "non-negative" if allow_zero else "positive"
    x = check_number(v, f"multicore field '{where}' (a {kind} number)", ConfigError)
    if not (x >= 0 if allow_zero else x > 0):
        raise ConfigError(f"multicore field '{where}' must be a {kind} number, got {short(v)}")
    if where.endswith("bandwidth_bytes_per_cycle") and x < MIN_RATE:
        raise ConfigError(f"multicore field '{where}' = {short(v)} is too small: a bandwidth must be at least "
                          f"{MIN_RATE:.4g} bytes per cycle (1 / (2^63 - 1)), or the cycles divided by it overflow")


def _text(where: str, v: object) -> None:
    if not isinstance(v, str):
        raise ConfigError(f"multicore field '{where}' must be a string, got {short(v)}")


@dataclass(frozen=True)
class Interconnect:
    """Links between cores and to the shared memory: ``bandwidth_bytes_per_cycle`` per link, ``latency_cycles``
    per transfer, ``energy_pj_per_bit`` per bit per hop; ``topology`` sets the hop count between two cores
    (:meth:`hops`). ``source``: where the numbers come from (``estimate`` unless cited). ``multicast``: a DRAM
    fetch of an operand every core of a split needs whole (the inputs of an N-split, the weights of an M-split)
    reaches all of them at once, so it is read from DRAM once (as Stream's bus transfers to several cores do);
    False: every core fetches its own copy."""

    bandwidth_bytes_per_cycle: float = 32.0
    latency_cycles: float = 20.0
    energy_pj_per_bit: float = 0.1
    topology: str = "mesh"
    source: str = "estimate"
    multicast: bool = True

    def __post_init__(self) -> None:
        _positive("interconnect.bandwidth_bytes_per_cycle", self.bandwidth_bytes_per_cycle)
        _positive("interconnect.latency_cycles", self.latency_cycles, allow_zero=True)
        _positive("interconnect.energy_pj_per_bit", self.energy_pj_per_bit, allow_zero=True)
        _text("interconnect.source", self.source)
        if not isinstance(self.multicast, bool):
            raise ConfigError(f"multicore field 'interconnect.multicast' must be true or false, got {short(self.multicast)}")
        if not isinstance(self.topology, str) or self.topology not in TOPOLOGIES:
            raise ConfigError(f"multicore field 'interconnect.topology' = {self.topology!r}: use one of {', '.join(TOPOLOGIES)}")

    def hops(self, n_cores: int) -> float:
        """Mean hops between two distinct cores of ``n_cores`` (1 for a bus or crossbar; a ring: n/4; a 2-D mesh
        of side s = ceil(sqrt(n)): 2s/3, the mean Manhattan distance)."""
        if n_cores <= 2 or self.topology in ("bus", "crossbar"):
            return 1.0
        if self.topology == "ring":
            return max(1.0, n_cores / 4)
        side = math.ceil(math.sqrt(n_cores))
        return max(1.0, 2 * side / 3)

    def transfer_cycles(self, nbytes: float, links: int = 1) -> float:
        """Cycles to move ``nbytes`` over ``links`` parallel links, latency included (0 when nothing moves)."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (self.bandwidth_bytes_per_cycle * max(1, links)) + self.latency_cycles


@dataclass(frozen=True)
class SharedMemory:
    """The on-chip memory all cores share (0 KiB: none), ``bandwidth_bytes_per_cycle`` in total."""

    kib: float = 0.0
    bandwidth_bytes_per_cycle: float = 256.0

    def __post_init__(self) -> None:
        _positive("shared_memory.kib", self.kib, allow_zero=True)
        _positive("shared_memory.bandwidth_bytes_per_cycle", self.bandwidth_bytes_per_cycle)

    @property
    def bytes(self) -> float:
        return self.kib * 1024.0


@dataclass(frozen=True)
class Dram:
    """DRAM/HBM: ``channels`` channels of ``bandwidth_bytes_per_cycle`` each; the active cores share them
    (each core gets at most its own port, the arch's ``dram_bandwidth_bytes_per_cycle``)."""

    channels: int = 1
    bandwidth_bytes_per_cycle: float = 64.0

    def __post_init__(self) -> None:
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or not 0 < self.channels <= MAX_CHANNELS:
            raise ConfigError(f"multicore field 'dram.channels' must be an integer 1..{MAX_CHANNELS:,}, "
                              f"got {short(self.channels)}")
        _positive("dram.bandwidth_bytes_per_cycle", self.bandwidth_bytes_per_cycle)

    @property
    def total_bandwidth(self) -> float:
        """All channels together, bytes per cycle."""
        return self.channels * self.bandwidth_bytes_per_cycle

    def share(self, active_cores: int, port: float) -> float:
        """Bytes per cycle one of ``active_cores`` cores gets (capped by its own ``port``)."""
        return min(port, self.total_bandwidth / max(1, active_cores))
