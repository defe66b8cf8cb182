"""The recorded dataflow of a traced model (``Workload.meta["dataflow"]``) and the fusion edges it allows.

Fast: the :class:`~npukit.sim.dataflow.Dataflow` rules on hand-made workloads, and the tracer on torch-only modules
(an attention block with a SwiGLU MLP; a mixture-of-experts block with transformers' experts interface).
"""

import pytest

from npukit.sim import Layer, VectorOp, Workload, WorkloadError, load_multicore_arch, simulate_multicore
from npukit.sim.dataflow import Dataflow
from npukit.sim.schedule import branch_runs, fusion_groups, group_edges


def _experts(flow: dict | None) -> Workload:
    """Two experts of one MoE layer: same shapes, so expert 0's output looks like expert 1's input."""
    t, h, f = 16, 64, 96
    ops = []
    for e in range(2):
        ops += [Layer(f"e{e}.up", t, f, h), VectorOp(f"e{e}.silu", "silu", t * f), Layer(f"e{e}.down", t, h, f)]
    return Workload("experts", ops, {} if flow is None else {"dataflow": flow})


EXPERT_FLOW = {"e0.silu": ["e0.up"], "e0.down": ["e0.silu"], "e1.silu": ["e1.up"], "e1.down": ["e1.silu"]}


def test_shapes_alone_chain_the_experts_and_the_dataflow_cuts_them():
    assert fusion_groups(_experts(None), "chain") == [(0, 5)]  # e0.down -> e1.up looks like an edge
    assert fusion_groups(_experts(EXPERT_FLOW), "chain") == [(0, 2), (3, 5)]
    assert fusion_groups(_experts({**EXPERT_FLOW, "e1.up": ["e0.down"]}), "chain") == [(0, 5)]  # a real edge


def test_reaches_goes_through_vector_ops_only():
    wl = Workload("w", [Layer("a", 8, 8, 8), VectorOp("s", "silu", 64), Layer("b", 8, 8, 8), Layer("c", 8, 8, 8)],
                  {"dataflow": {"s": ["a"], "b": ["s"], "c": ["b", "<input 0>"]}})
    flow = Dataflow.of(wl)
    assert flow is not None
    assert flow.reaches(0, 2) and flow.reaches(2, 3) and flow.reaches(1, 2)
    assert not flow.reaches(0, 3)  # only through GEMM b
    assert flow.producers(3) == frozenset({2})  # '<input 0>' is no operator of the workload


def test_same_input_needs_the_same_recorded_sources():
    wl = Workload("w", [VectorOp("n", "rmsnorm", 256, reduce=32), Layer("q", 8, 16, 32), Layer("k", 8, 16, 32),
                        Layer("x", 8, 16, 32)], {"dataflow": {"q": ["n"], "k": ["n"]}})
    flow = Dataflow.of(wl)
    assert flow is not None and flow.same_input(1, 2)
    assert not flow.same_input(2, 3)  # x reads nothing recorded (a gather of rows): not k's input
    fin, fout, sib, _ = group_edges(wl.layers, flow)
    assert sib == [False, False, True, False]
    fin, fout, sib, _ = group_edges(wl.layers)  # by shapes alone x is k's sibling
    assert sib == [False, False, True, True]


def test_a_producer_after_its_consumer_or_outside_the_workload_is_ignored():
    wl = Workload("w", [Layer("a", 8, 8, 8), Layer("b", 8, 8, 8)], {"dataflow": {"a": ["b"], "gone": ["a"]}})
    flow = Dataflow.of(wl)
    assert flow is not None and flow.producers(0) == frozenset() and not flow.reaches(1, 0)


@pytest.mark.parametrize("flow,match", [
    ([["a", "b"]], "must map operator names to lists"),
    ({"a": "b"}, "must map operator names to lists"),
    ({"a": [1]}, "must map operator names to lists"),
])
def test_a_malformed_dataflow_is_refused(flow, match):
    with pytest.raises(WorkloadError, match=match):
        Dataflow.of(Workload("w", [Layer("a", 8, 8, 8)], {"dataflow": flow}))


