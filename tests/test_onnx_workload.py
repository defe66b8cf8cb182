"""ONNX models as workloads (npukit.workloads.onnx_workload): lowering, opset variations, bad files."""


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npukit.cli import main
from npukit.sim import Layer, VectorOp, WorkloadError, resnet18
from npukit.workloads import onnx_workload

F = TensorProto.FLOAT


def _rows(wl):
    return [(ly.name, ly.M, ly.N, ly.K, ly.batch, ly.kind, ly.conv) for ly in wl.gemms]


def _vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def _w(name, *shape):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def _save(tmp_path, nodes, inputs, outputs, inits=(), opset=17, name="m.onnx", check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if check:
        onnx.checker.check_model(model)
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _one(wl, cls=Layer):
    (ly,) = [x for x in wl.layers if isinstance(x, cls)]
    return ly


# ---------------------------------------------------------------------------- ResNet-18
def _external(name, *dims):
    """A weight whose bytes live in a file that is not there (only its dims are read)."""
    t = TensorProto(name=name, data_type=F, dims=dims, data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "resnet18.weights"), ("offset", "0"), ("length", str(4 * int(np.prod(dims))))):
        t.external_data.add(key=k, value=v)
    return t


@pytest.fixture(scope="module")
def resnet18_graph(tmp_path_factory):
    """ResNet-18 written with onnx.helper as torch's exporter writes it (batch norms folded into the convs,
    scoped node names), weights external and absent, as in ZigZag's bundled resnet18.onnx."""
    nodes, inits = [], []

    def conv(scope, x, cin, cout, k, s, pad):
        w, b = f"{scope}.weight", f"{scope}.bias"
        inits.extend([_external(w, cout, cin, k, k), _external(b, cout)])
        out = f"/{scope}/Conv_output_0"
        nodes.append(helper.make_node("Conv", [x, w, b], [out], name=f"/{scope}/Conv",
                                      kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4, dilations=[1, 1], group=1))
        return out

    def relu(scope, x):
        nodes.append(helper.make_node("Relu", [x], [f"/{scope}/Relu_output_0"], name=f"/{scope}/Relu"))
        return f"/{scope}/Relu_output_0"

    x = relu("relu", conv("conv1", "input.1", 3, 64, 7, 2, 3))
    nodes.append(helper.make_node("MaxPool", [x], ["mp"], name="/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1] * 4))
    x, cin = "mp", 64
    for stage, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            s, pre = (stride if block == 0 else 1), f"layer{stage}.{block}"
            path = f"layer{stage}/{pre}"  # torch's scopes: /layer1/layer1.0/conv1/Conv
            h = relu(f"{path}/relu", conv(f"{path}/conv1", x, cin, cout, 3, s, 1))
            h = conv(f"{path}/conv2", h, cout, cout, 3, 1, 1)
            skip = x
            if block == 0 and (s != 1 or cin != cout):
                skip = conv(f"{path}/downsample/downsample.0", x, cin, cout, 1, s, 0)
            nodes.append(helper.make_node("Add", [h, skip], [f"/{path}/Add_output_0"], name=f"/{path}/Add"))
            x, cin = relu(f"{path}/relu_1", f"/{path}/Add_output_0"), cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="/avgpool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="/Flatten", axis=1))
    inits += [_external("fc.weight", 1000, 512), _external("fc.bias", 1000)]
    nodes.append(helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["out"], name="/fc/Gemm", transB=1))
    graph = helper.make_graph(nodes, "resnet18", [_vi("input.1", [1, 3, 224, 224])], [_vi("out", [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], producer_name="pytorch")
    path = tmp_path_factory.mktemp("onnx") / "resnet18.onnx"
    onnx.save(model, path)
    return path


def _check_resnet18(wl):
    assert _rows(wl) == _rows(resnet18())  # names, M, N, K, conv tuples (padded extents) and kinds
    assert wl.macs == 1_814_073_344
    assert wl.meta["source"] == "onnx" and wl.meta["input_shapes"] == {"input.1": [1, 3, 224, 224]}
    assert wl.meta["approximated"] == {} and wl.meta["skipped"] == {"Flatten": 1}
    assert wl.meta["onnx_nodes"]["layer2.0.downsample.0"] == "/layer2/layer2.0/downsample/downsample.0/Conv"
    ops = {v.name: v for v in wl.vector_ops}
    assert ops["maxpool"].op == "other" and ops["maxpool"].reduce == 9  # 3x3 window over 64x56x56 outputs
    assert ops["maxpool"].elements == 64 * 56 * 56 * 9
    assert ops["layer1.0.add"].op == "add" and ops["layer1.0.add"].inputs == 2
    assert ops["layer1.0.relu_1"].op == "other"
    assert ops["avgpool"].elements == 512 * 7 * 7 and ops["avgpool"].reduce == 49


def test_resnet18_graph_matches_builtin_layer_for_layer(resnet18_graph):
    wl = onnx_workload(resnet18_graph)
    _check_resnet18(wl)
    assert wl.meta["external_data"] == ["resnet18.weights"]
    wl64 = onnx_workload(resnet18_graph, "1,3,64,64")
    assert [r[1:] for r in _rows(wl64)] == [r[1:] for r in _rows(resnet18(image=64))]
    wl2 = onnx_workload(resnet18_graph, [2, 3, 224, 224])
    assert wl2.macs == 2 * 1_814_073_344
    # a GEMM per image on the one-image conv row; the two images share the weights (fetched once)
    convs = [ly for ly in wl2.gemms if ly.conv is not None]
    assert convs and all(ly.batch == 2 and ly.shared == 2 for ly in convs)
    assert [(ly.M, ly.conv) for ly in convs] == [(r.M, r.conv) for r in resnet18().gemms if r.conv is not None]


def test_cli_sim_onnx(resnet18_graph, tmp_path, capsys):
    assert main(["sim", "--workload", str(resnet18_graph), "--quiet", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "resnet18 on npu128" in out and "1,814,073,344 MACs" in out
    assert main(["sim", "--workload", str(resnet18_graph), "--input-shape", "1,3,64,64", "--out", str(tmp_path / "o")]) == 0
    assert f"{resnet18(image=64).macs:,} MACs" in capsys.readouterr().out
    assert main(["sim", "--workload", str(tmp_path / "nope.onnx"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().endswith("does not exist")


@pytest.mark.slow
def test_resnet18_torch_export_matches_builtin(tmp_path):
    torch = pytest.importorskip("torch")
    from npukit.models.resnet18 import resnet18 as resnet18_module

    path = tmp_path / "resnet18.onnx"
    torch.manual_seed(0)
    torch.onnx.export(resnet18_module().eval(), (torch.randn(1, 3, 224, 224),), str(path), dynamo=False, opset_version=17)
    wl = onnx_workload(path)
    _check_resnet18(wl)
    assert wl.meta["producer"].startswith("pytorch") and wl.meta["folded"] > 0  # the Identity copies of shared biases


@pytest.mark.slow
def test_minilm_export_with_dynamic_axes_matches_tracer(tmp_path):
    torch = pytest.importorskip("torch")
    from npukit.models.minilm import minilm_l6
    from npukit.workloads.trace import trace_workload

    model = minilm_l6().eval()
    ids = torch.randint(0, 1000, (1, 128))
    path = tmp_path / "minilm.onnx"
    torch.onnx.export(model, (ids,), str(path), dynamo=False, opset_version=17, input_names=["input_ids"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    with pytest.raises(WorkloadError, match=r"input 'input_ids' dim 0 is dynamic \('batch'\); fix it with --input-shape batch=N"):
        onnx_workload(path)
    with pytest.raises(WorkloadError, match=r"dim 1 is dynamic \('seq'\)"):
        onnx_workload(path, batch=1)
    wl = onnx_workload(path, "batch=1,seq=128")  # Range/Reshape on Shape(x) are folded before inference
    traced = trace_workload(model, ids, "minilm")
    assert [r[:6] for r in _rows(wl)] == [r[:6] for r in _rows(traced)]  # incl. attention scores/context
    counts = {}
    for v in wl.vector_ops:
        counts[v.op] = counts.get(v.op, 0) + 1
    assert counts == {"embedding": 1, "add": 49, "mul": 12, "layernorm": 13, "softmax": 6, "gelu": 6}
    soft = next(v for v in wl.vector_ops if v.op == "softmax")
    assert soft.reduce == 128 and soft.elements == 12 * 128 * 128
    assert wl.meta["dims"] == {"batch": 1, "seq": 128}


# ---------------------------------------------------------------------------- convolutions
def test_conv_weight_from_constant_node_initializer_or_graph_input(tmp_path):
    w = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Constant", [], ["w"], value=w), helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 8, 8, 8])]))
    assert _one(wl).shape() == (64, 8, 27, 1) and _one(wl).conv == (10, 10, 3, 3, 3, 8, 1)
    # the same weight as an initializer, and as a graph input fed at run time
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, name="c")
    a = onnx_workload(_save(tmp_path, [conv], [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 8, 8, 8])], [_w("w", 8, 3, 3, 3)]))
    b = onnx_workload(_save(tmp_path, [conv], [_vi("x", [1, 3, 8, 8]), _vi("w", [8, 3, 3, 3])], [_vi("y", [1, 8, 8, 8])]))
    assert _rows(a) == _rows(b) == [("c", 64, 8, 27, 1, "conv", (10, 10, 3, 3, 3, 8, 1))]
    assert b.meta["input_shapes"] == {"x": [1, 3, 8, 8], "w": [8, 3, 3, 3]}


@pytest.mark.parametrize(
    "attrs, out, conv",
    [
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 8, (17, 17, 3, 3, 4, 6, 2)),  # total pad (8-1)*2+3-15 = 2
        ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, 8, (17, 17, 3, 3, 4, 6, 2)),
        ({"auto_pad": "VALID", "strides": [2, 2]}, 7, (15, 15, 3, 3, 4, 6, 2)),
        ({"pads": [0, 0, 1, 1], "strides": [2, 2]}, 7, (16, 16, 3, 3, 4, 6, 2)),  # asymmetric: begin 0, end 1
        ({"auto_pad": "SAME_UPPER"}, 15, (17, 17, 3, 3, 4, 6, 1)),
    ],
)
def test_conv_padding(tmp_path, attrs, out, conv):
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)  # no kernel_shape: read off the weight
    wl = onnx_workload(_save(tmp_path, [node], [_vi("x", [1, 4, 15, 15])], [_vi("y", [1, 6, None, None])],
                             [_w("w", 6, 4, 3, 3)]))
    ly = _one(wl)
    assert ly.conv == conv and (ly.M, ly.N, ly.K) == (out * out, 6, 36)


@pytest.mark.parametrize("group, cin, cout", [(4, 8, 16), (8, 8, 8)])  # grouped and depthwise
def test_grouped_conv_is_one_gemm_per_group(tmp_path, group, cin, cout):
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, pads=[1] * 4, kernel_shape=[3, 3])
    wl = onnx_workload(_save(tmp_path, [node], [_vi("x", [1, cin, 10, 10])], [_vi("y", [1, cout, 10, 10])],
                             [_w("w", cout, cin // group, 3, 3)]))
    ly = _one(wl)
    assert (ly.M, ly.N, ly.K, ly.batch) == (100, cout // group, cin // group * 9, group)
    assert ly.conv == (12, 12, 3, 3, cin // group, cout // group, 1)
    assert ly.macs == 100 * cout * cin // group * 9


def test_dilated_conv_keeps_the_exact_gemm_without_a_conv_tuple(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], dilations=[2, 2])
    wl = onnx_workload(_save(tmp_path, [node], [_vi("x", [1, 4, 16, 16])], [_vi("y", [1, 8, 12, 12])], [_w("w", 8, 4, 3, 3)]))
    assert _one(wl).shape() == (144, 8, 36, 1) and _one(wl).conv is None


def test_conv_channel_mismatch_is_one_line(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    path = _save(tmp_path, [node], [_vi("x", [1, 4, 8, 8])], [_vi("y", [1, 8, 6, 6])], [_w("w", 8, 3, 3, 3)])
    with pytest.raises(WorkloadError, match=r"input has 4 channels but weight \[8, 3, 3, 3\] with group 1 takes 3"):
        onnx_workload(path)


# ---------------------------------------------------------------------------- Gemm / MatMul / Einsum
@pytest.mark.parametrize("trans_a, trans_b, a, b",
                         [(0, 1, [4, 32], [16, 32]), (1, 0, [32, 4], [32, 16]), (0, 0, [4, 32], [32, 16])])
def test_gemm_trans(tmp_path, trans_a, trans_b, a, b):
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=0.5, beta=2.0)
    wl = onnx_workload(_save(tmp_path, [node], [_vi("a", a)], [_vi("y", [4, 16])], [_w("b", *b), _w("c", 16)]))
    assert _one(wl).shape() == (4, 16, 32, 1) and _one(wl).kind == "linear"


@pytest.mark.parametrize(
    "a, b, rank, shape",
    [
        ([2, 12, 128, 64], [2, 12, 64, 128], 4, (128, 128, 64, 24)),  # batched
        ([2, 1, 5, 7], [1, 3, 7, 9], 4, (5, 9, 7, 6)),  # broadcast batch dims
        ([2, 10, 7], [7, 9], 3, (20, 9, 7, 1)),  # a shared right operand: batch folded into M
        ([5, 7], [3, 7, 9], 3, (5, 27, 7, 1)),  # a shared left operand: into N
        ([7], [7, 9], 1, (1, 9, 7, 1)),  # 1-D operands
        ([5, 7], [7], 1, (5, 1, 7, 1)),
        ([4, 5, 7], [7], 2, (20, 1, 7, 1)),
    ],
)
def test_matmul_shapes(tmp_path, a, b, rank, shape):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    wl = onnx_workload(_save(tmp_path, [node], [_vi("a", a), _vi("b", b)], [_vi("y", [None] * rank)]))
    assert _one(wl).shape() == shape and _one(wl).kind == "matmul"


def test_matmul_weight_kinds_and_einsum(tmp_path):
    w = numpy_helper.from_array(np.zeros((8, 16), np.float32), "wt")
    nodes = [
        helper.make_node("Constant", [], ["wt"], value=w),
        helper.make_node("Transpose", ["wt"], ["w"], perm=[1, 0]),  # computed from a constant: folded
        helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
        helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhqd,bhkd->bhqk", name="ein"),
        helper.make_node("Einsum", ["q", "v"], ["c"], equation="...qd,...de", name="ein2"),  # implicit output
    ]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("x", [3, 16]), _vi("q", [2, 4, 10, 8]), _vi("k", [2, 4, 12, 8]),
                                               _vi("v", [2, 4, 8, 6])],
                             [_vi("h", [3, 8]), _vi("s", [2, 4, 10, 12]), _vi("c", [2, 4, 6, 10])]))
    assert [(ly.name, ly.shape(), ly.kind) for ly in wl.gemms] == [
        ("proj", (3, 8, 16, 1), "linear"), ("ein", (10, 12, 8, 8), "matmul"), ("ein2", (10, 6, 8, 8), "matmul")]
    assert wl.meta["folded"] == 1


def test_attention_matmuls_are_named_and_kinded(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="/attn/MatMul"),
        helper.make_node("Div", ["s", "scale"], ["s2"], name="/attn/Div"),
        helper.make_node("Add", ["s2", "mask"], ["s3"], name="/attn/Add"),
        helper.make_node("Softmax", ["s3"], ["p"], axis=-1, name="/attn/Softmax"),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="/attn/MatMul_1"),
    ]
    inits = [numpy_helper.from_array(np.array(8.0, np.float32), "scale")]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("q", [2, 16, 8]), _vi("kt", [2, 8, 16]), _vi("v", [2, 16, 8]),
                                               _vi("mask", [1, 1, 16])], [_vi("o", [2, 16, 8])], inits))
    assert [(ly.name, ly.shape(), ly.kind) for ly in wl.gemms] == [
        ("attn.scores", (16, 16, 8, 2), "attention"), ("attn.context", (16, 8, 16, 2), "attention")]
    add = next(v for v in wl.vector_ops if v.name == "attn.add")
    assert (add.inputs, add.params) == (1, 16)  # the broadcast mask is read as a parameter


