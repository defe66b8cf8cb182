"""A general digital-accelerator description: a MAC array with named spatial dimensions and a memory
hierarchy per operand (the shape of ZigZag's hardware files, so each of its digital accelerators is one).

* :class:`MacArray`: named dimensions (``D1``, ``D2``, ...) with sizes; ``unit_energy_pj`` per MAC.
* :class:`MemLevel`: one memory, bottom-up in :attr:`Hardware.memories`: its size (bits), read and write
  energy per access (pJ; one access moves ``max_bw`` bits of the port it uses), the memory operands it
  holds (``I1``, ``I2``, ``O``), the array dimensions it is shared across (``served``: one instance
  serves every PE along them; along the others it is replicated), and per (memory operand, direction)
  the port bandwidth (``min_bw``, ``max_bw`` bits per access). Directions are ZigZag's: ``tl`` read out
  to the level below, ``fh`` written from the level above, ``fl`` written from below (psums coming up),
  ``th`` read out to the level above.
* :class:`Hardware`: the array, the memories, which memory operand each layer operand uses
  (``W -> I2``, ``I -> I1``, ``O -> O``) and the bit widths per operand (``O`` = partial sums,
  ``O_final`` = final outputs).

A memory level's index for an operand counts only the memories holding that operand (``levels``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import ConfigError

DIRECTIONS = ("tl", "fh", "fl", "th")
LAYER_OPERANDS = ("W", "I", "O")


@dataclass(frozen=True)
class MemLevel:
    """One memory: ``size_bits``; ``r_cost_pj`` / ``w_cost_pj`` per access; ``operands`` (memory operands);
    ``served`` (array dims one instance is shared across); ``bw[(mem_op, dir)] = (min_bw, max_bw)`` bits."""

    name: str
    size_bits: float
    r_cost_pj: float
    w_cost_pj: float
    operands: tuple[str, ...]
    served: tuple[str, ...]
    bw: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    double_buffered: bool = False
    port: dict[tuple[str, str], str] = field(default_factory=dict)  # (mem_op, dir) -> physical port name

    def port_bw(self, mem_op: str, direction: str) -> tuple[int, int] | None:
        """(min_bw, max_bw) in bits of the port serving ``mem_op`` in ``direction``, None if none does."""
        return self.bw.get((mem_op, direction))

    def port_of(self, mem_op: str, direction: str) -> str:
        """The physical port serving ``mem_op`` in ``direction`` (transfers on one port serialise)."""
        return self.port.get((mem_op, direction), direction)


@dataclass(frozen=True)
class MacArray:
    """The MAC array: ``dims`` name -> size (PEs along it); ``unit_energy_pj`` per MAC (pJ)."""

    dims: dict[str, int]
    unit_energy_pj: float
    systolic: tuple[str, ...] = ()

    @property
    def units(self) -> int:
        return math.prod(self.dims.values())


@dataclass(frozen=True)
class Hardware:
    """A digital accelerator: MAC array, memories bottom-up, operand links and operand widths (bits)."""

    name: str
    array: MacArray
    memories: tuple[MemLevel, ...]
    links: dict[str, str] = field(default_factory=lambda: {"W": "I2", "I": "I1", "O": "O"})
    bits: dict[str, int] = field(default_factory=lambda: {"W": 8, "I": 8, "O": 16, "O_final": 8})

    def __post_init__(self) -> None:
        for op in LAYER_OPERANDS:
            mem_op = self.links.get(op)
            if not self.levels(op):
                raise ConfigError(f"hardware '{self.name}': no memory holds operand {op} ({mem_op})")
        known = set(self.links.values())
        for m in self.memories:
            bad = [d for d in m.served if d not in self.array.dims]
            if bad:
                raise ConfigError(f"hardware '{self.name}': memory '{m.name}' serves unknown array dimension {bad[0]}")
            if odd := [o for o in m.operands if o not in known]:
                raise ConfigError(f"hardware '{self.name}': memory '{m.name}' holds unknown operand {odd[0]!r} (use "
                                  f"{', '.join(sorted(known))})")
        if odd := [d for d in self.array.systolic if d not in self.array.dims]:
            raise ConfigError(f"hardware '{self.name}': systolic dimension {odd[0]!r} is not an array dimension "
                              f"({', '.join(self.array.dims)})")

    def levels(self, op: str) -> list[MemLevel]:
        """The memories holding layer operand ``op`` (W, I or O), bottom-up."""
        mem_op = self.links[op]
        return [m for m in self.memories if mem_op in m.operands]

    def with_formats(self, table, weight: str, activation: str, psum_buffer_bits: int | None = None) -> Hardware:
        """A variant whose W and I operands use number formats ``weight`` / ``activation`` (int4 ... fp32,
        :mod:`npukit.sim.formats`): operand widths and the MAC energy from ``table`` (an EnergyTable);
        ``psum_buffer_bits``: the width psums are held at between memory levels (default: the wider
        format's accumulation width)."""
        from dataclasses import replace

        from .formats import mac_energy, number_format

        w, a = number_format(weight), number_format(activation)
        pj, _estimate = mac_energy(table, weight, activation)
        acc = psum_buffer_bits or max(w.accumulate, a.accumulate)
        bits = {"W": w.bits, "I": a.bits, "O": acc, "O_final": a.bits}
        return replace(self, array=replace(self.array, unit_energy_pj=pj), bits=bits,
                       name=f"{self.name}_{weight}x{activation}")

    def with_sizes(self, dims: dict[str, int] | None = None, mem_bits: dict[str, float] | None = None) -> Hardware:
        """A variant with other array dimension sizes and/or memory sizes (bits, by memory name)."""
        from dataclasses import replace

        arr = replace(self.array, dims={**self.array.dims, **(dims or {})})
        mems = tuple(replace(m, size_bits=(mem_bits or {}).get(m.name, m.size_bits)) for m in self.memories)
        return replace(self, array=arr, memories=mems, name=self.name + "_variant")
