"""Tracing PyTorch models into npukit workloads (npukit.workloads.trace)."""

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from npukit.models.minilm import minilm_l6 as minilm_module
from npukit.models.resnet18 import resnet18 as resnet18_module
from npukit.sim import Layer, WorkloadError, load_arch, minilm_l6, resnet18, simulate
from npukit.workloads.model_specs import workload_from_model_spec
from npukit.workloads.trace import trace_workload


def _rows(wl):
    return [(ly.name, ly.M, ly.N, ly.K, ly.batch, ly.kind, ly.conv) for ly in wl.gemms]


@pytest.fixture(scope="module")
def traced_resnet18():
    torch.manual_seed(0)
    return trace_workload(resnet18_module(), torch.randn(1, 3, 224, 224), "resnet18")


def test_resnet18_matches_builtin_layer_for_layer(traced_resnet18):
    assert _rows(traced_resnet18) == _rows(resnet18())
    assert traced_resnet18.macs == 1_814_073_344
    assert traced_resnet18.meta["dtypes"]["layer3.0.conv2"] == "float32"
    assert set(traced_resnet18.meta["dtypes"]) == {ly.name for ly in traced_resnet18.layers}
    assert traced_resnet18.meta["input_shapes"] == [[1, 3, 224, 224]]


def test_resnet18_simulates_like_builtin(traced_resnet18):
    arch = load_arch("npu128")
    got, ref = simulate(traced_resnet18, arch), simulate(resnet18(), arch)
    # the traced model's GEMMs are the built-in's; its ReLUs, batch norms, pools and adds run on the vector unit
    gemms = [r for r in got.layers if r.kind != "vector"]
    assert [(r.compute_cycles, r.stall_cycles, r.macs) for r in gemms] == [
        (r.compute_cycles, r.stall_cycles, r.macs) for r in ref.layers]
    assert sum(r.energy_total_pj for r in gemms) == pytest.approx(ref.energy_pj, rel=1e-12)
    vec = [r for r in got.layers if r.kind == "vector"]
    assert vec and all(set(r.energy_pj) <= {"vector_unit", "ofmap_sram", "dram"} for r in vec)


def test_trace_leaves_model_and_outputs_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 4))
    model.train()
    x = torch.randn(2, 3, 6, 6)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model.eval()(x)
    model.train()
    wl = trace_workload(model, x, "tiny")
    assert [ly.name for ly in wl.gemms] == ["0", "4"]
    assert all(m.training for m in model.modules())  # training flags restored
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())  # hooks removed
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k  # batch-norm running stats not updated
    with torch.no_grad():
        assert torch.equal(model.eval()(x), before)


