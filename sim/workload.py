"""Workloads: ordered lists of GEMM-shaped layers and non-GEMM (vector-unit) operators.

Every :class:`Layer` is a GEMM ``(M x K) @ (K x N)`` run ``batch`` times (``batch`` > 1 for the
per-head matmuls of attention). Convolutions are lowered as SCALE-Sim does: M = output pixels
(OH*OW), N = filters, K = Fh*Fw*Cin.

Every :class:`VectorOp` is an operator the systolic array does not run (softmax, normalization,
activations, elementwise mul/add, RoPE, adaLN modulation, embedding lookup, KV-cache append),
described by its element counts; the simulator costs it on the arch's vector unit.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .bounded import short
from .errors import WorkloadError
from .textfile import check_file, read_text

MAX_DIM = 2**40  # largest layer dimension (M, N, K, batch): far above any real model, far below float overflow


@dataclass(frozen=True)
class Layer:
    """One GEMM-shaped layer: ``batch`` x (M x K) @ (K x N). Sizes are element counts.

    ``shared``: how many consecutive instances of the batch use the same right operand (K x N), so it
    is fetched from DRAM once per group: grouped-query attention, where ``shared`` query heads read one
    KV head's keys and values (Llama-3.1-8B: 32 / 8 = 4). Must divide ``batch``.
    """

    name: str
    M: int
    N: int
    K: int
    batch: int = 1
    kind: str = "gemm"  # conv | linear | matmul | attention | gemm
    conv: tuple[int, ...] | None = None  # (ifmap_h, ifmap_w, fh, fw, cin, cout, stride), padded extents
    shared: int = 1

    def __post_init__(self) -> None:
        for f in ("M", "N", "K", "batch", "shared"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM:
                raise WorkloadError(f"layer '{self.name}': {f} must be a positive integer up to {MAX_DIM:,}, got {short(v)}")
        if self.batch % self.shared:
            raise WorkloadError(f"layer '{self.name}': shared = {self.shared} must divide batch = {self.batch}")

    @property
    def macs(self) -> int:
        return self.batch * self.M * self.N * self.K

    def shape(self) -> tuple[int, int, int, int]:
        return (self.M, self.N, self.K, self.batch)


# Op classes of the vector unit. Elementwise: gelu, silu, add, mul, rope, modulate, other.
# Row-wise (``reduce`` = row length): softmax, layernorm, rmsnorm, groupnorm.
# Memory-only: embedding (rows gathered from a table), kv_append (new K/V rows written to the cache).
VECTOR_OPS = (
    "softmax", "layernorm", "rmsnorm", "groupnorm", "gelu", "silu", "add", "mul", "rope", "modulate",
    "embedding", "kv_append", "other",
)
ROWWISE_OPS = ("softmax", "layernorm", "rmsnorm", "groupnorm")


@dataclass(frozen=True)
class VectorOp:
    """A non-GEMM operator: ``batch`` x ``elements`` output elements of op class ``op``.

    ``reduce``: length of the reduced axis for the row-wise ops (softmax and the norms; the op works
    on ``elements / reduce`` rows), 0 for elementwise ops. ``inputs``: how many input tensors of
    ``elements`` elements each it reads (an add of two tensors: 2; adaLN ``x * (1 + scale) + shift``
    with per-token modulation: 3). ``params``: parameter elements it reads (norm weights, the
    gathered embedding rows), per batch instance. All counts are elements, not bytes.
    """

    name: str
    op: str
    elements: int
    reduce: int = 0
    inputs: int = 1
    params: int = 0
    batch: int = 1
    kind: ClassVar[str] = "vector"

    def __post_init__(self) -> None:
        if self.op not in VECTOR_OPS:
            raise WorkloadError(f"vector op '{self.name}': unknown op class '{self.op}' (known: {', '.join(VECTOR_OPS)})")
        for f in ("elements", "batch"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > MAX_DIM**2:
                raise WorkloadError(f"vector op '{self.name}': {f} must be a positive integer up to {MAX_DIM**2:,}, "
                                    f"got {short(v)}")
        for f in ("reduce", "inputs", "params"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > MAX_DIM**2:
                raise WorkloadError(f"vector op '{self.name}': {f} must be an integer >= 0 up to {MAX_DIM**2:,}, "
                                    f"got {short(v)}")
        if self.op in ROWWISE_OPS and (self.reduce <= 0 or self.elements % self.reduce):
            raise WorkloadError(
                f"vector op '{self.name}': {self.op} needs reduce = its row length, a divisor of elements ({self.elements})"
            )

    @property
    def macs(self) -> int:
        return 0

    @property
    def rows(self) -> int:
        """Rows of a row-wise op (``elements / reduce``), else 0."""
        return self.elements // self.reduce if self.reduce else 0


@dataclass
class Workload:
    """A named, ordered list of GEMM layers (:class:`Layer`) and vector operators (:class:`VectorOp`)."""

    name: str
    layers: list[Layer | VectorOp] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def gemms(self) -> list[Layer]:
        """The GEMM layers, in order."""
        return [x for x in self.layers if isinstance(x, Layer)]

    @property
    def vector_ops(self) -> list[VectorOp]:
        """The vector-unit operators, in order."""
        return [x for x in self.layers if isinstance(x, VectorOp)]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.layers)


def conv_layer(name: str, ifmap_h: int, ifmap_w: int, fh: int, fw: int, cin: int, cout: int, stride: int) -> Layer:
    """A convolution on a (padded) ``ifmap_h x ifmap_w x cin`` input, lowered to GEMM."""
    for f, v in dict(ifmap_h=ifmap_h, ifmap_w=ifmap_w, fh=fh, fw=fw, cin=cin, cout=cout, stride=stride).items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise WorkloadError(f"conv layer '{name}': {f} must be a positive integer, got {v!r}")
    if fh > ifmap_h or fw > ifmap_w:
        raise WorkloadError(f"conv layer '{name}': filter {fh}x{fw} is larger than the input {ifmap_h}x{ifmap_w}")
    oh = (ifmap_h - fh) // stride + 1
    ow = (ifmap_w - fw) // stride + 1
    return Layer(name, oh * ow, cout, fh * fw * cin, kind="conv", conv=(ifmap_h, ifmap_w, fh, fw, cin, cout, stride))


# ---------------------------------------------------------------------------- built-ins
def resnet18(image: int = 224, num_classes: int = 1000) -> Workload:
    """ResNet-18 (torchvision layout): 20 convolutions + the FC layer, padded input extents; ``image``: the input's
    height and width in pixels, 1 to 16,384."""
    if isinstance(image, bool) or not isinstance(image, int) or not 0 < image <= 1 << 14:
        raise WorkloadError(f"resnet18 image must be 1..{1 << 14} pixels, not {image!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 0 < num_classes <= 1 << 20:
        raise WorkloadError(f"resnet18 num_classes must be 1..{1 << 20}, not {num_classes!r}")
    layers = [conv_layer("conv1", image + 6, image + 6, 7, 7, 3, 64, 2)]
    h = (image + 6 - 7) // 2 + 1
    h = (h + 2 - 3) // 2 + 1  # max-pool 3x3/2, pad 1
    cin = 64
    for stage, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            s = stride if block == 0 else 1
            pre = f"layer{stage}.{block}"
            layers.append(conv_layer(f"{pre}.conv1", h + 2, h + 2, 3, 3, cin, cout, s))
            h2 = (h + 2 - 3) // s + 1
            layers.append(conv_layer(f"{pre}.conv2", h2 + 2, h2 + 2, 3, 3, cout, cout, 1))
            if block == 0 and (s != 1 or cin != cout):
                layers.append(conv_layer(f"{pre}.downsample.0", h, h, 1, 1, cin, cout, s))
            h, cin = h2, cout
    layers.append(Layer("fc", 1, num_classes, 512, kind="linear"))
    return Workload("resnet18", layers, {"image": image})


def _encoder_layer(pre: str, seq: int, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Layer]:
    return [
        Layer(f"{pre}.q_proj", seq, heads * head_dim, hidden, kind="linear"),
        Layer(f"{pre}.k_proj", seq, kv_heads * head_dim, hidden, kind="linear"),
        Layer(f"{pre}.v_proj", seq, kv_heads * head_dim, hidden, kind="linear"),
    ]


def minilm_l6(seq: int = 128) -> Workload:
    """The six encoder layers of all-MiniLM-L6-v2 (hidden 384, 12 heads of 32, FFN 1536); ``seq``: tokens, 1 to
    1,048,576 (as llama3-8b-layer's)."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq <= 1 << 20:
        raise WorkloadError(f"minilm-l6 seq must be 1..{1 << 20} tokens, not {seq!r}")
    hidden, heads, hd, ffn = 384, 12, 32, 1536
    layers: list[Layer] = []
    reads: dict[str, list[str]] = {}
    x = "<input 0>"
    for i in range(6):
        pre = f"encoder.layer.{i}"
        a = f"{pre}.attention"
        layers += _encoder_layer(a, seq, hidden, heads, heads, hd)
        layers += [
            Layer(f"{a}.scores", seq, seq, hd, batch=heads, kind="attention"),
            Layer(f"{a}.context", seq, hd, seq, batch=heads, kind="attention"),
            Layer(f"{a}.output", seq, hidden, hidden, kind="linear"),
            Layer(f"{pre}.intermediate", seq, ffn, hidden, kind="linear"),
            Layer(f"{pre}.output", seq, hidden, ffn, kind="linear"),
        ]
        reads |= {f"{a}.q_proj": [x], f"{a}.k_proj": [x], f"{a}.v_proj": [x],
                  f"{a}.scores": [f"{a}.q_proj", f"{a}.k_proj"], f"{a}.context": [f"{a}.scores", f"{a}.v_proj"],
                  f"{a}.output": [f"{a}.context"], f"{pre}.intermediate": [f"{a}.output"],
                  f"{pre}.output": [f"{pre}.intermediate"]}
        x = f"{pre}.output"
    return Workload("minilm-l6", layers, {"seq": seq, _dataflow_key(): reads})


def _dataflow_key() -> str:
    """The meta key of a workload's recorded dataflow (:data:`npukit.sim.dataflow.KEY`): the built-ins below know
    their own wiring, so they record it, as a traced model does (before 2026-12-07 they had none, and shapes alone
    made ``k_proj`` read ``q_proj``'s output and the scores read their keys from ``v_proj`` in a fused group)."""
    from .dataflow import KEY  # dataflow imports this module

    return KEY


def llama3_8b_layer(seq: int = 2048, phase: str = "prefill") -> Workload:
    """One Llama-3.1-8B decoder layer (hidden 4096, 32 query / 8 KV heads of 128, FFN 14336).

    ``prefill``: ``seq`` tokens at once. ``decode``: one new token attending over ``seq`` cached ones.
    The non-GEMM operators are in order as vector ops: the two RMSNorms, RoPE on q and k, the append
    of the new keys and values to the KV cache, the softmax over every score row (no causal
    skipping), the SiLU and gating multiply of the SwiGLU MLP, and the two residual adds.
    """
    if phase not in ("prefill", "decode"):
        raise WorkloadError(f"llama3-8b-layer phase must be prefill or decode, not '{phase}'")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq <= 1 << 20:
        raise WorkloadError(f"llama3-8b-layer seq must be 1..{1 << 20} tokens, not {seq!r}")
    hidden, heads, kvh, hd, ffn = 4096, 32, 8, 128, 14336
    m = seq if phase == "prefill" else 1
    ctx = seq if phase == "prefill" else seq + 1
    layers: list[Layer | VectorOp] = [VectorOp("input_layernorm", "rmsnorm", m * hidden, reduce=hidden, params=hidden)]
    layers += _encoder_layer("self_attn", m, hidden, heads, kvh, hd)
    layers += [
        VectorOp("self_attn.rope_q", "rope", m * heads * hd),
        VectorOp("self_attn.rope_k", "rope", m * kvh * hd),
        VectorOp("self_attn.kv_append", "kv_append", 2 * m * kvh * hd),
        Layer("self_attn.scores", m, ctx, hd, batch=heads, kind="attention", shared=heads // kvh),
        VectorOp("self_attn.softmax", "softmax", m * ctx, reduce=ctx, batch=heads),
        Layer("self_attn.context", m, hd, ctx, batch=heads, kind="attention", shared=heads // kvh),
        Layer("self_attn.o_proj", m, hidden, heads * hd, kind="linear"),
        VectorOp("residual_attn", "add", m * hidden, inputs=2),
        VectorOp("post_attention_layernorm", "rmsnorm", m * hidden, reduce=hidden, params=hidden),
        Layer("mlp.gate_proj", m, ffn, hidden, kind="linear"),
        Layer("mlp.up_proj", m, ffn, hidden, kind="linear"),
        VectorOp("mlp.act_fn", "silu", m * ffn),
        VectorOp("mlp.gate_mul", "mul", m * ffn, inputs=2),
        Layer("mlp.down_proj", m, hidden, ffn, kind="linear"),
        VectorOp("residual_mlp", "add", m * hidden, inputs=2),
    ]
    a = "self_attn"
    reads = {"input_layernorm": ["<input 0>"], f"{a}.q_proj": ["input_layernorm"], f"{a}.k_proj": ["input_layernorm"],
             f"{a}.v_proj": ["input_layernorm"], f"{a}.rope_q": [f"{a}.q_proj"], f"{a}.rope_k": [f"{a}.k_proj"],
             f"{a}.kv_append": [f"{a}.rope_k", f"{a}.v_proj"], f"{a}.scores": [f"{a}.rope_q", f"{a}.kv_append"],
             f"{a}.softmax": [f"{a}.scores"], f"{a}.context": [f"{a}.softmax", f"{a}.kv_append"],
             f"{a}.o_proj": [f"{a}.context"], "residual_attn": [f"{a}.o_proj", "<input 0>"],
             "post_attention_layernorm": ["residual_attn"], "mlp.gate_proj": ["post_attention_layernorm"],
             "mlp.up_proj": ["post_attention_layernorm"], "mlp.act_fn": ["mlp.gate_proj"],
             "mlp.gate_mul": ["mlp.act_fn", "mlp.up_proj"], "mlp.down_proj": ["mlp.gate_mul"],
             "residual_mlp": ["mlp.down_proj", "residual_attn"]}
    return Workload("llama3-8b-layer", layers, {"seq": seq, "phase": phase, _dataflow_key(): reads})


def gemm(M: int, N: int, K: int) -> Workload:
    """A single GEMM (M x K) @ (K x N)."""
    return Workload(f"gemm{M}x{N}x{K}", [Layer("gemm", M, N, K)], {})


BUILTIN_WORKLOADS = {
    "resnet18": (resnet18, {"image": int}),
    "minilm-l6": (minilm_l6, {"seq": int}),
    "llama3-8b-layer": (llama3_8b_layer, {"seq": int, "phase": str}),
    "gemm": (gemm, {"M": int, "N": int, "K": int}),
}


def load_topology_csv(path: str | Path) -> Workload:
    """Read a SCALE-Sim topology CSV: conv rows ``name, IFMAP H, IFMAP W, Filter H, Filter W,
    Channels, Num filter, Stride,`` or GEMM rows ``name, M, N, K,`` (the format is told by the
    number of fields; a header line is expected and skipped)."""
    path = check_file(path, "topology file", WorkloadError)
    try:
        rows = [
            [c.strip() for c in row if c.strip() != ""]
            for row in csv.reader(read_text(path, "topology file", WorkloadError).splitlines())
        ]
    except csv.Error as exc:  # a field over csv's limit (131,072 characters), a NUL byte
        raise WorkloadError(f"{path}: not a topology CSV ({exc})") from None
    rows = [r for r in rows if r and not r[0].startswith("#")]
    if not rows:
        raise WorkloadError(f"{path}: topology CSV is empty; expected a header and one row per layer")
    header, body = rows[0], rows[1:]
    if all(_is_int(c) for c in header[1:]) and len(header) > 1:
        body = rows  # no header line
    if not body:
        raise WorkloadError(f"{path}: topology CSV has a header but no layers")
    layers: list[Layer] = []
    for lineno, row in enumerate(body, start=2):
        name, vals = row[0], row[1:]
        if not all(_is_int(v) for v in vals):
            raise WorkloadError(f"{path} line {lineno}: layer '{name}' has a non-integer field: {short(row, 200)}")
        ints = [int(v) for v in vals]
        if len(ints) == 7:
            h, w, fh, fw, c, n, s = ints
            layers.append(conv_layer(name, h, w, fh, fw, c, n, s))
        elif len(ints) == 3:
            layers.append(Layer(name, ints[0], ints[1], ints[2]))
        else:
            raise WorkloadError(
                f"{path} line {lineno}: expected 7 conv fields (IFMAP H, IFMAP W, Filter H, Filter W, Channels, "
                f"Num filter, Stride) or 3 GEMM fields (M, N, K), got {len(ints)}"
            )
    names = [layer.name for layer in layers]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WorkloadError(f"{path}: layer name '{dup}' appears twice; layer names must be unique")
    return Workload(path.stem, layers, {"source": str(path)})


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def write_topology_csv(workload: Workload, path: str | Path) -> Path:
    """Write a workload's GEMMs as a SCALE-Sim GEMM topology CSV (``name, M, N, K,``; batch unrolled; SCALE-Sim
    has no vector ops, so they are left out)."""
    lines = ["Layer, M, N, K,"]
    for layer in workload.gemms:
        for b in range(layer.batch):
            suffix = f".{b}" if layer.batch > 1 else ""
            lines.append(f"{layer.name}{suffix}, {layer.M}, {layer.N}, {layer.K},")
    from .output import atomic_write_text

    p = Path(path)
    atomic_write_text(p, "\n".join(lines) + "\n")
    return p
