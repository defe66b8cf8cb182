"""The example files the README points at stay valid."""

import re
import shlex
from pathlib import Path

from npukit.cli import build_parser
from npukit.sweeps import expand_points, load_sweep_spec

ROOT = Path(__file__).resolve().parents[1]


def test_example_sweep_spec_expands():
    spec = load_sweep_spec(ROOT / "examples" / "sweep.toml")
    points = expand_points(spec)
    assert len(points) == 3 * 3 * 3 * 3 * 2  # rows x cols x dataflow x psum bits x workloads


def test_example_multicore_sweep_spec_expands():
    spec = load_sweep_spec(ROOT / "examples" / "sweep_multicore.toml")
    points = expand_points(spec)
    assert spec.multicore and len(points) == 4 * 2 * 2 * 2  # MAC cores x link widths x rows x workloads
    assert {len(p.arch.mac_cores) for p in points} == {1, 2, 4, 8}
    assert all(p.arch.dram.channels == len(p.arch.mac_cores) for p in points)  # [derived]


def _readme_commands() -> list[list[str]]:
    """Every ``npukit VERB ...`` line inside README's fenced code blocks, as argv (comments dropped)."""
    out, fenced = [], False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced and line.startswith("npukit ") and not line.startswith(("npukit --", "npukit sweep: ")):
            out.append(shlex.split(line, comments=True)[1:])
    return out


def test_every_readme_command_parses(capsys):
    """The README's command lines use only verbs, flags and choices the CLI has (argparse refuses others)."""
    commands = _readme_commands()
    assert len(commands) >= 20 and {c[0] for c in commands} >= {"sim", "sweep", "report", "rtl", "experiment"}
    bad = []
    for argv in commands:
        try:
            build_parser(argv[0]).parse_args(argv)
        except SystemExit:
            bad.append(f"{' '.join(argv)}: {capsys.readouterr().err.strip()}")
    assert not bad, "\n".join(bad)


def test_the_readme_make_targets_exist_and_ci_runs_the_test_one():
    targets = {m.group(1) for m in re.finditer(r"^([a-z]+):", (ROOT / "Makefile").read_text(), re.M)}
    named = set(re.findall(r"^make ([a-z]+)", (ROOT / "README.md").read_text(), re.M))
    assert named >= {"demo", "test"} and named <= targets, named - targets
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"
