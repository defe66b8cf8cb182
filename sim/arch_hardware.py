"""Today's :class:`~npukit.sim.arch.Arch` (npukit TOML keys, ``npu128``/``npu32``, SCALE-Sim ``.cfg``) as a
special case of the general :class:`~npukit.sim.hardware.Hardware` description.

A ``rows x cols`` systolic array is a two-dimensional MAC array (``D1`` = rows, ``D2`` = cols) whose
spatial unrolling the dataflow fixes (ws: C on the rows, K on the columns, the weight in a per-PE
register of ``stationary_words`` words; os: output pixels OX/OY on the rows, K on the columns, the psum in
a per-PE register; is: C on the rows, OX/OY on the columns, the input in a per-PE register). The
memories are the arch's per-PE registers, its ifmap / filter SRAMs (per-operand, shared by the whole
array), the psum buffer for outputs and DRAM, priced with the arch's energy table per access of the
port width. This restates the hardware for the loop-nest engine; the single-array engine
(:mod:`npukit.sim.simulator`, SCALE-Sim parity) is unchanged and remains what ``npukit sim`` runs for them.
"""

from __future__ import annotations

from .arch import Arch
from .energy import EnergyTable
from .hardware import Hardware, MacArray, MemLevel

UNROLL = {"ws": {"D1": {"C": 0}, "D2": {"K": 0}}, "os": {"D1": {"OX": 0}, "D2": {"K": 0}},
          "is": {"D1": {"C": 0}, "D2": {"OX": 0}}}


def _mem(name: str, bits: float, word: int, rd: float, wr: float, ops: tuple[str, ...], served: tuple[str, ...]) -> MemLevel:
    bw = {}
    for op in ops:
        for d in ("tl", "fh", "fl", "th"):
            bw[(op, d)] = (word, word)
    return MemLevel(name, bits, rd * word, wr * word, ops, served, bw)


def hardware_from_arch(arch: Arch, table: EnergyTable) -> tuple[Hardware, dict[str, dict[str, int]]]:
    """(the Hardware, its dataflow's spatial unrolling) of ``arch`` priced with ``table``."""
    b = arch.bits
    mac = table.mac(b.input, b.weight, b.pe_psum)
    reg = table.register_bit()
    stat = {"ws": ("I2", b.weight * arch.stationary_words), "os": ("O", b.pe_psum), "is": ("I1", b.input)}
    op, bits = stat[arch.dataflow]
    mems = [_mem(f"pe_{op}_register", bits, bits // max(arch.stationary_words, 1) if op == "I2" else bits,
                 table.register_read_bit(), reg, (op,), ())]
    kib = arch.sram_kib
    for name, ops, k, width in (("ifmap_sram", ("I1",), kib.ifmap, b.input), ("filter_sram", ("I2",), kib.filter, b.weight),
                                ("psum_buffer", ("O",), kib.psum, b.psum_buffer)):
        e = table.sram_bit(k * 1024)
        mems.append(_mem(name, k * 8192, width * 8, e, e, ops, ("D1", "D2")))
    dram_w = 64
    mems.append(_mem("dram", 1e12, dram_w, table.dram_bit(), table.dram_bit(write=True), ("I1", "I2", "O"), ("D1", "D2")))
    hw = Hardware(arch.name, MacArray({"D1": arch.rows, "D2": arch.cols}, mac, ("D1", "D2")), tuple(mems),
                  bits={"W": b.weight, "I": b.input, "O": b.psum_buffer, "O_final": b.output})
    sm = {dim: {d: (arch.rows if dim == "D1" else arch.cols) for d in loops} for dim, loops in UNROLL[arch.dataflow].items()}
    return hw, sm
