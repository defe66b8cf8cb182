"""Design statistics of the RTL from pyverilog's dataflow analysis, cross-checkable with yosys.

:func:`rtl_stats` elaborates a chosen top (default ``npu_top``) at the parameters of an
:class:`RtlConfig` with pyverilog's dataflow analyzer (module, signal and bind visitors) and
reports, per module: instance count, parameters (resolved values), ports (direction, bits) and
flip-flop bits (a ``reg`` bound in an edge-triggered ``always`` block; a memory counts width x
depth). Per-instance numbers are the module's own registers; ``ff_bits`` of the report is the
whole hierarchy. The operand SRAMs (module ``sram_sp``) are not flip-flops: their memory counts as
``sram_bits`` (width x 2**AW per instance) and their read register as the SRAM's synchronous read
port, so ``ff_bits`` is the datapath's. :func:`yosys_counts` runs yosys 0.23's ``synth -top X`` flow
with the memories marked ``npukit_sram`` kept as memory cells (``memory_map -attr !npukit_sram``; yosys
merges the read register into the cell's read port) and counts the flip-flop cells (every DFF cell is
one bit) and the memory cells' bits for the cross-check.

pyverilog runs ``iverilog -E`` and writes its parser tables into the working directory, so the
analysis runs in a temporary folder. pyverilog 1.3 evaluates a module's derived parameters and
localparams (``Y_W = max(...)``, ``SUM_W = ...``) from the parameter *defaults* even when an instance
overrides them, so the analysis runs on temporary copies of the sources whose ``parameter X = ...``
defaults are set to the values every instance of that module gets (one parameter set per module
in this design); the analyzed top then needs no overrides. Its scope chains deep-copy on every append, which makes large
arrays slow; :func:`_fast_scope_chains` swaps in an equivalent shallow copy (scope labels are never
mutated after construction) for the duration of one analysis. Analysis time still grows with the
PE count (about 2 s for 4x4, 8 s for 16x16 on one core).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from npukit.sim.errors import ConfigError

from ._config import DESIGN_FILES, RtlConfig, source_paths
from ._runner import RtlSimError

#: module -> the Verilog files needed to elaborate it
TOPS = {
    "npu_top": DESIGN_FILES,
    "systolic_array": ("pe.v", "systolic_array.v"),
    "pe": ("pe.v",),
    "psum_quantizer": ("psum_quantizer.v",),
    "accumulator": ("accumulator.v",),
}
#: Modules that are SRAM macros (their memory and read register are SRAM bits, not flip-flops).
SRAM_MODULES = ("sram_sp",)


def module_parameters(cfg: RtlConfig, top: str) -> dict[str, int]:
    """Verilog parameters of module ``top`` as npu_top would instantiate it for ``cfg``."""
    p = cfg.parameters()
    if top == "npu_top":
        return p
    if top == "systolic_array":
        return {k: p[k] for k in ("ROWS", "COLS", "DATA_W", "PSUM_W", "DATAFLOW", "OVERFLOW", "TIMING")}
    if top == "pe":
        return {k: p[k] for k in ("DATA_W", "PSUM_W", "DATAFLOW", "OVERFLOW", "TIMING")}
    if top == "psum_quantizer":
        return {"IN_W": p["PSUM_W"], "MULT_W": p["MULT_W"], "OUT_W": p["ACC_W"], "SHIFT_W": p["SHIFT_W"]}
    if top == "accumulator":
        y_w = max(p["PSUM_W"], p["ACC_W"])
        ws = p["DATAFLOW"] == 0
        return {"IN_W": y_w, "ACC_W": p["ACC_W"] if ws else y_w, "AW": p["ACC_AW"], "OVERFLOW": p["OVERFLOW"],
                "USE_MEM": 1 if ws else 0}
    raise ConfigError(f"unknown RTL module '{top}'; choose one of {', '.join(TOPS)}")


@contextlib.contextmanager
def _fast_scope_chains() -> Iterator[None]:
    """Temporarily replace pyverilog's ScopeChain.__add__ (deepcopy) by an equivalent shallow copy."""
    import pyverilog.utils.scope as scope

    original = scope.ScopeChain.__add__

    def add(self, r):
        if isinstance(r, scope.ScopeLabel):
            return scope.ScopeChain(self.scopechain + [r])
        if isinstance(r, scope.ScopeChain):
            return scope.ScopeChain(self.scopechain + list(r.scopechain))
        return original(self, r)

    scope.ScopeChain.__add__ = add
    try:
        yield
    finally:
        scope.ScopeChain.__add__ = original


@contextlib.contextmanager
def _in_dir(path: str) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _const(opt: Any, tree: Any, what: str) -> int:
    v = opt.optimize(tree)
    if not hasattr(v, "value"):
        raise RtlSimError(f"pyverilog could not resolve {what} to a constant ({v})")
    return int(v.value)


_PARAM_DEFAULT = re.compile(r"^(\s*parameter\s+)(\w+)(\s*=\s*)([^,\n]*?)(\s*,?\s*(?://.*)?)$", re.M)


