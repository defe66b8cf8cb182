"""How a step whose operators overlap (a pipelined group, a parallel step of branches) shares its latency among their
rows. The rows of the ledger and the CSV add up to the step's latency, so each operator is given a share of it, not
its own time (the shares overlap). One common factor on each operator's own cycles let a row move more DRAM bytes or
do more MACs per cycle than its cores can (ResNet-18's layer4 convs in ``chain/pipeline`` on quad128 at 66-67 B/cycle
through one core's 64 B/cycle port; their roofline points above the roof). Here no row gets fewer cycles than its
floor, its MACs over its cores' PEs or its DRAM bytes over its cores' ports, whichever is longer, while the other rows
can give theirs up; where those floors together pass the step's latency (the overlap hides more than one row's work
behind another's), the chip's are used (all MAC cores' PEs, all DRAM channels: the roofs of the report's roofline),
and where even those pass it, every row takes its share in proportion to its floor. ``r`` is the simulation in
progress (``multicore_sim._Run``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ._multicore_cost import Part
from .workload import Layer, VectorOp

if TYPE_CHECKING:
    from .multicore_sim import _Run

EPS = 1e-9  # relative: floors that add up to the latency do so up to round-off


def step_scales(r: _Run, rows: list[tuple[Layer | VectorOp, list[Part]]], latency: float) -> list[float]:
    """The factor on each row's slowest part's cycles (:func:`row_scales`) for the rows ``(operator, parts)`` of one
    step of ``latency`` cycles."""
    chip_bw = r.m.dram.total_bandwidth or math.inf
    chip_pes = r.m.peak_macs_per_cycle or math.inf
    own: list[float] = []
    chip: list[float] = []
    for op, parts in rows:
        cores = {p.core for p in parts}
        dram = sum(p.dram_bytes for p in parts)
        macs = op.macs if isinstance(op, Layer) else 0
        port = min(chip_bw, sum(r.m.cores[c].arch.dram_bandwidth_bytes_per_cycle for c in cores))
        pes = sum(r.m.cores[c].macs_per_cycle for c in cores)
        own.append(max(_over(dram, port), _over(macs, pes)))
        chip.append(max(_over(dram, chip_bw), _over(macs, chip_pes)))
    return row_scales([max(p.busy for p in parts) for _, parts in rows], latency, own, chip)


def _over(amount: float, rate: float) -> float:
    return amount / rate if amount and 0 < rate < math.inf else 0.0


def row_scales(busy: list[float], total: float, *floors: list[float]) -> list[float]:
    """Each row's factor on its ``busy`` cycles so that the rows add up to ``total``: one common factor, except that
    no row gets fewer cycles than its floor (the first of ``floors`` whose rows add up to at most ``total``) while
    the others can give them up; where none fits, the rows share ``total`` in proportion to the last floors (one
    common factor without floors)."""
    work = sum(busy)
    if not work or total <= 0:
        return [1.0] * len(busy)
    for fl in floors:
        if sum(fl) <= total * (1 + EPS):
            return _fill(busy, fl, total)
    last = floors[-1] if floors else []
    if not last or not sum(last):
        return [total / work] * len(busy)
    return [total * f / sum(last) / b if b > 0 else 0.0 for f, b in zip(last, busy, strict=True)]


def _fill(busy: list[float], floors: list[float], total: float) -> list[float]:
    """Rows held at their floor; the rest share what is left in proportion to their busy cycles."""
    fixed: set[int] = set()
    while True:
        free = sum(b for i, b in enumerate(busy) if i not in fixed)
        left = max(0.0, total - sum(floors[i] for i in fixed))
        if free <= 0:  # every row at its floor: the floors stretched to the total
            fl = sum(floors)
            return [total * f / fl / b if b > 0 and fl > 0 else 0.0 for f, b in zip(floors, busy, strict=True)]
        s = left / free
        more = {i for i, b in enumerate(busy) if i not in fixed and b > 0 and floors[i] > s * b * (1 + EPS)}
        if not more:
            return [floors[i] / busy[i] if i in fixed else s for i in range(len(busy))]
        fixed |= more
