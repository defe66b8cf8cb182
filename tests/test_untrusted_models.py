"""Model inputs that must not be trusted: configs asking for custom code (never imported, never a prompt),
hand-edited trace-cache entries (checked against their checksum and traced again), ONNX opsets the onnx
package does not define, and results that overflow (one line naming the component, nothing written)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.sim import Layer, Ledger, LedgerError, VectorOp, Workload, WorkloadError
from npukit.workloads import _trace_cache as tc
from npukit.workloads import real_models, workload_from_spec

TINY_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 256,
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------------------------------ custom code
@pytest.mark.parametrize("key,value", [("auto_map", {"AutoModelForCausalLM": "evil.EvilModel"}),
                                       ("trust_remote_code", True)])
def test_config_asking_for_custom_code_is_refused_without_import_or_prompt(key, value, tmp_path, monkeypatch,
                                                                            capsys) -> None:
    (tmp_path / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('x')\n")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY_LLAMA, key: value}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))  # a prompt would read 'y' here
    monkeypatch.syspath_prepend(str(tmp_path))
    refused(["sim", "--workload", f"hf:{cfg}", "--out", str(tmp_path / "o")], capsys, key, "custom model code")
    assert not (tmp_path / "ran").exists() and "evil" not in sys.modules and not (tmp_path / "o").exists()


def test_config_with_huge_integer_is_one_line(tmp_path, capsys) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA).replace('"hidden_size": 64', '"hidden_size": ' + "9" * 401))
    refused(["sim", "--workload", f"hf:{cfg}", "--out", str(tmp_path / "o")], capsys, "out of range")


def test_remote_code_is_never_trusted_in_the_source() -> None:
    """Every transformers/diffusers model or config builder in models/ passes trust_remote_code=False."""
    import re

    root = Path(real_models.__file__).resolve().parent
    for path in root.glob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.(from_pretrained|from_config)\(", line) and "import" not in line:
                assert "NO_REMOTE_CODE" in line or "auto_kwargs" in line or "clean" in line, f"{path.name}:{n}: {line}"


# ------------------------------------------------------------------------------------------ trace cache
def _traced(monkeypatch, tmp_path):
    calls: list[int] = []

    def fake_trace(library, cfg, opts, name, spec, repeats=False, **_):
        calls.append(1)
        return Workload(name, [Layer("fc", opts["seq"], 8, 8), VectorOp("act", "silu", 8 * opts["seq"])], {})

    monkeypatch.setattr(real_models, "_trace", fake_trace)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_LLAMA))
    return calls, f"hf:{cfg}:seq=16"


@pytest.mark.parametrize("edit", ["K", "empty", "huge-M", "name"])
def test_hand_edited_cache_entry_is_traced_again(edit, tmp_path, monkeypatch) -> None:
    calls, spec = _traced(monkeypatch, tmp_path)
    first = workload_from_spec(spec)
    (entry,) = (tmp_path / "cache" / "traces").glob("*.json")
    e = json.loads(entry.read_text())
    d = e["body"]  # the workload inside the checksummed entry: edited, the checksum left as it was
    if edit == "K":
        d["layers"][0]["K"] = 9
    elif edit == "empty":
        d["layers"] = []
    elif edit == "huge-M":
        d["layers"][0]["M"] = 10**30
    else:
        d["layers"][1]["name"] = "other"
    entry.write_text(json.dumps(e))
    assert tc.load(entry) is None
    again = workload_from_spec(spec)
    assert again == first and len(calls) == 2  # recomputed, not used as edited
    assert tc.load(entry) == first  # and rewritten


def test_huge_layer_dimension_refused() -> None:
    with pytest.raises(WorkloadError, match="up to"):
        Layer("x", 10**30, 8, 8)


# ------------------------------------------------------------------------------------------ ONNX opsets
def test_unknown_onnx_opset_refused(tmp_path, capsys) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    refused(["sim", "--workload", str(path), "--out", str(tmp_path / "o")], capsys, "opset 99")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ finite results
def test_energy_overflow_names_the_component() -> None:
    led = Ledger()
    led.declare("dram", kind="dram")
    with led.scope("w/l"):
        led.record("dram", "dram_read", 64, 1.7e308)
        led.record("pe_array", "mac", (8, 8, 32), 1)
    for call in (lambda: led.energy("horowitz45"), lambda: led.energy_by("horowitz45"),
                 lambda: led.energy_matrix("horowitz45")):
        with pytest.raises(LedgerError, match="dram") as exc:
            call()
        assert "inf" in str(exc.value) and "\n" not in str(exc.value)


def test_huge_energy_per_access_is_one_line_and_writes_nothing(tmp_path, capsys) -> None:
    table = (Path(__file__).resolve().parents[1] / "sim" / "tables" / "horowitz45.toml").read_text()
    t = tmp_path / "t.toml"
    assert "pj_per_access = 1950.0" in table
    t.write_text(table.replace("pj_per_access = 1950.0", "pj_per_access = 1e308", 1))
    err = refused(["sim", "--arch", "npu32", "--workload", "gemm:M=8,N=8,K=8", "--table", str(t), "--out",
                   str(tmp_path / "o")], capsys, "dram")
    assert "inf" not in err.replace("info", "")
    assert capsys.readouterr().out == "" and not (tmp_path / "o").exists()


def test_overflowing_ledger_never_reaches_matplotlib(tmp_path, monkeypatch) -> None:
    import npukit.sim.report_figures as figs
    from npukit.sim import write_report

    def reached(*_a, **_k):
        pytest.fail("an overflowing ledger reached the figures")

    for name in dir(figs):
        if not name.startswith("_") and callable(getattr(figs, name)) and getattr(getattr(figs, name), "__module__",
                                                                                    "") == figs.__name__:
            monkeypatch.setattr(figs, name, reached)
    led = Ledger()
    with led.scope("w/l"):
        led.record("dram", "dram_read", 64, 1.7e308)
        led.add_cycles(10)
    with pytest.raises(LedgerError, match="dram"):
        write_report([led], tmp_path / "r", table="horowitz45")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
