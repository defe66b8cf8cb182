"""The example files the README points at stay valid."""

from pathlib import Path

from npukit.sweeps import expand_points, load_sweep_spec

ROOT = Path(__file__).resolve().parents[1]


def test_example_sweep_spec_expands():
    spec = load_sweep_spec(ROOT / "examples" / "sweep.toml")
    points = expand_points(spec)
    assert len(points) == 3 * 3 * 3 * 3 * 2  # rows x cols x dataflow x psum bits x workloads


def test_readme_names_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.strip().splitlines()[-1] == "make test"
