"""One cache root for every npukit cache: ``$NPUKIT_CACHE_DIR`` (old name ``NPUKIT_CACHE`` still read, warned)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from npukit.experiments.psumquant._cache import cache_dir as weights_dir
from npukit.sim import cache_root, cache_subdir
from npukit.workloads._trace_cache import cache_dir as traces_dir


def test_every_cache_lives_under_the_one_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NPUKIT_CACHE", raising=False)
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path
    assert traces_dir() == tmp_path / "traces" == cache_subdir("traces")
    assert weights_dir() == tmp_path / "psumquant"


def test_default_root_is_in_the_home_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPUKIT_CACHE", raising=False)
    monkeypatch.delenv("NPUKIT_CACHE_DIR", raising=False)
    assert cache_root() == Path.home() / ".cache" / "npukit"


def test_old_name_is_read_with_a_warning_and_the_new_one_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NPUKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("NPUKIT_CACHE", str(tmp_path / "old"))
    with pytest.warns(DeprecationWarning, match="NPUKIT_CACHE_DIR"):
        assert cache_root() == tmp_path / "old"
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "new"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_root() == tmp_path / "new"
