"""An ONNX model with dynamic dims in a sweep spec: its dims fixed by name as options (``FILE.onnx:DIM=N``), read
beside the spec, one row per value, and the same dims through the API and ``npukit sim`` (where the file name
carries them)."""

from __future__ import annotations

import pytest

from npukit.cli import main
from npukit.sim import WorkloadError
from npukit.sweeps import expand_points, load_sweep_spec, read_rows, run_points
from npukit.workloads import load_workload

onnx = pytest.importorskip("onnx")


def _dynamic(path) -> None:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((32, 24), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 24])], [w])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_onnx_dims_as_options_in_a_sweep_the_api_and_sim(tmp_path, monkeypatch, capsys) -> None:
    _dynamic(tmp_path / "study" / "m" / "dyn.onnx")
    spec = tmp_path / "study" / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["m/dyn.onnx:batch_size=4", "m/dyn.onnx:batch_size=16"]\n'
                    '[grid]\nrows = [16]\n')
    monkeypatch.chdir(tmp_path)
    run_points(expand_points(load_sweep_spec(spec)), tmp_path / "s.sqlite", workers=1)
    macs = {r["workload"]: r["macs"] for r in read_rows(tmp_path / "s.sqlite")}
    assert macs == {"m/dyn.onnx:batch_size=4": 4 * 32 * 24, "m/dyn.onnx:batch_size=16": 16 * 32 * 24}
    path = "study/m/dyn.onnx"
    assert load_workload(f"{path}:batch_size=4").macs == load_workload(path, input_shape="batch_size=4").macs
    with pytest.raises(WorkloadError, match="not both"):
        load_workload(f"{path}:batch_size=4", input_shape="batch_size=4")
    assert main(["sim", "--workload", f"{path}:batch_size=4", "--arch", "npu32", "--out", "o", "--quiet"]) == 0
    assert (tmp_path / "o" / "dyn_batch_size4_npu32_ws_psum32.ledger.json").is_file()