def _specialize(text: str, params: dict[str, int]) -> str:
    """Verilog text with the defaults of the named header parameters replaced by ``params``' values."""
    seen: set[str] = set()

    def sub(m: re.Match) -> str:
        name = m.group(2)
        if name not in params:
            return m.group(0)
        seen.add(name)
        return f"{m.group(1)}{name}{m.group(3)}{int(params[name])}{m.group(5)}"

    out = _PARAM_DEFAULT.sub(sub, text)
    missing = set(params) - seen
    if missing:
        raise RtlSimError(f"parameters {sorted(missing)} not found in the Verilog header")
    return out


def _analyze(top: str, module_params: dict[str, dict[str, int]], fast: bool = True) -> tuple[dict, dict, tuple, Any]:
    """(terms, binds, instances, optimizer) of ``top``, every module specialized to ``module_params``."""
    if shutil.which("iverilog") is None:
        raise RtlSimError("iverilog not found (pyverilog preprocesses with iverilog -E); install Icarus Verilog 11")
    from pyverilog.dataflow.bindvisitor import BindVisitor
    from pyverilog.dataflow.modulevisitor import ModuleVisitor
    from pyverilog.dataflow.signalvisitor import SignalVisitor
    from pyverilog.vparser.parser import VerilogCodeParser

    with tempfile.TemporaryDirectory(prefix="npukit-pyverilog-") as tmp, _in_dir(tmp):
        files = []
        for src in source_paths(TOPS[top]):
            dst = Path(tmp) / src.name
            # (sram_sp: no derived parameters; each instance sets WIDTH and AW)
            dst.write_text(_specialize(src.read_text(), module_params.get(src.stem, {})))
            files.append(str(dst))
        ctx = _fast_scope_chains() if fast else contextlib.nullcontext()
        with ctx:
            parser = VerilogCodeParser(files, preprocess_output=str(Path(tmp) / "pp.out"), outputdir=tmp, debug=False)
            ast = parser.parse()
            modules = ModuleVisitor()
            modules.visit(ast)
            table = modules.get_moduleinfotable()
            signals = SignalVisitor(table, top)
            signals.start_visit()
            binder = BindVisitor(table, top, signals.getFrameTable(), noreorder=False)
            binder.start_visit()
        flow = binder.getDataflows()
        return flow.getTerms(), flow.getBinddict(), binder.getFrameTable().getAllInstances(), binder.optimizer


def rtl_stats(cfg: RtlConfig | None = None, top: str = "npu_top", fast: bool = True, **config: Any) -> dict:
    """Modules, ports, parameters and flip-flop bits of ``top`` at ``cfg``'s parameters (pyverilog).

    ``cfg`` or keyword arguments of :class:`RtlConfig` (``rows=8, cols=8, pe_psum_bits=16, ...``;
    default 4x4, D=8, P=32, ws, saturate). ``top``: npu_top, systolic_array, pe, psum_quantizer or
    accumulator. ``fast=False`` runs pyverilog unpatched (slower, same result).

    Returns ``{"top", "parameters", "modules": [{"module", "instances", "parameters", "ports":
    [{"name", "direction", "bits"}], "ff_bits" (own, per instance), "ff_bits_total" (own, all
    instances), "sram_bits_total" (SRAM memory bits, all instances)}], "ff_bits" (whole hierarchy,
    without the SRAMs), "sram_bits" (whole hierarchy), "analysis_s"}``; modules in elaboration order."""
    if cfg is not None and config:
        raise ConfigError("pass either an RtlConfig or its keyword arguments, not both")
    cfg = cfg or RtlConfig(**config)
    params = module_parameters(cfg, top)
    t0 = time.perf_counter()
    per_module = {Path(f).stem: module_parameters(cfg, Path(f).stem) for f in TOPS[top]
                  if Path(f).stem not in SRAM_MODULES}
    terms, binds, instances, opt = _analyze(top, per_module, fast=fast)
    inst_scopes = [(tuple(str(s) for s in sc_), mod) for sc_, mod in instances]
    inst_scopes.sort(key=lambda x: -len(x[0]))  # deepest first: a term belongs to its deepest instance

    def owner(name: Any) -> tuple[str, ...]:
        parts = tuple(str(s) for s in name)
        for scope, _ in inst_scopes:
            if parts[: len(scope)] == scope:
                return scope
        raise RtlSimError(f"pyverilog term {name} belongs to no instance")

    module_of = dict(inst_scopes)
    own_ff: dict[tuple[str, ...], int] = {s: 0 for s, _ in inst_scopes}
    own_sram: dict[tuple[str, ...], int] = {s: 0 for s, _ in inst_scopes}
    ports: dict[tuple[str, ...], list[dict]] = {s: [] for s, _ in inst_scopes}
    pvals: dict[tuple[str, ...], dict[str, int]] = {s: {} for s, _ in inst_scopes}
    for name, term in terms.items():
        tt = term.termtype
        scope = owner(name)
        local = len(tuple(name)) == len(scope) + 1
        if local and ("Parameter" in tt or "Localparam" in tt):
            value = opt.getConstant(name) if opt.hasConstant(name) else None
            if value is None or not hasattr(value, "value"):
                raise RtlSimError(f"pyverilog could not resolve parameter {name}")
            pvals[scope][str(tuple(name)[-1])] = int(value.value)
            continue
        if "Parameter" in tt or "Localparam" in tt or "Genvar" in tt:
            continue
        width = _const(opt, term.msb, f"{name} msb") - _const(opt, term.lsb, f"{name} lsb") + 1 if term.msb is not None else 1
        if local and ("Input" in tt or "Output" in tt or "Inout" in tt):
            direction = "input" if "Input" in tt else "output" if "Output" in tt else "inout"
            ports[scope].append({"name": str(tuple(name)[-1]), "direction": direction, "bits": width})
        if "Reg" in tt and any(b.isClockEdge() for b in binds.get(name, [])):
            depth = 1
            for lo_hi in term.dims or ():
                depth *= abs(_const(opt, lo_hi[1], f"{name} dim") - _const(opt, lo_hi[0], f"{name} dim")) + 1
            if module_of[scope] not in SRAM_MODULES:
                own_ff[scope] += width * depth
            elif term.dims:  # the SRAM's memory (its read register is the read port: no bits of its own)
                own_sram[scope] += width * depth
    inst_scopes.sort(key=lambda x: (len(x[0]), x[0]))
    modules: dict[str, dict] = {}
    for scope, mod in inst_scopes:
        m = modules.get(mod)
        if m is None:
            modules[mod] = {"module": mod, "instances": 1, "parameters": pvals[scope], "ports": ports[scope],
                            "ff_bits": own_ff[scope], "ff_bits_total": own_ff[scope], "sram_bits_total": own_sram[scope]}
        else:
            m["instances"] += 1
            m["ff_bits_total"] += own_ff[scope]
            m["sram_bits_total"] += own_sram[scope]
            if own_ff[scope] != m["ff_bits"]:
                m["ff_bits"] = None  # instances differ (not in this design: all instances share parameters)
    return {"top": top, "parameters": params, "modules": list(modules.values()),
            "ff_bits": sum(own_ff.values()), "sram_bits": sum(own_sram.values()), "analysis_s": time.perf_counter() - t0}