def test_a_dataflow_needs_unique_names():
    with pytest.raises(WorkloadError, match="unique operator names; 'a' appears twice"):
        Dataflow.of(Workload("w", [Layer("a", 8, 8, 8), Layer("a", 8, 8, 8)], {"dataflow": {}}))


# ---------------------------------------------------------------------------- the tracer
def _block(h: int = 32, f: int = 64):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(h)
            self.q, self.k, self.v, self.o = (nn.Linear(h, h, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
            self.down = nn.Linear(f, h, bias=False)

        def forward(self, x):
            y = self.norm(x)
            q, k, v = (p(y).view(1, -1, 2, h // 2).transpose(1, 2) for p in (self.q, self.k, self.v))
            x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(x.shape))
            return x + self.down(F.silu(self.gate(x)) * self.up(x))

    with torch.device("meta"):
        return Block()


def test_the_tracer_records_what_each_op_reads():
    import torch

    from npukit.workloads.trace import trace_workload

    wl = trace_workload(_block(), torch.empty(1, 16, 32, device="meta"), "block")
    flow = wl.meta["dataflow"]
    assert flow["norm"] == ["<input 0>"]
    assert flow["q"] == flow["k"] == flow["v"] == ["norm"]
    assert flow["attention.scores"] == ["k", "q"]
    assert flow["softmax"] == ["attention.scores"]
    assert flow["attention.context"] == ["softmax", "v"]
    assert flow["o"] == ["attention.context"]
    assert flow["add"] == ["<input 0>", "o"]
    assert flow["gate"] == flow["up"] == ["add"]
    assert flow["silu"] == ["gate"] and flow["mul"] == ["silu", "up"] and flow["down"] == ["mul"]
    assert flow["add.1"] == ["add", "down"]
    # independent branches from the recorded reads: q, k and v, then gate and up
    runs = [[[wl.layers[i].name for i in b] for b in run] for run in branch_runs(wl, Dataflow.of(wl))]
    assert runs == [[["q"], ["k"], ["v"]], [["gate", "silu"], ["up"]]]


def test_traced_experts_read_their_gathered_tokens_not_the_expert_before():
    import torch
    from test_moe_workloads import _fake_experts_model

    from npukit.workloads.trace import trace_workload

    with torch.device("meta"):
        model = _fake_experts_model(16, 24, 8, 2)
    wl = trace_workload(model, torch.empty(1, 64, 16, device="meta"), "moe")
    flow = wl.meta["dataflow"]
    # its tokens are rows gathered from the input by the router's choice: an order, not a whole-tensor edge
    assert flow["experts.1.gate_up_proj"] == ["~<input 0>", "~softmax"]
    assert flow["experts.1.down_proj"] == ["experts.1.mul"]
    groups = fusion_groups(wl, "chain")
    names = [[wl.layers[i].name for i in range(a, b + 1) if isinstance(wl.layers[i], Layer)] for a, b in groups]
    assert ["experts.0.gate_up_proj", "experts.0.down_proj"] in names  # each expert fuses on its own
    assert not any("experts.0.down_proj" in g and "experts.1.gate_up_proj" in g for g in names)
    del wl.meta["dataflow"]
    assert any("experts.0.down_proj" in g and "experts.1.gate_up_proj" in g for g in
               [[wl.layers[i].name for i in range(a, b + 1)] for a, b in fusion_groups(wl, "chain")])


def test_a_multicore_run_of_traced_experts_keeps_each_experts_input_off_its_neighbour():
    import torch
    from test_moe_workloads import _fake_experts_model

    from npukit.workloads.trace import trace_workload

    with torch.device("meta"):
        model = _fake_experts_model(64, 96, 8, 2)
    wl = trace_workload(model, torch.empty(1, 256, 64, device="meta"), "moe")
    march = load_multicore_arch("quad128")
    with_flow = simulate_multicore(wl, march, "chain/split")
    shapes_only = simulate_multicore(Workload(wl.name, wl.layers, {}), march, "chain/split")

    def dram(res, name):
        return sum(r["dram_bytes"] for r in res.layer_rows if r["name"] == name)

    # by shapes alone expert 1 reads expert 0's output on chip; it really reads its own tokens from DRAM
    assert dram(with_flow, "experts.1.gate_up_proj") > dram(shapes_only, "experts.1.gate_up_proj")


# ---------------------------------------------------------------------------- ONNX graphs
def _residual_onnx(tmp_path):
    """conv -> relu -> conv -> add(input) -> flatten -> gemm, written with onnx.helper as torch exports it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def w(name, *shape):
        return numpy_helper.from_array(np.zeros(shape, np.float32), name)

    conv = {"kernel_shape": [3, 3], "pads": [1] * 4, "strides": [1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="/conv1/Conv", **conv),
             helper.make_node("Relu", ["c1"], ["r1"], name="/relu/Relu"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="/conv2/Conv", **conv),
             helper.make_node("Add", ["c2", "x"], ["a"], name="/Add"),
             helper.make_node("Flatten", ["a"], ["f"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["f", "wf"], ["y"], name="/fc/Gemm", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [w("w1", 8, 8, 3, 3), w("w2", 8, 8, 3, 3), w("wf", 10, 512)])
    path = tmp_path / "res.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_onnx_graph_carries_its_edges_through_layout_nodes(tmp_path, monkeypatch):
    from npukit.workloads import onnx_workload

    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    wl = onnx_workload(_residual_onnx(tmp_path))
    flow = wl.meta["dataflow"]
    assert flow["conv1"] == ["<input 0>"] and flow["relu"] == ["conv1"] and flow["conv2"] == ["relu"]
    assert flow["add"] == ["<input 0>", "conv2"]  # the residual
    assert flow["fc"] == ["add"]  # through the Flatten, which makes no layer
    march = load_multicore_arch("quad128")
    for sched in ("chain/split", "blocks/pipeline"):
        a = simulate_multicore(wl, march, sched)
        b = simulate_multicore(Workload(wl.name, wl.layers, {}), march, sched)
        assert (a.total_cycles, a.energy_pj) == (b.total_cycles, b.energy_pj)  # shapes alone found no false edge here


def test_a_cached_trace_with_a_malformed_dataflow_is_traced_again(tmp_path):
    from npukit.sim.disk_cache import store_entry
    from npukit.workloads import _trace_cache as tc

    wl = Workload("m", [Layer("a", 2, 3, 4), Layer("b", 2, 3, 3)], {"dataflow": {"b": ["a"]}})
    path = tmp_path / "e.json"
    tc.store(path, wl)
    assert tc.load(path) == wl
    body = {**tc.workload_to_dict(wl), "meta": {"dataflow": {"b": "a"}}}
    with pytest.raises(WorkloadError, match="must map operator names"):
        tc.workload_from_dict(body)
    store_entry(path, tc.KIND, body)  # a valid entry (checksum and all) of a malformed dataflow
    assert tc.load(path) is None


def test_a_gathered_read_orders_but_is_no_edge_and_no_shared_input():
    wl = Workload("w", [VectorOp("n", "rmsnorm", 256, reduce=32), Layer("e0", 8, 16, 32), Layer("e1", 8, 16, 32)],
                  {"dataflow": {"e0": ["~n"], "e1": ["~n"]}})
    flow = Dataflow.of(wl)
    assert flow is not None
    assert flow.producers(1) == frozenset() and flow.waits_for(1) == frozenset({0})
    assert not flow.reaches(0, 1) and flow.ancestors(2, 0) == {0}
    assert not flow.same_input(1, 2)  # rows gathered from one tensor are not that tensor