def test_attention_op_opset23(tmp_path):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="sdpa")
    path = _save(tmp_path, [node], [_vi("q", [2, 8, 16, 32]), _vi("k", [2, 8, 20, 32]), _vi("v", [2, 8, 20, 64])],
                 [_vi("y", [2, 8, 16, 64])], opset=23)
    wl = onnx_workload(path)
    assert [(ly.name, ly.shape()) for ly in wl.gemms] == [("sdpa.scores", (16, 20, 32, 16)), ("sdpa.context", (16, 64, 20, 16))]
    assert _one(wl, VectorOp).reduce == 20


# ---------------------------------------------------------------------------- vector ops and opsets
@pytest.mark.parametrize("opset, axis, reduce", [(11, None, 60), (13, None, 5), (11, 2, 20), (13, 1, 3), (13, -2, 4)])
def test_softmax_axis_by_opset(tmp_path, opset, axis, reduce):
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["y"], **attrs)]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("x", [2, 3, 4, 6])], [_vi("y", [2, 3, 4, 5])], [_w("w", 6, 5)], opset=opset))
    soft = _one(wl, VectorOp)
    assert (soft.op, soft.elements, soft.reduce) == ("softmax", 120, reduce)


@pytest.mark.parametrize("axis, reduce", [(-1, 16), (-2, 128), (1, 128)])
def test_layernorm(tmp_path, axis, reduce):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["y"], axis=axis)]
    n = reduce
    inits = [_w("w", 16, 16), _w("g", *([8, 16] if n == 128 else [16])), _w("b", *([8, 16] if n == 128 else [16]))]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("x", [2, 8, 16])], [_vi("y", [2, 8, 16])], inits))
    ln = _one(wl, VectorOp)
    assert (ln.op, ln.elements, ln.reduce, ln.params) == ("layernorm", 256, reduce, 2 * reduce)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_axes_attribute_or_input(tmp_path, opset):
    if opset == 11:
        sq, inits = helper.make_node("Squeeze", ["x"], ["s"], axes=[1]), [_w("w", 6, 5)]
    else:
        axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
        sq, inits = helper.make_node("Squeeze", ["x", "axes"], ["s"]), [_w("w", 6, 5), axes]
    nodes = [sq, helper.make_node("MatMul", ["s", "w"], ["y"])]
    wl = onnx_workload(_save(tmp_path, nodes, [_vi("x", [4, 1, 6])], [_vi("y", [4, 5])], inits, opset=opset))
    assert _one(wl).shape() == (4, 5, 6, 1) and wl.meta["skipped"] == {"Squeeze": 1}


