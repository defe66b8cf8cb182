"""The datapath vocabulary: one name per width and per mode, shared by the simulator, the cycle model, the
RTL, PsumQuant and the CLI; and the one layer that still accepts the old names.

Widths (bits) of one systolic-array NPU, from the operands to the outputs:

* ``input`` and ``weight``: the operands of a MAC.
* ``pe_psum``: the accumulator inside the array: the psum register and adder of every PE; a fold's
  psum (the sum over the rows of one K-tile) leaves the array at this width.
* ``psum_buffer``: the running psums between K-folds, held in the psum buffer (and spilled to DRAM) and
  updated by the psum adder. Narrower than ``pe_psum`` means psums are quantized (PsumQuant) or, without
  a quantizer, saturated on their way into the buffer.
* ``output``: the final outputs in the ofmap SRAM and DRAM.

Width rule (:func:`check_psum_widths`): ``psum_buffer`` may exceed ``pe_psum`` only by the bits the sum of
the K-folds can grow, ``ceil(log2(K-folds))``: the running psum is a sum of at most that many
``pe_psum``-bit fold psums, so any wider buffer bit can never be set and only costs area and energy.
Where the K-fold count is not known (an :class:`~npukit.sim.arch.Arch` is one design for every workload)
the buffer is at most ``pe_psum``. ``--psum-buffer-bits 64`` over a 32-bit ``pe_psum`` is refused.

Old names (deprecated aliases, each use warns once per call site with one :class:`DeprecationWarning`
line; the CLI prints one ``warning:`` line on stderr): ``Arch.bits.psum`` -> ``psum_buffer``,
``Arch.bits.accumulator`` -> ``pe_psum``; ``run_gemm``/``RtlConfig`` ``psum_bits`` -> ``pe_psum_bits``
and ``acc_bits`` -> ``psum_buffer_bits``; ``PsumQuantConfig`` ``bits`` -> ``psum_buffer_bits``,
``psum_bits`` -> ``pe_psum_bits`` and ``acc_bits`` (the old width of the unquantized / transfer
buffer, now ``pe_psum_bits``: accepted only when equal to it).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from .errors import ConfigError

#: The datapath widths, operands to outputs (field names of :class:`Bits`).
WIDTHS = ("input", "weight", "pe_psum", "psum_buffer", "output")
DATAFLOWS = ("ws", "os", "is")
#: How folds follow each other in time: ``scalesim`` (SCALE-Sim 3.0.0: folds back to back, each loads its
#: stationary tile) or ``double-buffered`` (the next fold's tile loads during the current fold; os: the
#: accumulators are double-buffered). :func:`cycle_count` says what the reported cycles count in each.
TIMING_MODES = ("scalesim", "double-buffered")
#: What an add does when its result does not fit its width: clamp to the range, or keep the low bits.
OVERFLOW_MODES = ("saturate", "wrap")
#: Where a psum scale applies: ``buffer`` (one scale per output row and N-tile, shared by all K-tiles:
#: the buffer holds quantized running psums) or ``transfer`` (one scale per K-tile: each fold psum is
#: quantized for the trip from the array and dequantized into a ``pe_psum``-bit running psum).
PSUM_SEMANTICS = ("buffer", "transfer")
#: The quantizer's step: ``pow2`` (2^shift: a shift and a rounding add) or ``mult_shift`` (a multiplier
#: of ``multiplier_bits`` bits and a shift).
SCALE_FORMS = ("pow2", "mult_shift")
#: Psum quantization hardware: ``psumquant`` (quantizer, feature unit and scale predictor), ``static``
#: (quantizer with stored scales), ``none`` (no quantizer: psums only saturated to the buffer width).
PSUM_POLICIES = ("psumquant", "static", "none")


@dataclass(frozen=True)
class _Bits:
    """Datapath widths in bits (see the module docstring for what each is)."""

    input: int = 8
    weight: int = 8
    pe_psum: int = 32
    psum_buffer: int = 32
    output: int = 8


#: Old ``Arch.bits`` keys (TOML ``[bits]``, ``Arch.with_`` and sweep grid keys ``bits.*``).
BITS_ALIASES = {"psum": "psum_buffer", "accumulator": "pe_psum"}
#: Old keyword arguments / flags of ``run_gemm`` and ``RtlConfig``.
GEMM_ALIASES = {"psum_bits": "pe_psum_bits", "acc_bits": "psum_buffer_bits"}
#: Old keyword arguments of ``PsumQuantConfig`` (``acc_bits`` is handled by the config itself).
PSUMQUANT_ALIASES = {"bits": "psum_buffer_bits", "psum_bits": "pe_psum_bits"}
#: Old CLI flags -> new flags, per verb.
FLAG_ALIASES = {
    "sim": {"--psum-bits": "--psum-buffer-bits"},
    "rtl": {"--psum-bits": "--pe-psum-bits", "--acc-bits": "--psum-buffer-bits"},
    "experiment": {"--bits": "--psum-buffer-bits"},  # npukit experiment psumquant's psum widths
}


def deprecated(old: str, new: str, where: str, stacklevel: int = 3) -> None:
    """Warn (one :class:`DeprecationWarning` line) that ``old`` is a deprecated name of ``new``."""
    warnings.warn(f"{where}: '{old}' is deprecated, use '{new}'", DeprecationWarning, stacklevel=stacklevel)


def rename(values: Mapping[str, Any], aliases: Mapping[str, str], where: str, stacklevel: int = 4) -> dict[str, Any]:
    """``values`` with old keys renamed to new ones (one warning per old key); both given is a ConfigError."""
    out = dict(values)
    for old, new in aliases.items():
        if old in out:
            if new in out:
                raise ConfigError(f"{where}: pass '{new}' only ('{old}' is its deprecated name)")
            deprecated(old, new, where, stacklevel)
            out[new] = out.pop(old)
    return out


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def old_keywords(aliases: Mapping[str, str], where: str) -> Callable[[F], F]:
    """Function decorator: the function also takes the old keyword names (one warning each)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **rename(kwargs, aliases, where))

        return wrapper  # type: ignore[return-value]

    return deco


