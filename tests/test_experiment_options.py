"""Options every experiment shares: ``--arch`` is taken by each one and reaches its Config."""

import argparse

import pytest

from npukit.cli import main
from npukit.experiments import EXPERIMENTS


@pytest.mark.parametrize("exp", list(EXPERIMENTS))
def test_every_experiment_takes_arch(exp: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["experiment", exp, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--arch" in out and "--quick" in out and "smoke run" in out


@pytest.mark.parametrize("exp", ["psumquant", "omnimoe"])
def test_arch_reaches_the_config(exp: str, tmp_path) -> None:
    import importlib

    pkg = importlib.import_module(EXPERIMENTS[exp][0])
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    pkg.add_arguments(parser)
    args = parser.parse_args(["--quick", "--out", str(tmp_path / "o"), "--arch", "npu32"])
    if exp == "psumquant":
        args.energy_only = True  # skip the corpus / wheel checks: only the options are under test
    assert pkg.config_from_args(args).arch == "npu32"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_psumquant_energy_table_runs_on_the_given_arch(tmp_path, capsys) -> None:
    import csv

    out = tmp_path / "e"
    assert main(["experiment", "psumquant", "--energy-only", "--arch", "npu32", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "energy.csv").open()))
    assert rows and {r["array"] for r in rows} == {"32x32"}
    assert "arch 'npu32'" in (out / "energy_assumptions.txt").read_text()