class _Block(nn.Module):
    """A pre-norm transformer block: fused qkv, SDPA, output projection, FFN."""

    def __init__(self, d: int = 32, heads: int = 4, ffn: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.up = nn.Linear(d, ffn)
        self.down = nn.Linear(ffn, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.down(F.gelu(self.up(x)))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def test_transformer_block_layers():
    b, n, d, h = 2, 10, 32, 4
    wl = trace_workload(_Net(), torch.randn(b, n, d), "block")
    assert _rows(wl) == [
        ("block.qkv", b * n, 3 * d, d, 1, "linear", None),
        ("block.scores", n, n, d // h, b * h, "attention", None),
        ("block.context", n, d // h, n, b * h, "attention", None),
        ("block.proj", b * n, d, d, 1, "linear", None),
        ("block.up", b * n, 64, d, 1, "linear", None),
        ("block.down", b * n, d, 64, 1, "linear", None),
    ]
    macs = b * n * d * 3 * d + 2 * (b * h * n * n * (d // h)) + b * n * d * d + 2 * b * n * d * 64
    assert wl.macs == macs


def test_sdpa_unequal_head_dims_outside_any_module():
    # Ev != E forces the unfused math path (two aten.bmm), which must still read as scores + context
    class Attn(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 6)
    wl = trace_workload(Attn(), (q, k, v))
    assert _rows(wl) == [
        ("attention.scores", 4, 5, 8, 6, "attention", None),
        ("attention.context", 4, 6, 5, 6, "attention", None),
    ]


class _Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))
        self.b = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.w, self.b)  # (2, 5, 16)
        z = torch.matmul(y, y.transpose(-1, -2))  # (2, 5, 5)
        z = torch.bmm(z, y)  # (2, 5, 16)
        e = torch.einsum("bij,bkj->bik", z, y)  # (2, 5, 5)
        return e @ torch.ones(5, 3)


def test_functional_calls_are_captured():
    wl = trace_workload(_Functional(), (torch.randn(2, 5, 8),), "fn")
    assert _rows(wl) == [
        ("linear", 10, 16, 8, 1, "linear", None),
        ("matmul", 5, 5, 16, 2, "matmul", None),
        ("bmm", 5, 16, 5, 2, "matmul", None),
        ("einsum", 5, 5, 16, 2, "matmul", None),
        ("matmul.1", 10, 3, 5, 1, "matmul", None),
    ]


def test_repeated_ops_in_one_module_get_suffixes():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.fc(x)) @ x.t()

    wl = trace_workload(Twice(), torch.randn(3, 4))
    assert [ly.name for ly in wl.gemms] == ["fc", "fc.1", "matmul"]


def test_grouped_depthwise_dilated_transposed_and_1d_convs():
    class Convs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.grouped = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4)
            self.dilated = nn.Conv2d(16, 4, 3, dilation=2)
            self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
            self.c1d = nn.Conv1d(4, 6, 5, padding=2)

        def forward(self, x):
            x = self.dilated(self.grouped(self.dw(x)))  # (2, 4, 4, 4)
            return self.c1d(x.flatten(2)), self.up(x)

    wl = trace_workload(Convs(), torch.randn(2, 8, 16, 16))
    got = {ly.name: ly for ly in wl.gemms}
    # 2 images: a GEMM per (group, image) on the one-image conv row, the images of a group sharing its weights
    assert got["dw"] == Layer("dw", 16 * 16, 1, 9, 8 * 2, "conv", (18, 18, 3, 3, 1, 1, 1), shared=2)
    assert got["grouped"] == Layer("grouped", 8 * 8, 4, 2 * 9, 4 * 2, "conv", (18, 18, 3, 3, 2, 4, 2), shared=2)
    # dilation: exact GEMM shape (8x8 -> 4x4 with a 5x5 effective window), no SCALE-Sim conv row
    assert got["dilated"] == Layer("dilated", 2 * 4 * 4, 4, 16 * 9, 1, "conv", None)
    assert got["c1d"] == Layer("c1d", 16, 6, 4 * 5, 2, "conv", (1, 20, 1, 5, 4, 6, 1), shared=2)
    # transposed: every input pixel times Cin x (Cout*Fh*Fw)
    assert got["up"] == Layer("up", 2 * 4 * 4, 2 * 4, 4, 1, "conv", None)
    assert got["up"].macs == 2 * 4 * 4 * 4 * 2 * 2 * 2
    assert [ly.name for ly in wl.gemms] == ["dw", "grouped", "dilated", "c1d", "up"]


def test_multihead_attention_module():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0] + self.attn(x, x, x)[0]

    wl = trace_workload(M(), torch.randn(2, 10, 32))
    one_pass = [("linear", 20, 96, 32, 1), ("attention", 10, 10, 8, 8), ("attention", 10, 8, 10, 8), ("linear", 20, 32, 32, 1)]
    assert [(ly.kind, *ly.shape()) for ly in wl.gemms] == one_pass * 2
    assert [ly.name for ly in wl.gemms][:4] == ["attn", "attn.scores", "attn.context", "attn.1"]


@torch.library.custom_op("npukit_test_trace::pairmm", mutates_args=())
def _pairmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b) @ b.t()