def test_vector_op_classes_and_fusions(tmp_path):
    c = {k: numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
         {"sqrt2": 1.4142135, "one": 1.0, "half": 0.5}.items()}
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="/emb/Gather"),  # (4, 10, 16) rows of a table
        helper.make_node("MatMul", ["e", "w"], ["h"], name="/fc/MatMul"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="/act/Div"),  # torch's erf GELU
        helper.make_node("Erf", ["d"], ["r"], name="/act/Erf"),
        helper.make_node("Add", ["r", "one"], ["a"], name="/act/Add"),
        helper.make_node("Mul", ["h", "a"], ["m"], name="/act/Mul"),
        helper.make_node("Mul", ["m", "half"], ["g"], name="/act/Mul_1"),
        helper.make_node("Sigmoid", ["g"], ["sg"], name="/silu/Sigmoid"),  # SiLU
        helper.make_node("Mul", ["g", "sg"], ["si"], name="/silu/Mul"),
        helper.make_node("Transpose", ["si"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
        helper.make_node("BatchNormalization", ["u", "s", "bb", "mu", "var"], ["bn"], name="/bn/BatchNormalization"),
        helper.make_node("Relu", ["bn"], ["re"], name="/relu/Relu"),
        helper.make_node("GlobalAveragePool", ["re"], ["p"], name="/pool/GlobalAveragePool"),
        helper.make_node("InstanceNormalization", ["re", "s", "bb"], ["inorm"], name="/in/InstanceNormalization"),
        helper.make_node("TopK", ["p", "k"], ["tv", "ti"], axis=1, name="/top/TopK"),
    ]
    inits = [_w("table", 100, 16), _w("w", 16, 32), *c.values(), _w("s", 32), _w("bb", 32), _w("mu", 32), _w("var", 32),
             numpy_helper.from_array(np.array([3], np.int64), "ax"), numpy_helper.from_array(np.array([2], np.int64), "k")]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [4, 10])
    wl = onnx_workload(_save(tmp_path, nodes, [ids], [_vi("tv", [4, 2, 1, 1]), _vi("inorm", [4, 32, 10, 1])], inits))
    got = [(v.name, v.op, v.elements, v.reduce, v.inputs, v.params) for v in wl.vector_ops]
    assert got == [
        ("emb", "embedding", 640, 0, 0, 640),  # named after the torch module that issued it
        ("act", "gelu", 1280, 0, 1, 0),
        ("silu", "silu", 1280, 0, 1, 0),
        ("bn", "mul", 1280, 0, 1, 128),
        ("relu", "other", 1280, 0, 1, 0),
        ("pool", "other", 1280, 10, 1, 0),
        ("in", "groupnorm", 1280, 10, 1, 64),
        ("top", "other", 16, 0, 1, 0),  # values and indices
    ]
    assert wl.meta["approximated"] == {"TopK": 1}
    assert wl.meta["skipped"] == {"Transpose": 1, "Unsqueeze": 1}


