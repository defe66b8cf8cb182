"""``npukit experiment omnimoe`` options: seeds, optimizer recipe and expert learning-rate factor are
validated before any work (exit 2, one line, nothing written) and reach the Config."""

from __future__ import annotations

import argparse

import pytest

from npukit.cli import main


@pytest.mark.parametrize("argv,msg", [
    (["--seeds", "0"], "--seeds"),
    (["--expert-lr", "0"], "--expert-lr"),
    (["--expert-lr", "nan"], "--expert-lr"),
])
def test_bad_options_exit_2_and_write_nothing(tmp_path, capsys, argv, msg) -> None:
    out = tmp_path / "o"
    assert main(["experiment", "omnimoe", "--quick", "--out", str(out), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()


def test_unknown_recipe_is_a_usage_error(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["experiment", "omnimoe", "--quick", "--out", str(tmp_path / "o"), "--recipe", "adam"])
    assert exc.value.code == 2 and "--recipe" in capsys.readouterr().err


def test_options_reach_the_config(tmp_path) -> None:
    from npukit.experiments.omnimoe import _config

    ns = argparse.Namespace(quick=True, out=str(tmp_path / "o"), steps=None, threads=None, seeds=2, recipe="uniform",
                            expert_lr=None)
    cfg = _config.config_from_args(ns)
    assert (cfg.seeds, cfg.recipe, cfg.expert_lr) == (2, "uniform", 3.0)
    cfg = _config.config_from_args(argparse.Namespace(quick=True, out=str(tmp_path / "o")))
    assert (cfg.seeds, cfg.recipe, cfg.expert_lr) == (1, "sparse", 3.0)