_DFF_CELL = re.compile(r"^\s+(\$_[A-Z]*DFF[A-Z0-9_]*|\$_DLATCH[A-Z0-9_]*|\$_SR[A-Z0-9_]*)\s+(\d+)\s*$")


_MEM_PARAM = re.compile(r"^\s+parameter \\(SIZE|WIDTH) (\d+)\s*$")
#: yosys synth's script (0.23) with memory_map told to keep the SRAM macros as memory cells, then the
#: design flattened so that one ``stat`` and one ``dump`` see every cell of every instance
_SYNTH = ("synth -top {top} -run :fine; opt -fast -full; memory_map -attr !npukit_sram; opt -full; techmap; "
          "opt -fast; abc -fast; opt -fast; flatten; dump t:$mem_v2; stat")


def yosys_ff_bits(top: str, params: dict[str, int], timeout_s: float = 600) -> int:
    """Flip-flop bits of ``top`` after yosys synth (see :func:`yosys_counts`)."""
    return yosys_counts(top, params, timeout_s)["ff_bits"]


def yosys_counts(top: str, params: dict[str, int], timeout_s: float = 600) -> dict[str, int]:
    """``{"ff_bits", "memory_bits"}`` of ``top`` after yosys synth (``synth -top X``'s passes, the SRAM
    memories kept as memory cells): the single-bit flip-flop/latch cells of the whole design and the
    bits (WIDTH x SIZE) of its memory cells."""
    exe = shutil.which("yosys")
    if exe is None:
        raise RtlSimError("yosys not found; install yosys 0.23 (Debian: apt-get install yosys)")
    files = " ".join(str(p) for p in source_paths(TOPS[top]))
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    script = f"read_verilog {files}; chparam {chparam} {top}; " + _SYNTH.format(top=top)
    with tempfile.TemporaryDirectory(prefix="npukit-yosys-") as tmp:
        proc = subprocess.run([exe, "-p", script], capture_output=True, text=True, cwd=tmp, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RtlSimError(f"yosys failed on {top}: {' | '.join(tail)}")
    text = proc.stdout
    mem_bits, size = 0, None
    for line in text.split("=== ")[0].splitlines():  # the dump of the memory cells (before stat's sections)
        m = _MEM_PARAM.match(line)
        if m and m.group(1) == "SIZE":
            size = int(m.group(2))
        elif m and size is not None:  # WIDTH follows SIZE in each cell's sorted parameter list
            mem_bits += size * int(m.group(2))
            size = None
    section = text.split("===")[-1]
    ff = sum(int(m.group(2)) for line in section.splitlines() if (m := _DFF_CELL.match(line)))
    return {"ff_bits": ff, "memory_bits": mem_bits}