# ---------------------------------------------------------------------------- inputs and files
def test_dynamic_dims_refused_with_the_dim_to_fix(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    path = _save(tmp_path, nodes, [_vi("x", ["batch_size", None, 16])], [_vi("y", ["batch_size", None, 8])], [_w("w", 16, 8)])
    with pytest.raises(WorkloadError, match=r"input 'x' dim 0 is dynamic \('batch_size'\); fix it with --input-shape "
                                            r"batch_size=N \(or batch=N\)"):
        onnx_workload(path)
    with pytest.raises(WorkloadError, match=r"input 'x' dim 1 has no fixed size; fix it with --input-shape and the whole shape"):
        onnx_workload(path, dims={"batch_size": 2})
    assert _one(onnx_workload(path, "2,5,16")).shape() == (10, 8, 16, 1)
    assert _one(onnx_workload(path, {"x": [3, 5, 16]})).shape() == (15, 8, 16, 1)
    with pytest.raises(WorkloadError, match="has no dynamic dim named 'seq'"):
        onnx_workload(path, "seq=3")
    with pytest.raises(WorkloadError, match="has no input 'y'"):
        onnx_workload(path, {"y": [1]})
    with pytest.raises(WorkloadError, match="input 'x' has rank 3, the given shape"):
        onnx_workload(path, "2,16")
    with pytest.raises(WorkloadError, match="must be the input's shape"):
        onnx_workload(path, "batch=one")


def test_external_data_is_not_read(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "g", [_vi("x", [4, 64])], [_vi("y", [4, 32])], [_w("w", 64, 32)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").unlink()  # shapes need the dims only
    wl = onnx_workload(path)
    assert _rows(wl) == [("fc", 4, 32, 64, 1, "linear", None)] and wl.meta["external_data"] == ["ext.weights"]


def test_model_exported_by_another_tool(tmp_path):
    """ZigZag's bundled resnet18.onnx style: torch 1.13 at opset 14, weights in a missing external file;
    here a tf2onnx-like graph instead: NHWC input, Transpose, SAME_UPPER conv, MatMul dense, old IR."""
    nodes = [
        helper.make_node("Transpose", ["in"], ["t"], perm=[0, 3, 1, 2], name="StatefulPartitionedCall/transpose"),
        helper.make_node("Conv", ["t", "k"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2], name="model/conv2d/Conv2D"),
        helper.make_node("Relu", ["c"], ["r"], name="model/conv2d/Relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="model/gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="model/flatten"),
        helper.make_node("MatMul", ["f", "d"], ["y"], name="model/dense/MatMul"),
    ]
    graph = helper.make_graph(nodes, "tf", [_vi("in", [1, 32, 32, 3]), _vi("k", [16, 3, 3, 3]), _vi("d", [16, 10])],
                              [_vi("y", [1, 10])], [_w("k", 16, 3, 3, 3), _w("d", 16, 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], producer_name="tf2onnx", ir_version=3)
    path = tmp_path / "tf.onnx"
    onnx.save(model, path)
    wl = onnx_workload(path)
    assert _rows(wl) == [("model/conv2d/Conv2D", 256, 16, 27, 1, "conv", (33, 33, 3, 3, 3, 16, 2)),
                         ("model/dense/MatMul", 1, 10, 16, 1, "linear", None)]
    assert wl.meta["input_shapes"] == {"in": [1, 32, 32, 3]} and wl.meta["producer"] == "tf2onnx"


def _bad_checker(tmp_path):
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "nowhere"], ["y"])], "g", [_vi("x", [2, 2])], [_vi("y", [2, 2])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _custom_op(tmp_path):
    nodes = [helper.make_node("Foo", ["x"], ["t"], domain="com.acme", name="foo"), helper.make_node("MatMul", ["t", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 4])], [_vi("y", [None, 3])], [_w("w", 4, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)])
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    return path


def _write(path, data):
    path.write_bytes(data)
    return path


def _no_gemm(tmp_path):
    return _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 2])], [_vi("y", [2, 2])])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda t: t / "missing.onnx", "ONNX model '.*missing.onnx' does not exist"),
        (lambda t: t, "is a folder, not a file"),
        (lambda t: _write(t / "text.onnx", b"name,M,N,K\nfc,1,2,3\n"), r"is not an ONNX model \(a text file"),
        (lambda t: _write(t / "empty.onnx", b""), "is empty"),
        (lambda t: _write(t / "bin.onnx", b"\x00\xff\x13garbage"), r"not an ONNX model \(truncated or not ONNX"),
        (lambda t: _write(t / "b.onnx", b"\x12\x04abcd"), r"not an ONNX model \(no IR version or no graph"),
        (_bad_checker, "fails the ONNX checker: .*nowhere"),
        (_custom_op, r"node 'foo' \(com.acme.Foo\): shape inference could not resolve the shape of its output 't' "
                     r"\(ONNX has no shape function for this custom op\); export the model with static shapes"),
        (_no_gemm, "has no Conv, Gemm, MatMul, Einsum or Attention op"),
    ],
)
def test_bad_files_are_one_line(tmp_path, make, message):
    with pytest.raises(WorkloadError, match=message) as err:
        onnx_workload(make(tmp_path))
    assert "\n" not in str(err.value)


def test_truncated_protobuf(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    full = _save(tmp_path, nodes, [_vi("x", [4, 64])], [_vi("y", [4, 32])], [_w("w", 64, 32)]).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(WorkloadError, match="is not an ONNX model"):
        onnx_workload(cut)


def test_cli_bad_onnx_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    assert main(["sim", "--workload", str(bad), "--out", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "is not an ONNX model (a text file" in err