def test_gemms_inside_a_user_op_are_seen():
    class U(nn.Module):
        def forward(self, x):
            return _pairmm(x, torch.ones(6, 3))

    wl = trace_workload(U(), torch.randn(4, 6))
    assert [(ly.name, *ly.shape()) for ly in wl.gemms] == [("pairmm", 4, 3, 6, 1), ("pairmm.1", 4, 6, 3, 1)]


def test_dtype_is_recorded():
    model = nn.Sequential(nn.Linear(8, 4)).to(torch.bfloat16)
    wl = trace_workload(model, torch.randn(3, 8, dtype=torch.bfloat16))
    assert wl.meta["dtypes"] == {"0": "bfloat16"}


def test_minilm_trace_matches_builtin():
    wl = trace_workload(minilm_module(), torch.zeros(1, 128, dtype=torch.long), "minilm")
    ref = minilm_l6(seq=128)
    assert [(ly.M, ly.N, ly.K, ly.batch, ly.kind) for ly in wl.gemms] == [
        (ly.M, ly.N, ly.K, ly.batch, ly.kind) for ly in ref.layers
    ]
    assert [ly.name for ly in wl.gemms] == [ly.name for ly in ref.layers]


def test_spec_module_factory_and_shape():
    wl = workload_from_model_spec("npukit.models.resnet18:resnet18", "1,3,64,64")
    assert _rows(wl) == _rows(resnet18(image=64))
    assert wl.name == "resnet18"


def test_spec_builtin_and_file_factory(tmp_path):
    wl = workload_from_model_spec("torch:minilm-l6", "1,16")
    assert wl.gemms[3] == Layer("encoder.layer.0.attention.scores", 16, 16, 32, 12, "attention")
    f = tmp_path / "mymodel.py"
    f.write_text(
        "import torch\nfrom torch import nn\n\n"
        "def make():\n    return nn.Linear(5, 7), (torch.randn(3, 5),)\n\n"
        "def bare():\n    return nn.Linear(5, 7)\n"
    )
    wl = workload_from_model_spec(f"{f}:make", None)
    assert _rows(wl) == [("linear", 3, 7, 5, 1, "linear", None)]  # the root module has no name: the op names it
    assert wl.name == "make"
    assert wl.meta["model_spec"] == f"{f}:make"
    wl = workload_from_model_spec(f"{f}:bare", "2x4x5")
    assert math.prod((wl.gemms[0].M, wl.gemms[0].N, wl.gemms[0].K)) == 8 * 7 * 5


@pytest.mark.parametrize(
    "spec,shape,match",
    [
        ("nowhere/missing.py:f", "1,2", "does not exist"),
        ("npukit.models.resnet18:nope", "1,3,32,32", "has no attribute 'nope'"),
        ("npukit.no_such_module:f", "1,2", "cannot import model module"),
        ("torch:vgg99", None, "unknown built-in model"),
        ("resnet18", None, "must be path/to/file.py:factory"),
        ("torch:resnet18", "1,3,-2", "input shape"),
        ("torch:resnet18", "a,b", "input shape"),
        ("{file}:boom", "1,2", "raised RuntimeError: kaboom"),
        ("{file}:notmodel", "1,2", "must return an nn.Module"),
        ("{file}:bare", None, "returns no example inputs"),
        ("{file}:relu", "1,2", "has no linear, conv, matmul or attention op"),
        ("{file}:bare", "1,3", "forward pass failed"),
        ("{broken}:f", "1,2", "failed to import"),
    ],
)
def test_spec_errors_are_one_line(tmp_path, spec, shape, match):
    f = tmp_path / "m.py"
    f.write_text(
        "from torch import nn\n"
        "def boom():\n    raise RuntimeError('kaboom\\nsecond line')\n"
        "def notmodel():\n    return 3\n"
        "def bare():\n    return nn.Linear(5, 7)\n"
        "def relu():\n    return nn.ReLU()\n"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('no deps here')\n")
    with pytest.raises(WorkloadError, match=match) as e:
        workload_from_model_spec(spec.format(file=f, broken=broken), shape)
    assert "\n" not in str(e.value)


def test_trace_errors():
    with pytest.raises(WorkloadError, match="nothing to simulate"):
        trace_workload(nn.Sequential(nn.ReLU(), nn.MaxPool2d(2)), torch.randn(1, 1, 4, 4), "pool")
    with pytest.raises(WorkloadError, match="needs a torch.nn.Module"):
        trace_workload(lambda x: x, torch.randn(2))  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match="example inputs must be"):
        trace_workload(nn.Linear(2, 2), 3)  # type: ignore[arg-type]


