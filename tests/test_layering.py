"""The dependency rules, read from the source: CLI -> benchmarks -> experiments -> sweeps -> workloads -> models ->
kernels -> sim (rtl beside kernels, on sim only), nothing but the CLI dispatcher imports a ``_cli_*`` module, and no
package reaches into another's private modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# top-level folder -> the npukit package it is (setup.cfg's package_dir)
PACKAGES = {"sim": "npukit.sim", "models": "npukit.models", "kernels": "npukit.kernels", "rtl": "npukit.rtl",
            "workloads": "npukit.workloads", "sweeps": "npukit.sweeps",
            "experiments": "npukit.experiments", "benchmarks": "npukit.benchmarks", "npukit": "npukit"}
# what each package may import from the others
ALLOWED = {
    "npukit.sim": set(),
    "npukit.kernels": {"npukit.sim"},
    "npukit.models": {"npukit.sim", "npukit.kernels"},
    "npukit.rtl": {"npukit.sim"},
    # the tracer builds the built-in PyTorch models (torch:resnet18) of npukit.models
    "npukit.workloads": {"npukit.sim", "npukit.models"},
    # the sweep runner loads every workload form through npukit.workloads
    "npukit.sweeps": {"npukit.sim", "npukit.workloads"},
    "npukit.experiments": {"npukit.sim", "npukit.kernels", "npukit.models", "npukit.rtl", "npukit.workloads",
                           "npukit.sweeps"},
    "npukit.benchmarks": {"npukit.sim", "npukit.kernels", "npukit.models", "npukit.rtl", "npukit.workloads",
                          "npukit.sweeps", "npukit.experiments"},
}


def _imports(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """Absolute module names imported by ``path`` (relative imports resolved), with line numbers; ``source``
    stands for the file's text (probes are checked in memory, never written into the tree)."""
    pkg = PACKAGES[path.relative_to(ROOT).parts[0]]
    here = ".".join([pkg, *path.relative_to(ROOT).parts[1:-1]])
    out = []
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
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


def _violations(path: Path, source: str | None = None) -> list[str]:
    rel = path.relative_to(ROOT)
    pkg = _package_of(".".join([PACKAGES[rel.parts[0]], *rel.parts[1:-1]]))
    out = []
    for mod, line in _imports(path, source):
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


def test_the_check_can_fail() -> None:
    """Probes checked in memory as if they were files of a package (nothing is written into the tree)."""
    fake = ROOT / "experiments" / "_layering_probe.py"
    got = _violations(fake, "from npukit._cli_sim import run\nfrom npukit.models.psumquant._exec import x\n"
                            "import npukit.rtl\n")
    assert len(got) == 2 and "_cli_" in got[0] and "private" in got[1]
    assert "may import only" in _violations(ROOT / "sim" / "_layering_probe.py", "from npukit.workloads import x\n")[0]
    # the new edges point one way: sweeps and workloads may not reach up, models may not reach workloads
    assert "may import only" in _violations(ROOT / "sweeps" / "_probe.py", "import npukit.experiments\n")[0]
    assert "may import only" in _violations(ROOT / "workloads" / "_probe.py", "import npukit.sweeps\n")[0]
    assert "may import only" in _violations(ROOT / "models" / "_probe.py", "from npukit.workloads import x\n")[0]
