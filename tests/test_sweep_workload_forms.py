"""Sweeps over every workload form (a built-in real model with options, an ``hf:`` config, an ONNX file) run
through the one loader: relative files read beside the spec, each workload loaded once per distinct spec, and the
workers handed the traced workload (never the spec to trace again), with equal rows locally and on Dask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import npukit.sweeps as sweeps
import npukit.sweeps._spec as spec_mod
from npukit.cli import main
from npukit.sim import ConfigError
from npukit.sweeps import expand_points, load_sweep_spec, read_rows, run_points

FORMS = ["llama-3.1-8b:phase=decode,kv=16", "hf:cfg/tiny.json:seq=8", "models/tiny.onnx"]
TINY_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
}
SKIP = {"wall_s", "created_at"}
pytestmark = pytest.mark.slow  # traces a real model and a transformers config (about 10 s cold)


def _onnx(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((32, 24), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 24])], [w])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def spec_file(tmp_path, monkeypatch) -> Path:
    """A spec in its own folder whose files are relative to it; the current folder is elsewhere."""
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "study"
    (folder / "cfg").mkdir(parents=True)
    (folder / "cfg" / "tiny.json").write_text(json.dumps(TINY_LLAMA))
    _onnx(folder / "models" / "tiny.onnx")
    spec = folder / "mixed.toml"
    spec.write_text(f'[sweep]\narch = "npu32"\nworkloads = {json.dumps(FORMS)}\n[grid]\nrows = [16, 32]\n')
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return spec


def _rows(db: Path) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k not in SKIP} for r in read_rows(db)}


def test_mixed_forms_load_once_and_workers_never_reload(spec_file, tmp_path, monkeypatch):
    calls: list[str] = []
    real = spec_mod.load_workload
    monkeypatch.setattr(spec_mod, "load_workload", lambda s, **kw: calls.append(s) or real(s, **kw))
    spec_mod._load_once.cache_clear()
    points = expand_points(load_sweep_spec(spec_file))
    assert len(points) == 6 and len(calls) == 3  # one load per distinct workload, not per point
    assert all(p.loaded is not None for p in points)
    assert expand_points(load_sweep_spec(spec_file)) and len(calls) == 3  # a second expansion (a search trial) reuses

    def refuse(*a, **k):
        raise AssertionError("a worker loaded a workload from its spec")

    monkeypatch.setattr(sweeps, "load_workload", refuse)
    s = run_points(points, tmp_path / "a.sqlite", workers=1)
    assert s.computed == 6
    rows = read_rows(tmp_path / "a.sqlite")
    macs = {r["workload"]: r["macs"] for r in rows}
    assert set(macs) == set(FORMS)
    assert macs["models/tiny.onnx"] == 8 * 32 * 24
    for p in points:
        assert macs[p.workload] == p.loaded.macs


def test_a_traced_model_is_keyed_by_its_trace(spec_file, monkeypatch):
    """Another trace of the same spec (a new transformers, say) gives new keys; the ONNX file's keys stay."""
    from dataclasses import replace

    before = {p.workload: p.key for p in expand_points(load_sweep_spec(spec_file))}
    real = spec_mod._load_once

    def retraced(path, digest):
        wl = real(path, digest)
        if not path.startswith("hf:"):
            return wl
        return type(wl)(wl.name, [replace(wl.layers[0], batch=wl.layers[0].batch + 1), *wl.layers[1:]], wl.meta)

    monkeypatch.setattr(spec_mod, "_load_once", retraced)
    after = {p.workload: p.key for p in expand_points(load_sweep_spec(spec_file))}
    assert after["hf:cfg/tiny.json:seq=8"] != before["hf:cfg/tiny.json:seq=8"]
    assert after["models/tiny.onnx"] == before["models/tiny.onnx"]


def test_relative_files_resolve_against_the_spec_and_code_forms_are_refused(spec_file, tmp_path):
    points = expand_points(load_sweep_spec(spec_file))
    for p in points:
        if "tiny" in p.workload:
            assert str(spec_file.parent) in p.workload_path
    bad = spec_file.parent / "code.toml"
    (spec_file.parent / "m.py").write_text("def make():\n    return None\n")
    bad.write_text('[sweep]\narch = "npu32"\nworkloads = ["m.py:make"]\n[grid]\nrows = [16]\n')
    with pytest.raises(ConfigError, match="refused here") as e:
        expand_points(load_sweep_spec(bad))
    assert "\n" not in str(e.value)


def test_cli_sweep_of_mixed_forms(spec_file, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["sweep", str(spec_file), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert {r["workload"] for r in read_rows(out / "sweep.sqlite")} == set(FORMS)


@pytest.mark.slow
def test_mixed_forms_equal_rows_locally_and_on_dask(spec_file, tmp_path, capsys):
    pytest.importorskip("distributed")
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert main(["sweep", str(spec_file), "--out", str(local), "--workers", "1", "--no-progress"]) == 0
    assert main(["sweep", str(spec_file), "--out", str(dask), "--dask-local", "2", "--no-progress"]) == 0
    a, b = _rows(local / "sweep.sqlite"), _rows(dask / "sweep.sqlite")
    assert len(a) == 6 and a == b