def test_importing_sim_does_not_import_torch():
    code = "import sys, npukit.sim; assert 'torch' not in sys.modules, 'npukit.sim imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_weight_only_int8_matmul_and_unsupported_bilinear():
    class Q(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.randint(-8, 8, (4, 8), dtype=torch.int8))
            self.register_buffer("scales", torch.ones(4, dtype=torch.bfloat16))

        def forward(self, x):
            return torch._weight_int8pack_mm(x, self.w, self.scales)

    wl = trace_workload(Q(), torch.randn(3, 8, dtype=torch.bfloat16))
    assert _rows(wl) == [("weight_int8pack_mm", 3, 4, 8, 1, "linear", None)]
    with pytest.raises(WorkloadError, match="F.bilinear"):
        trace_workload(nn.Bilinear(4, 4, 2), (torch.randn(3, 4), torch.randn(3, 4)))


# ---------------------------------------------------------------------------- vector ops
class _MyRMSNorm(nn.Module):
    """Named ``*RMSNorm``: recorded whole, its pow/mean/rsqrt/mul not."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class _AdaBlock(nn.Module):
    """Embedding, adaLN modulation, RMS-normed attention, GELU MLP, group norm and a reduction."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.d, self.heads = d, heads
        self.emb = nn.Embedding(50, d)
        self.mod = nn.Linear(d, 2 * d)
        self.norm = nn.LayerNorm(d, elementwise_affine=False)
        self.rms = _MyRMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.up = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(4 * d, d)
        self.gn = nn.GroupNorm(2, d)

    def forward(self, ids: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        x = self.emb(ids)
        scale, shift = self.mod(F.silu(c)).chunk(2, dim=-1)
        h = self.norm(x) * (1 + scale[:, None]) + shift[:, None]
        q, k, v = self.qkv(self.rms(h)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        x = x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, self.d)
        x = x + self.down(self.act(self.up(x)))
        return self.gn(x.transpose(1, 2)).sum()


def _vec(wl):
    return [(v.name, v.op, v.elements, v.reduce, v.inputs, v.params) for v in wl.vector_ops]


def test_vector_ops_are_recorded_once_each():
    torch.manual_seed(0)
    b, n, d, heads = 2, 6, 16, 2
    wl = trace_workload(_AdaBlock(d, heads), (torch.randint(0, 50, (b, n)), torch.randn(b, d)), "ada")
    e = b * n * d
    assert _vec(wl) == [
        ("emb.embedding", "embedding", e, 0, 0, e),  # gathered rows x dim
        ("silu", "silu", b * d, 0, 1, 0),
        ("norm", "layernorm", e, d, 1, 0),
        ("modulate", "modulate", e, 0, 3, 0),  # x * (1 + scale) + shift: one op, the 1 + scale folded in
        ("rms", "rmsnorm", e, d, 1, d),  # the module, not its pow/mean/rsqrt/mul
        ("softmax", "softmax", b * heads * n * n, n, 1, 0),  # inside SDPA, between scores and context
        ("add", "add", e, 0, 2, 0),
        ("act.gelu", "gelu", 4 * e, 0, 1, 0),
        ("add.1", "add", e, 0, 2, 0),
        ("gn", "groupnorm", e, d // 2 * n, 1, 2 * d),
        ("sum", "other", e, 0, 1, 0),
    ]
    names = [ly.name for ly in wl.layers]
    assert names.index("attention.scores") < names.index("softmax") < names.index("attention.context")
    assert set(wl.meta["dtypes"]) == set(names) and wl.meta["aten_ops"]["modulate"] == "mul+add"
    assert [ly.name for ly in trace_workload(_AdaBlock(d, heads), (torch.randint(0, 50, (b, n)), torch.randn(b, d)),
                                             vector_ops=False).layers] == [ly.name for ly in wl.gemms]


def test_meta_device_trace_equals_cpu_trace():
    torch.manual_seed(0)
    model, ids, c = _AdaBlock(), torch.randint(0, 50, (3, 5)), torch.randn(3, 16)
    on_cpu = trace_workload(model, (ids, c), "m")
    on_meta = trace_workload(model.to("meta"), (ids.to("meta"), c.to("meta")), "m")
    assert on_meta.layers == on_cpu.layers


@pytest.mark.parametrize(
    "name,make",
    [
        ("mm", lambda: (torch.ops.aten.mm.default, (torch.empty(3, 4), torch.empty(4, 5)), {})),
        ("addmm", lambda: (torch.ops.aten.addmm.default, (torch.empty(5), torch.empty(3, 4), torch.empty(4, 5)), {})),
        ("bmm", lambda: (torch.ops.aten.bmm.default, (torch.empty(2, 3, 4), torch.empty(2, 4, 5)), {})),
        ("add", lambda: (torch.ops.aten.add.Tensor, (torch.empty(2, 1, 4), torch.empty(3, 1)), {"alpha": 2})),
        ("mul", lambda: (torch.ops.aten.mul.Tensor, (torch.empty(2, 3, dtype=torch.bfloat16), torch.empty(3)), {})),
        ("mul", lambda: (torch.ops.aten.mul.Tensor, (torch.empty(2, 3, dtype=torch.bfloat16), 0.5), {})),
        ("mul", lambda: (torch.ops.aten.mul.Tensor, (torch.empty(4, 3).t(), torch.empty(3, 4)), {})),  # strided: torch's
        ("div", lambda: (torch.ops.aten.div.Tensor, (torch.empty(2, 3), torch.tensor(2.0)), {})),
        ("pow", lambda: (torch.ops.aten.pow.Tensor_Scalar, (torch.empty(2, 3, dtype=torch.float16), 2), {})),
        ("gelu", lambda: (torch.ops.aten.gelu.default, (torch.empty(2, 3),), {"approximate": "tanh"})),
        ("_to_copy", lambda: (torch.ops.aten._to_copy.default, (torch.empty(2, 3),), {"dtype": torch.bfloat16})),
        ("_to_copy", lambda: (torch.ops.aten._to_copy.default, (torch.empty(4, 3).t(),), {"dtype": torch.float16})),
    ],
)
def test_fast_meta_outputs_match_torch(name, make):
    from npukit.workloads._trace_meta import _fast_meta

    func, args, kwargs = make()
    args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    want = func(*args, **kwargs)
    got = _fast_meta(name, args, kwargs)
    if got is not None:
        assert (got.shape, got.dtype, got.stride(), got.device) == (want.shape, want.dtype, want.stride(), want.device)


def test_a_batch_of_images_counts_every_image_once_and_the_weights_once():
    from npukit.models.resnet18 import resnet18 as torch_resnet18

    torch.manual_seed(0)
    model = torch_resnet18().eval()
    one = trace_workload(model, (torch.randn(1, 3, 64, 64),), "r")
    four = trace_workload(model, (torch.randn(4, 3, 64, 64),), "r")
    assert four.macs == 4 * one.macs
    arch = load_arch("npu128")
    t1 = [r.traffic_bytes for r in simulate(one, arch).layers if r.kind != "vector"]
    t4 = [r.traffic_bytes for r in simulate(four, arch).layers if r.kind != "vector"]
    for key, ratio in (("dram_ifmap_read_bytes", 4), ("dram_filter_read_bytes", 1)):
        assert sum(t[key] for t in t4) == pytest.approx(ratio * sum(t[key] for t in t1)), key
