"""The dependency rules, read from the source: CLI -> benchmarks -> experiments -> models/kernels -> sim, nothing but the
CLI dispatcher imports a ``_cli_*`` module, and no package reaches into another's private modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# top-level folder -> the npukit package it is (setup.cfg's package_dir)
PACKAGES = {"sim": "npukit.sim", "models": "npukit.models", "kernels": "npukit.kernels", "rtl": "npukit.rtl",
            "experiments": "npukit.experiments", "benchmarks": "npukit.benchmarks", "npukit": "npukit"}
# what each package may import from the others
ALLOWED = {
    "npukit.sim": set(),
    "npukit.kernels": {"npukit.sim"},
    "npukit.models": {"npukit.sim", "npukit.kernels"},
    "npukit.rtl": {"npukit.sim"},
    "npukit.experiments": {"npukit.sim", "npukit.kernels", "npukit.models", "npukit.rtl"},
    "npukit.benchmarks": {"npukit.sim", "npukit.kernels", "npukit.models", "npukit.rtl", "npukit.experiments"},
}


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names imported by ``path`` (relative imports resolved), with line numbers."""
    pkg = PACKAGES[path.relative_to(ROOT).parts[0]]
    here = ".".join([pkg, *path.relative_to(ROOT).parts[1:-1]])
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out += [(f"{base}.{a.name}" if not node.module or node.level else base, node.lineno) for a in node.names]
    return [(m, n) for m, n in out if m.startswith("npukit")]


def _files() -> list[Path]:
    """Every module of the packages; in benchmarks/ only the ``npukit bench`` modules (the bench_*.py scripts
    beside them run stand-alone and are imported by nothing)."""
    return sorted(p for top in PACKAGES for p in (ROOT / top).rglob("*.py")
                  if top != "benchmarks" or not p.name.startswith(("bench_", "_peers")))


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and f"{parts[0]}.{parts[1]}" in ALLOWED else "npukit"


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT)
    pkg = _package_of(".".join([PACKAGES[rel.parts[0]], *rel.parts[1:-1]]))
    out = []
    for mod, line in _imports(path):
        where = f"{rel}:{line} imports {mod}"
        target = _package_of(mod)
        if "._cli_" in mod and path != ROOT / "npukit" / "cli.py":
            out.append(f"{where}: only npukit/cli.py dispatches to _cli_ modules")
        if target != pkg and any(p.startswith("_") for p in mod.split(".")[2:]):
            out.append(f"{where}: use {target}'s public API (its __init__ or a public module), not a private module")
        if pkg != "npukit" and target not in (pkg, "npukit") and target not in ALLOWED[pkg]:
            out.append(f"{where}: {pkg} may import only {sorted(ALLOWED[pkg]) or 'nothing else of npukit'}")
    return out


def test_imports_follow_the_layers() -> None:
    bad = [v for path in _files() for v in _violations(path)]
    assert not bad, "\n".join(bad)


def test_the_check_can_fail(tmp_path: Path) -> None:
    fake = ROOT / "experiments" / "_layering_probe.py"
    fake.write_text("from npukit._cli_sim import run\nfrom npukit.models._psum_exec import x\nimport npukit.rtl\n")
    try:
        got = _violations(fake)
    finally:
        fake.unlink()
    assert len(got) == 2 and "_cli_" in got[0] and "private" in got[1]
    sim_probe = ROOT / "sim" / "_layering_probe.py"
    sim_probe.write_text("from npukit.models import onnx_workload\n")
    try:
        assert "may import only" in _violations(sim_probe)[0]
    finally:
        sim_probe.unlink()
