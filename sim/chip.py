"""One ``--arch`` value -> the chip it names: one array (:class:`~npukit.sim.arch.Arch`) or several cores
(:class:`~npukit.sim.multicore.MultiCoreArch`), and the energy table that prices it.

The forms, as ``npukit sim --arch`` takes them: a built-in single-core arch (``npu128``, ``npu32``), an npukit
``.toml`` or a SCALE-Sim ``.cfg`` (one array); a built-in multi-core preset (``quad128``, ``hetero4``, ``tpu_v4``),
a ``.toml`` with ``[[core]]`` tables, or ``stream:CHIP.yaml`` (a Stream hardware file; several cores).
``zigzag:HW.yaml`` is a loop-nest description that only ``npukit sim`` runs (it has no systolic-array model), so
:func:`load_chip` refuses it with a :class:`~npukit.sim.errors.ConfigError`.
"""

from __future__ import annotations

from .arch import Arch, load_arch
from .bounded import short
from .energy import EnergyTable, load_table
from .errors import ConfigError
from .multicore import MultiCoreArch, is_multicore_toml, load_multicore_arch


def is_multicore_spec(spec: str) -> bool:
    """True when ``spec`` names a multi-core chip (a preset, a ``.toml`` with ``[[core]]`` tables or
    ``stream:CHIP.yaml``)."""
    return spec.startswith("stream:") or is_multicore_toml(spec)


def check_arch_spec(spec: str, zigzag: bool = True) -> None:
    """ConfigError naming every form an arch takes when ``spec`` is neither a built-in nor something that looks like a
    file (a file's reader names what is wrong with it; a mistyped multi-core preset would otherwise get the
    single-core reader's message, which offers only its own built-ins); ``zigzag``: name ``zigzag:HW.yaml`` among
    the forms (``npukit sim`` runs it; :func:`load_chip` does not)."""
    from pathlib import Path

    from .arch import BUILTIN_ARCHS
    from .multicore import BUILTIN_MULTICORE

    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"an arch must be a name or a file, got {spec!r}")
    try:
        exists = Path(spec).exists()
    except (OSError, ValueError) as exc:  # a name too long for the file system, a NUL byte
        raise ConfigError(f"--arch {short(spec)} is not a usable name or path: {getattr(exc, 'strerror', None) or exc}"
                          ) from None
    if spec in BUILTIN_ARCHS or exists or Path(spec).suffix or "/" in spec or "\\" in spec:
        return
    forms = "a .toml, a SCALE-Sim .cfg, zigzag:HW.yaml or stream:CHIP.yaml" if zigzag else \
        "a .toml, a SCALE-Sim .cfg or stream:CHIP.yaml"
    raise ConfigError(f"--arch '{spec}' is neither a built-in ({', '.join(BUILTIN_ARCHS + BUILTIN_MULTICORE)}) nor a "
                      f"file: pass {forms}")


def load_chip(spec: str, warnings: list[str] | None = None) -> Arch | MultiCoreArch:
    """The chip ``spec`` names (see the module docstring); ``warnings``: given, a Stream file's lines on what npukit
    does not model are appended to it instead of printed to stderr. Bad input raises ConfigError."""
    if not isinstance(spec, str) or not spec:
        check_arch_spec(spec)  # refuses it in one line
    if spec.startswith("zigzag:"):
        raise ConfigError(f"'{spec}' is a ZigZag loop-nest description, which only `npukit sim` runs; pass a "
                          "built-in, a .toml, a SCALE-Sim .cfg or stream:CHIP.yaml")
    if spec.startswith("stream:"):
        from .stream_io import load_stream_hardware

        return load_stream_hardware(spec.split(":", 1)[1], warnings=warnings)
    if is_multicore_toml(spec):
        return load_multicore_arch(spec)
    check_arch_spec(spec, zigzag=False)
    return load_arch(spec)


def chip_table(chip: Arch | MultiCoreArch) -> EnergyTable:
    """The energy table that prices ``chip``: a Stream chip's own costs, else its (first core's) named table."""
    if isinstance(chip, MultiCoreArch) and chip.table is not None:
        return chip.table
    return load_table(chip.energy_table)