def accepts_old_names(aliases: Mapping[str, str], where: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: the class's ``__init__`` also takes the old keyword names (one warning each)."""

    def deco(cls: type[T]) -> type[T]:
        cls.__init__ = old_keywords(aliases, where)(cls.__init__)  # type: ignore[misc]
        return cls

    return deco


@accepts_old_names(BITS_ALIASES, "Bits")
class Bits(_Bits):
    """Datapath widths in bits: ``input``, ``weight``, ``pe_psum``, ``psum_buffer``, ``output`` (see the
    module docstring); the old keywords ``psum`` and ``accumulator`` are deprecated aliases."""


BITS_FIELDS = tuple(f.name for f in fields(Bits))


def rename_flags(argv: list[str], verb: str, warn: Callable[[str], None]) -> list[str]:
    """``argv`` with the deprecated flags of ``verb`` replaced by the new ones; ``warn`` gets one line each."""
    table = FLAG_ALIASES.get(verb, {})
    out = []
    for arg in argv:
        flag, eq, val = arg.partition("=")
        if flag in table:
            warn(f"warning: {flag} is deprecated, use {table[flag]}")
            arg = table[flag] + eq + val
        out.append(arg)
    return out


def cycle_count(last_cycle: int, timing: str) -> int:
    """A GEMM's compute cycles as every npukit tool reports them, from the index of its last cycle.

    Cycles are numbered from 0 at the first cycle of the first fold; ``last_cycle`` is the index of
    the last cycle of the last fold's window (what the cycle-level model steps to and what the RTL's
    ``cycles`` port holds when ``done`` rises). The analytical simulator (``compute_cycles``), the
    cycle-level model (``run_gemm(...).cycles``, ``contract_cycles``) and the RTL testbench
    (``npukit rtl test``'s ``cycles_rtl``) all report this number:

    * ``scalesim``: ``last_cycle`` itself, SCALE-Sim 3.0.0's convention (its reported cycles,
      ``F*T - 1``), kept for exact parity. A 1x1 output-stationary array is the one case where this is
      below MACs / PEs (``F*K - 1`` cycles for ``F*K`` MACs).
    * ``double-buffered`` (npukit's own mode): a count of cycles, ``last_cycle + 1``; never below
      MACs / PEs (a 1x1 os array takes exactly its MACs).

    An output's leave cycle (``run_gemm(...).out_cycle``) stays an index in both timings. Raises
    :class:`ConfigError` for an unknown timing."""
    if timing == "scalesim":
        return last_cycle
    if timing == "double-buffered":
        return last_cycle + 1
    raise ConfigError(f"unknown timing mode '{timing}': use one of {', '.join(TIMING_MODES)}")


def fold_growth_bits(k_folds: int | None) -> int:
    """Bits a sum of ``k_folds`` fold psums can grow by, ceil(log2(k_folds)); 0 when unknown (None)."""
    return 0 if not k_folds or k_folds <= 1 else math.ceil(math.log2(k_folds))


def check_psum_widths(pe_psum: int, psum_buffer: int, k_folds: int | None, where: str,
                      names: tuple[str, str] = ("pe_psum", "psum_buffer"), error: type[Exception] = ConfigError) -> None:
    """Refuse a ``psum_buffer`` wider than ``pe_psum`` + :func:`fold_growth_bits` (``k_folds``: the most
    K-folds a running psum sums, None when not known) with one line naming both widths."""
    top = pe_psum + fold_growth_bits(k_folds)
    if psum_buffer > top:
        why = (f"a sum of {k_folds} K-folds of {pe_psum}-bit psums needs at most {top} bits" if top > pe_psum
               else "running psums never exceed the array's accumulator width")
        raise error(f"{where}: {names[1]} = {psum_buffer} bits is wider than {names[0]} = {pe_psum} bits allows "
                    f"({why}); use {names[1]} <= {top}")


def running_psum_bits(bits: Bits, semantics: str = "buffer", quantizer: bool = False) -> int:
    """Width (bits) running psums are held at between K-folds: ``psum_buffer``, except with a quantizer
    in ``transfer`` semantics, where every fold psum has its own scale and is dequantized into a
    ``pe_psum``-bit running psum (what transfer semantics narrows is the trip from the array, not the
    buffer)."""
    return bits.pe_psum if quantizer and semantics == "transfer" else bits.psum_buffer
