"""PsumQuant: run a PyTorch model as a tiled weight-stationary systolic array with B-bit psums.

Every ``nn.Linear`` and ``nn.Conv2d`` (as im2col GEMM; grouped convs per group) becomes the GEMM
``y = x @ w`` (x: M x K, one row per token / output pixel; w: K x N) on an R x C array: K is cut
into K-tiles of R rows, N into N-tiles of C columns, and each K-tile's psums are quantized to B
bits with a scale (a "step", psum units per LSB) before they enter the psum path:

* ``semantics='buffer'`` (default; what cuts psum-buffer energy): the buffer holds B bits; the
  running sum is re-quantized after every accumulation: ``acc <- ovf_B(acc + q(p_t))`` with one step
  per output row and N-tile for all K-tiles (this is ``npukit.sim.cycle.run_gemm(acc_bits=B,
  quant=(mult, shift))``).
* ``semantics='transfer'``: each K-tile psum is quantized (compressed psum transfer) with its own
  step per (row, K-tile, N-tile); accumulation stays at high precision.

``overflow``: ``saturate`` or ``wrap`` (two's complement) of the B-bit accumulator (buffer), or of
the B-bit quantizer output (transfer; the contract's quantizer saturates, ``wrap`` models one
without saturation logic).

Number systems: with ``wa_bits=8`` (default) weights are int8 symmetric per output channel and
activations int8 symmetric per tensor (scale from calibration), so psums are integers ("integer
psum units"); ``act_granularity='token'`` gives every row of x (token) its own dynamic activation
scale instead (as LLM int8 deployments do; psums stay integers per row, see
:class:`PsumQuantConfig`); with ``wa_bits=None`` weights and activations stay float32 and only psums are
quantized. ``exact=True`` runs the integer-exact path (NumPy int64, the shared quantizer of
:mod:`npukit.sim.quant`; bit for bit ``run_gemm``); the default float path (float32 torch, or the
Triton kernel on CUDA) gives identical results for power-of-two steps when B <= 22 and K-tile psums
stay below 2^24 (int8 data, R <= 1024), and agrees within one LSB per K-tile otherwise.

Scale policies: see :mod:`npukit.models._psum_policies` (none, static, tile-max, a2q, sigma,
psumquant); the psumquant predictor: :mod:`npukit.models._psum_predictor`.

Activation x activation products (attention ``QK^T`` and ``PV``): a model marks them with
:class:`Matmul` slots (transformers models get them through transformers' attention interface, see
:mod:`npukit.models._psum_hf`); ``convert(..., matmuls=True)`` turns those into :class:`PsumMatmul` modules,
calibrated with the layers and using every policy (:mod:`npukit.models._psum_matmul`).
:func:`psum_matmul` is the functional, calibration-free form.

Typical use::

    cfg = PsumQuantConfig(rows=128, bits=8, policy="psumquant")
    qmodel = convert(copy.deepcopy(model), cfg, calib_batches)   # swap + calibrate
    reconfigure(qmodel, policy="static", bits=6)                  # refit from stored stats, no data pass
    fit_report(qmodel)                                            # per-layer fit figures
    qattn = convert(copy.deepcopy(bert), cfg, calib, matmuls=True)  # also its Matmul slots (attention)
    with PsumTraffic(qmodel) as tr: qmodel(x)
    tr.record(ledger)                                             # psum reads/writes at B bits
    model = unconvert(qmodel)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from npukit.kernels.psumquant import psumquant_matmul
from npukit.sim.errors import NpukitError
from npukit.sim.ledger import Ledger

from . import _psum_hf
from ._psum_exec import CalibStats, Geom, TileFeatures, hw_steps, int_tiled_gemm, tile_features
from ._psum_matmul import Matmul, MatmulPolicy, MatmulStats, fit_key, quantize_operands
from ._psum_policies import POLICIES, FitContext, ScalePolicy, make_policy

__all__ = [
    "POLICIES",
    "Matmul",
    "PsumMatmul",
    "PsumQuantConfig",
    "PsumQuantError",
    "PsumQuantLayer",
    "PsumTraffic",
    "calibrate",
    "convert",
    "fit_report",
    "psum_layers",
    "psum_matmul",
    "psum_matmuls",
    "reconfigure",
    "unconvert",
]


class PsumQuantError(NpukitError):
    """Bad PsumQuant input: unknown policy, impossible width, nothing to convert, NaN activations..."""


SEMANTICS = ("buffer", "transfer")
OVERFLOWS = ("saturate", "wrap")
SCALE_FORMS = ("pow2", "mult_shift")
BACKENDS = ("auto", "torch", "triton")
ACT_GRANULARITIES = ("tensor", "token")
# fields that change the tile geometry or the number system: changing them needs a new calibration
_GEOMETRY_FIELDS = ("rows", "cols", "wa_bits", "act_granularity")


@dataclass(frozen=True)
class PsumQuantConfig:
    """How psums are held. Widths in bits; ``rows`` x ``cols`` is the array (PEs).

    rows/cols: array size (K-tile = rows, N-tile = cols). bits: psum width B (2..32; the float path
    is exact up to 22, the Triton kernel needs <= 22). policy: one of :data:`POLICIES`.
    semantics: 'buffer' | 'transfer'. overflow: 'saturate' | 'wrap'. exact: integer-exact NumPy path.
    wa_bits: weight/activation width (int, symmetric) or None for float32 weights/activations.
    act_granularity: activation scale of the integer path: 'tensor' (default; one static scale per
    layer from calibration, the integer-exact / RTL-matching setting) or 'token' (one dynamic scale
    per row of x, i.e. per token, or per output pixel's im2col patch for a conv: s_m = max|x_m| /
    (2^(wa_bits-1) - 1), as LLM int8 deployments do, e.g. LLM.int8() vector-wise and SmoothQuant's
    per-token activation quantization). Row m's psums are then integer tile sums in units of
    s_m * s_w[n]; the psum quantizer still sees integers (one row of an output tile shares s_m), so
    the scale policies, the float path and the integer-exact path are unchanged, and the output is
    ``psum * s_m * s_w[n]`` (the per-row rescale happens after the psum buffer, with the per-channel one).
    scale_form: 'pow2' (step = 2^shift) | 'mult_shift' (16-bit multiplier and shift).
    psum_bits: width P of the in-array psum registers (exact path). acc_bits: width of the
    high-precision accumulator of 'transfer' semantics and of the unquantized ('none') buffer, for
    the traffic ledger. sigma_k: k of the sigma policy. calib_rows: rows per layer kept from the
    calibration batches for the predictor fit (margin_rows of them for the margin choice).
    headroom_log2: extra head-room (log2 units, >= 0 means fewer clipped tiles) added to the margin
    the psumquant fit picks by output MSE.
    backend: 'auto' (Triton on CUDA, torch on CPU) | 'torch' | 'triton'. seed: sampling seed.
    """

    rows: int = 128
    cols: int = 128
    bits: int = 8
    policy: str = "psumquant"
    semantics: str = "buffer"
    overflow: str = "saturate"
    exact: bool = False
    wa_bits: int | None = 8
    scale_form: str = "pow2"
    psum_bits: int = 32
    acc_bits: int = 32
    sigma_k: float = 3.0
    calib_rows: int = 1024
    margin_rows: int = 512
    headroom_log2: float = 0.0
    backend: str = "auto"
    seed: int = 0
    act_granularity: str = "tensor"

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise PsumQuantError(msg)

        if self.policy not in POLICIES:
            bad(f"unknown psum scale policy '{self.policy}': use one of {', '.join(POLICIES)}")
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad(f"{name} must be a positive integer (array size in PEs), got {v!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 32:
            bad(f"psum bits must be an integer in 2..32, got {self.bits!r}")
        if self.semantics not in SEMANTICS:
            bad(f"unknown psum semantics '{self.semantics}': use 'buffer' (B-bit psum buffer) or 'transfer' (B-bit transfers)")
        if self.overflow not in OVERFLOWS:
            bad(f"unknown overflow mode '{self.overflow}': use 'saturate' or 'wrap'")
        if self.scale_form not in SCALE_FORMS:
            bad(f"unknown scale_form '{self.scale_form}': use 'pow2' or 'mult_shift'")
        if self.backend not in BACKENDS:
            bad(f"unknown backend '{self.backend}': use one of {', '.join(BACKENDS)}")
        wa = self.wa_bits
        if wa is not None and (isinstance(wa, bool) or not isinstance(wa, int) or not 2 <= wa <= 16):
            bad(f"wa_bits must be None (float weights/activations) or an integer in 2..16, got {self.wa_bits!r}")
        if self.act_granularity not in ACT_GRANULARITIES:
            bad(f"unknown act_granularity '{self.act_granularity}': use 'tensor' (per-tensor activation scale) "
                "or 'token' (per-row activation scales)")
        if self.act_granularity == "token" and self.wa_bits is None:
            bad("act_granularity='token' needs integer activations: set wa_bits (e.g. 8)")
        if self.exact and self.wa_bits is None:
            bad("exact=True needs integer weights/activations: set wa_bits (e.g. 8)")
        if not isinstance(self.psum_bits, int) or not self.bits <= self.psum_bits <= 62:
            bad(f"psum_bits (in-array psum width) must be an integer in bits..62, got {self.psum_bits!r}")
        if not isinstance(self.acc_bits, int) or not 2 <= self.acc_bits <= 64:
            bad(f"acc_bits must be an integer in 2..64, got {self.acc_bits!r}")
        if not (isinstance(self.headroom_log2, int | float) and math.isfinite(self.headroom_log2)):
            bad(f"headroom_log2 must be a finite number (log2 units), got {self.headroom_log2!r}")
        if not (isinstance(self.sigma_k, int | float) and math.isfinite(self.sigma_k) and self.sigma_k > 0):
            bad(f"sigma_k must be a positive number, got {self.sigma_k!r}")
        if not (isinstance(self.calib_rows, int) and self.calib_rows >= 16 and isinstance(self.margin_rows, int)
                and self.margin_rows >= 1):
            bad(f"calib_rows must be >= 16 and margin_rows >= 1, got {self.calib_rows!r}, {self.margin_rows!r}")

    @property
    def integer(self) -> bool:
        """True when psums are integers (weights and activations quantized to ``wa_bits``)."""
        return self.wa_bits is not None


# ---------------------------------------------------------------------------------- the layer
class PsumQuantLayer(nn.Module):
    """A converted ``nn.Linear`` or ``nn.Conv2d``: keeps the original module (``.orig``, restored
    by :func:`unconvert`) and executes it with psum quantization. Weights are read once at
    conversion (call :func:`convert` again after changing them)."""

    def __init__(self, orig: nn.Module, config: PsumQuantConfig, name: str = "") -> None:
        super().__init__()
        if not isinstance(orig, nn.Linear | nn.Conv2d):
            raise PsumQuantError(f"cannot convert {type(orig).__name__}: only nn.Linear and nn.Conv2d")
        if isinstance(orig, nn.Conv2d) and orig.padding_mode != "zeros":
            raise PsumQuantError(f"{name or 'conv'}: padding_mode '{orig.padding_mode}' is not supported; use 'zeros'")
        self.orig = orig
        self.config = config
        self.layer_name = name
        self.mode = "run"  # 'run' | 'observe_act' | 'observe_psum'
        self.act_absmax = 0.0
        self.traffic: dict[str, float] | None = None
        w = orig.weight.detach().float()
        self.is_conv = isinstance(orig, nn.Conv2d)
        self.groups = orig.groups if self.is_conv else 1
        N = w.shape[0]
        w2 = w.reshape(N, -1)  # (N, K_total_per_group)
        self.n_per_group = N // self.groups
        self.w_scale = torch.ones(N)
        if config.wa_bits is not None:
            qmax = 2.0 ** (config.wa_bits - 1) - 1
            amax = w2.abs().amax(1)
            self.w_scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
            w2 = torch.round(w2 / self.w_scale[:, None]).clamp(-qmax, qmax)
        ng = self.n_per_group
        self.wd = [w2[i * ng : (i + 1) * ng].t().contiguous() for i in range(self.groups)]  # (K, N/groups)
        self.geom = Geom(self.wd[0].shape[0], ng, config.rows, config.cols)
        self.stats: list[CalibStats] | None = None
        self.policies: list[ScalePolicy] = []
        self._fit_cache: dict[tuple[Any, ...], list[ScalePolicy]] = {}
        self._w_cache: dict[tuple[str, int], torch.Tensor] = {}
        self._build_policies()

    # ------------------------------------------------------------------ policies
    def _ctx(self, gi: int) -> FitContext:
        c = self.config
        if c.wa_bits is not None:
            xb = 2.0 ** (c.wa_bits - 1) - 1
        else:
            xb = self.act_absmax
        return FitContext(
            g=self.geom, w=self.wd[gi], semantics=c.semantics, bits=c.bits, integer=c.integer, x_bound=float(xb),
            stats=self.stats[gi] if self.stats else None, sigma_k=float(c.sigma_k), scale_form=c.scale_form,
            overflow=c.overflow, calib_rows=c.calib_rows, margin_rows=c.margin_rows, headroom_log2=float(c.headroom_log2),
            seed=c.seed,
        )

    def _fit_key(self) -> tuple[Any, ...]:
        c = self.config
        return (c.policy, c.bits, c.semantics, c.overflow, c.scale_form, c.sigma_k, c.calib_rows, c.margin_rows,
                c.headroom_log2, c.seed)

    def _build_policies(self) -> None:
        """Fresh policies for the current config, fitted when possible; fits are cached per config
        (the fit depends on policy, bits, semantics, overflow, scale form and sampling, not on
        ``exact``/``backend``), so sweeping back and forth with :func:`reconfigure` is cheap."""
        key = self._fit_key()
        if key in self._fit_cache:
            self.policies = self._fit_cache[key]
            return
        self.policies = [make_policy(self.config.policy) for _ in range(self.groups)]
        if self.stats is not None or not self.policies[0].needs_calibration:
            if self.config.policy == "a2q" and self.config.wa_bits is None and self.stats is None:
                return  # a2q in the float domain needs the calibrated activation max
            for gi, p in enumerate(self.policies):
                p.fit(self._ctx(gi))
            self._fit_cache[key] = self.policies

    @property
    def calibrated(self) -> bool:
        return self.stats is not None

    # ------------------------------------------------------------------ forward
    def _as_rows(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """Input -> im2col rows (M, K_total) and the info needed to shape the output."""
        o = self.orig
        if not self.is_conv:
            return x.reshape(-1, x.shape[-1]), tuple(x.shape[:-1])
        if x.dim() == 3:
            x = x.unsqueeze(0)
        pad = o.padding
        if isinstance(pad, str):
            if pad == "valid":
                pad = (0, 0)
            else:  # 'same' (stride 1): pad total d*(k-1), the extra one on the right/bottom as torch does
                tot = [d * (k - 1) for d, k in zip(o.dilation, o.kernel_size, strict=True)]
                x = nn.functional.pad(x, (tot[1] // 2, tot[1] - tot[1] // 2, tot[0] // 2, tot[0] - tot[0] // 2))
                pad = (0, 0)
        B, _, H, W = x.shape
        cols = nn.functional.unfold(x, o.kernel_size, dilation=o.dilation, padding=pad, stride=o.stride)  # (B, K, L)
        Ho = (H + 2 * pad[0] - o.dilation[0] * (o.kernel_size[0] - 1) - 1) // o.stride[0] + 1
        Wo = (W + 2 * pad[1] - o.dilation[1] * (o.kernel_size[1] - 1) - 1) // o.stride[1] + 1
        return cols.transpose(1, 2).reshape(B * Ho * Wo, -1), (B, Ho, Wo)

    def _to_domain(self, x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | float]:
        """Rows (M, K) -> (psum-domain rows, activation scale): float32 rows and 1.0 without
        ``wa_bits``; integer-valued rows and the per-tensor scale (float) or the per-row scales
        (M, 1) tensor with ``act_granularity='token'``."""
        c = self.config
        if c.wa_bits is None:
            return x2.float(), 1.0
        qmax = 2.0 ** (c.wa_bits - 1) - 1
        if c.act_granularity == "token":
            s = token_scales(x2, c.wa_bits)
            return torch.round(x2.float() / s).clamp(-qmax, qmax), s
        if self.act_absmax <= 0:
            raise PsumQuantError(f"layer '{self.layer_name}' has no activation scale: call calibrate(model, batches) first")
        return torch.round(x2.float() / self.act_scale).clamp(-qmax, qmax), self.act_scale

    @property
    def act_scale(self) -> float:
        """Per-tensor activation step (real units per integer), from calibration (used with
        ``act_granularity='tensor'``)."""
        assert self.config.wa_bits is not None
        return self.act_absmax / (2.0 ** (self.config.wa_bits - 1) - 1) if self.act_absmax > 0 else 1.0

    def _gemm(self, xd: torch.Tensor, gi: int) -> torch.Tensor:
        """Psum-quantized GEMM of group ``gi`` in psum-domain units: (M, K) -> (M, N/groups)."""
        c, g, pol, w = self.config, self.geom, self.policies[gi], self.wd[gi]
        self._count(xd.shape[0])
        if c.policy == "none":
            if c.exact:
                a = xd.double().cpu()
                return (a @ w.double()).float().to(xd.device)
            return xd @ self._w_on(xd.device, gi)
        if not pol.fitted:
            raise PsumQuantError(
                f"layer '{self.layer_name}': policy '{c.policy}' is not fitted; call calibrate(model, batches) first"
            )
        ctx = self._ctx(gi)
        # policies live on the CPU: features are reduced on the input's device (M x K -> M x kf), then moved
        f = _cpu_features(tile_features(xd, g)) if pol.name == "psumquant" else _NO_FEATURES
        log2_step = pol.log2_step(xd.cpu() if pol.needs_psums else xd, f, ctx)
        inv, mult, shift = hw_steps(log2_step, c.scale_form, c.integer, pol.rounding)
        if c.exact:
            res = int_tiled_gemm(
                xd.cpu().numpy().astype(np.int64), w.cpu().numpy().astype(np.int64), c.rows, c.cols, c.bits,
                mult.numpy(), shift.numpy(), c.semantics, c.overflow, c.psum_bits,
            )
            return torch.from_numpy(res.value).float().to(xd.device)
        dev = xd.device
        return psumquant_matmul(xd, self._w_on(dev, gi), inv.to(dev), c.rows, c.cols, c.bits, c.semantics, c.overflow, c.backend)

    def _w_on(self, device: torch.device, gi: int) -> torch.Tensor:
        """The psum-domain weight of group ``gi`` on ``device`` (CPU master copy, cached per device)."""
        if device.type == "cpu":
            return self.wd[gi]
        key = (str(device), gi)
        if key not in self._w_cache:
            self._w_cache[key] = self.wd[gi].to(device)
        return self._w_cache[key]

    def integer_operands(self, x: torch.Tensor, group: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the integer-exact path feeds the array for input ``x`` (for bit-exact comparison with
        :func:`npukit.sim.cycle.run_gemm`): ``(a, w, mult, shift)``: int64 activations (M x K), int64
        weights (K x N), and the quantizer multiplier/shift broadcast to (M, nt) (buffer) or
        (M, kf, nt) (transfer). Needs ``wa_bits`` and a fitted, quantizing policy."""
        c = self.config
        if c.wa_bits is None or c.policy == "none":
            raise PsumQuantError("integer_operands needs wa_bits (integer psums) and a policy other than 'none'")
        rows, _ = self._as_rows(x.detach())
        xd = self._group_cols(self._to_domain(rows)[0], group).contiguous()
        pol, ctx = self.policies[group], self._ctx(group)
        if not pol.fitted:
            raise PsumQuantError(f"layer '{self.layer_name}': policy '{c.policy}' is not fitted; call calibrate first")
        f = tile_features(xd, self.geom) if pol.name == "psumquant" else _NO_FEATURES
        _, mult, shift = hw_steps(pol.log2_step(xd, f, ctx), c.scale_form, c.integer, pol.rounding)
        g = self.geom
        shp = (xd.shape[0], g.nt) if c.semantics == "buffer" else (xd.shape[0], g.kf, g.nt)
        return (xd.numpy().astype(np.int64), self.wd[group].numpy().astype(np.int64),
                np.broadcast_to(mult.numpy(), shp).copy(), np.broadcast_to(shift.numpy(), shp).copy())

    def _count(self, M: int) -> None:
        if self.traffic is None:
            return
        g = self.geom
        t = self.traffic
        t["gemms"] = t.get("gemms", 0) + 1
        t["outputs"] = t.get("outputs", 0) + M * g.N
        t["tile_psums"] = t.get("tile_psums", 0) + M * g.N * g.kf
        t["macs"] = t.get("macs", 0) + M * g.N * g.K

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not bool(torch.isfinite(x).all()):
            raise PsumQuantError(
                f"layer '{self.layer_name}' got NaN or infinite activations; check the model input and earlier layers"
            )
        if self.mode == "observe_act":
            self.act_absmax = max(self.act_absmax, float(x.detach().abs().max()) if x.numel() else 0.0)
            return self.orig(x)
        rows, shape = self._as_rows(x.detach())
        xd, s_act = self._to_domain(rows)
        if self.mode == "observe_psum":
            assert self.stats is not None
            gen = torch.Generator().manual_seed(self.config.seed + self.stats[0].batches)
            per_batch = max(16, self.config.calib_rows // 2)
            for gi in range(self.groups):
                self.stats[gi].update(self._group_cols(xd, gi).cpu(), self.wd[gi], per_batch, gen)
            return self.orig(x)
        with torch.no_grad():
            ys = [self._gemm(self._group_cols(xd, gi).contiguous(), gi) for gi in range(self.groups)]
            y = ys[0] if self.groups == 1 else torch.cat(ys, 1)
            if self.config.wa_bits is not None:
                y = y * (s_act * self.w_scale.to(y.device))
            if self.orig.bias is not None:
                y = y + self.orig.bias.detach().float()
        if not self.is_conv:
            return y.reshape(*shape, -1).to(x.dtype)
        B, Ho, Wo = shape
        y = y.reshape(B, Ho * Wo, -1).transpose(1, 2).reshape(B, -1, Ho, Wo)
        return (y.squeeze(0) if x.dim() == 3 else y).to(x.dtype)

    def _group_cols(self, xd: torch.Tensor, gi: int) -> torch.Tensor:
        if self.groups == 1:
            return xd
        k = self.geom.K
        return xd[:, gi * k : (gi + 1) * k]

    def extra_repr(self) -> str:
        c = self.config
        return f"{type(self.orig).__name__}, {c.rows}x{c.cols}, B={c.bits}, policy={c.policy}, {c.semantics}, {c.overflow}"


def token_scales(x2: torch.Tensor, wa_bits: int) -> torch.Tensor:
    """Per-row (per-token) symmetric activation scales (M, 1), real units per integer:
    ``max_k |x[m, k]| / (2^(wa_bits-1) - 1)``, 1.0 for an all-zero row."""
    amax = x2.detach().float().abs().amax(1, keepdim=True)
    return torch.where(amax > 0, amax / (2.0 ** (wa_bits - 1) - 1), torch.ones_like(amax))


_NO_FEATURES = TileFeatures(torch.zeros(0, 0), torch.zeros(0, 0), torch.zeros(0), torch.zeros(0))


def _cpu_features(f: TileFeatures) -> TileFeatures:
    def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.cpu()

    return TileFeatures(f.rms.cpu(), f.peak.cpu(), f.row_rms.cpu(), f.row_peak.cpu(), cpu(f.top_val), cpu(f.top_idx))


# ---------------------------------------------------------------------------------- matmul module
class PsumMatmul(nn.Module):
    """A converted :class:`Matmul` slot: ``forward(a, b)`` = psum-quantized ``a @ b`` for
    activation x activation products (attention), with every scale policy, calibrated ones included
    (fitted by :func:`calibrate` like the converted layers). ``a``: (..., M, K), ``b``: (..., K, N)
    with equal leading dims; returns a tensor of ``a``'s dtype. Operand scales are dynamic (per
    tensor, or per row of ``a`` / column of ``b`` with ``act_granularity='token'``); see
    :mod:`npukit.models._psum_matmul` for the policies. The original slot is ``.orig``."""

    def __init__(self, orig: nn.Module, config: PsumQuantConfig, name: str = "") -> None:
        super().__init__()
        if not isinstance(orig, Matmul):
            raise PsumQuantError(f"cannot convert {type(orig).__name__} to a PsumMatmul: only npukit Matmul slots")
        self.orig = orig
        self.config = config
        self.layer_name = name
        self.mode = "run"  # 'run' | 'fp32' | 'observe_psum'
        self.stats: MatmulStats | None = None
        self.policy = MatmulPolicy(config.policy)
        self._fit_cache: dict[tuple[Any, ...], MatmulPolicy] = {}
        self._build_policies()

    def _build_policies(self) -> None:
        key = fit_key(self.config)
        if key in self._fit_cache:
            self.policy = self._fit_cache[key]
            return
        self.policy = MatmulPolicy(self.config.policy)
        if self.policy.needs_calibration and self.stats is not None:
            if not self.stats.samples:
                raise PsumQuantError(f"matmul '{self.layer_name}' was never reached by the calibration batches")
            self.policy.fit(self.stats, self.config)
        elif not self.policy.needs_calibration and self.stats is not None:
            self.policy.fit(self.stats, self.config)  # calibration-free: only the fit report
        if self.policy.fitted:
            self._fit_cache[key] = self.policy

    @property
    def calibrated(self) -> bool:
        return self.stats is not None

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
            raise PsumQuantError(f"matmul '{self.layer_name}' needs (..., M, K) and (..., K, N) with equal leading dims, "
                                 f"got {tuple(a.shape)} and {tuple(b.shape)}")
        if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
            raise PsumQuantError(f"matmul '{self.layer_name}' got NaN or infinite inputs; check the earlier layers")
        c = self.config
        with torch.no_grad():
            ad, bd, scale = quantize_operands(a.detach(), b.detach(), c.wa_bits, c.act_granularity)
            M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
            a3, b3 = ad.reshape(-1, M, K), bd.reshape(-1, K, N)
            if self.mode == "fp32":
                return self.orig(a, b)
            if self.mode == "observe_psum":
                assert self.stats is not None
                gen = torch.Generator().manual_seed(c.seed + self.stats.batches)
                self.stats.update(a3.cpu(), b3.cpu(), c.rows, c.calib_rows, gen)
                return self.orig(a, b)
            if not self.policy.fitted:
                raise PsumQuantError(
                    f"matmul '{self.layer_name}': policy '{c.policy}' is not fitted; call calibrate(model, batches) first")
            y = self.policy.execute(a3, b3, c).reshape(*a.shape[:-2], M, N) * scale
        return y.to(a.dtype)

    def extra_repr(self) -> str:
        c = self.config
        return f"Matmul, {c.rows}x{c.cols}, B={c.bits}, policy={c.policy}, {c.semantics}, {c.overflow}, act={c.act_granularity}"


# ---------------------------------------------------------------------------------- model-level API
def psum_matmuls(model: nn.Module) -> list[tuple[str, PsumMatmul]]:
    """(qualified name, module) of every converted :class:`Matmul` slot, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumMatmul)]


def _converted(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumQuantLayer | PsumMatmul)]


def psum_layers(model: nn.Module) -> list[tuple[str, PsumQuantLayer]]:
    """(qualified name, layer) of every converted layer, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumQuantLayer)]


def _supported(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear | nn.Conv2d) and not isinstance(m, PsumQuantLayer)


def convert(
    model: nn.Module,
    config: PsumQuantConfig | None = None,
    calib_batches: Iterable[Any] | None = None,
    skip: Iterable[str] = (),
    matmuls: bool = False,
) -> nn.Module:
    """Swap every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` (in place; the root too) for a
    :class:`PsumQuantLayer`, and with ``matmuls=True`` every :class:`Matmul` slot (attention
    products) for a :class:`PsumMatmul`; a transformers model (anywhere in ``model``) first gets a slot
    pair for ``QK^T`` / ``PV`` on each attention module and the ``"npukit_psum"`` attention
    implementation (:mod:`npukit.models._psum_hf`; no model code is patched, :func:`unconvert` restores
    it). Then calibrate on ``calib_batches`` when given. ``skip``:
    qualified names of modules to leave alone. Returns the converted model (the same object unless the root
    itself is a Linear/Conv2d). Raises :class:`PsumQuantError` if nothing can be converted."""
    config = config or PsumQuantConfig()
    if not isinstance(config, PsumQuantConfig):
        raise PsumQuantError(f"config must be a PsumQuantConfig, got {type(config).__name__}")
    if not isinstance(model, nn.Module):
        raise PsumQuantError(f"convert needs a torch.nn.Module, got {type(model).__name__}")
    skip = set(skip)
    if not isinstance(matmuls, bool):
        raise PsumQuantError(f"matmuls must be True or False, got {matmuls!r}")
    if _converted(model):
        raise PsumQuantError("the model is already converted: use reconfigure(model, ...) or unconvert(model) first")
    if _supported(model):
        model = PsumQuantLayer(model, config, "")
    else:
        if matmuls:  # transformers models: Matmul slots on their attention modules, our attention implementation
            _psum_hf.install(model)
        targets = [(n, m) for n, m in model.named_modules()
                   if n and (_supported(m) or (matmuls and isinstance(m, Matmul))) and n not in skip]
        if not targets:
            what = "nn.Linear, nn.Conv2d or Matmul" if matmuls else "nn.Linear or nn.Conv2d"
            raise PsumQuantError(f"{type(model).__name__} has no {what} layer to convert")
        for name, mod in targets:
            parent, _, leaf = name.rpartition(".")
            new = PsumMatmul(mod, config, name) if isinstance(mod, Matmul) else PsumQuantLayer(mod, config, name)
            setattr(model.get_submodule(parent) if parent else model, leaf, new)
    if calib_batches is not None:
        calibrate(model, calib_batches)
    return model


def unconvert(model: nn.Module) -> nn.Module:
    """Put every original module back (the very objects that were converted); returns the model."""
    if isinstance(model, PsumQuantLayer):
        return model.orig
    for name, layer in _converted(model):
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, layer.orig)
    _psum_hf.uninstall(model)
    return model


def _run_batches(model: nn.Module, batches: list[Any]) -> None:
    for b in batches:
        if isinstance(b, dict):
            model(**b)
        elif isinstance(b, tuple | list):
            model(*b)
        else:
            model(b)


def calibrate(model: nn.Module, calib_batches: Iterable[Any]) -> nn.Module:
    """Run the calibration batches through the (fp32) model to fit every converted layer: the
    per-tensor activation scales (pass 1, when ``wa_bits`` is set), then the psum statistics and the
    policy fits (pass 2). Network weights are never changed. A batch is a tensor (``model(b)``), a
    tuple/list (``model(*b)``) or a dict (``model(**b)``). Returns the model."""
    layers = psum_layers(model)
    mms = psum_matmuls(model)
    if not layers and not mms:
        raise PsumQuantError("calibrate: the model has no converted layer; call convert(model, config) first")
    batches = list(calib_batches)
    if not batches:
        raise PsumQuantError("calibrate: calib_batches is empty; pass at least one batch of real inputs")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if any(layer.config.wa_bits is not None and layer.config.act_granularity == "tensor" for _, layer in layers):
                for _, layer in layers:
                    layer.mode, layer.act_absmax = "observe_act", 0.0
                for _, mm in mms:
                    mm.mode = "fp32"  # pass 1 runs the fp32 model
                _run_batches(model, batches)
            for _, layer in layers:
                layer.mode = "observe_psum"
                layer._fit_cache = {}
                layer.stats = [CalibStats(layer.geom) for _ in range(layer.groups)]
            for _, mm in mms:
                mm.mode, mm._fit_cache, mm.stats = "observe_psum", {}, MatmulStats()
            _run_batches(model, batches)
    finally:
        for _, layer in [*layers, *mms]:
            layer.mode = "run"
        model.train(was_training)
    for name, layer in layers:
        if layer.stats and layer.stats[0].batches == 0:
            raise PsumQuantError(f"calibrate: layer '{name}' was never reached by the calibration batches")
        layer._build_policies()
    for name, mm in mms:
        if mm.stats is not None and mm.stats.batches == 0:
            raise PsumQuantError(f"calibrate: matmul '{name}' was never reached by the calibration batches")
        mm._build_policies()
    return model


def reconfigure(model: nn.Module, **changes: Any) -> nn.Module:
    """Change config fields of every converted layer and refit its policy from the stored calibration
    statistics (no data pass): e.g. ``reconfigure(m, policy='static', bits=6, semantics='transfer')``.
    ``rows``, ``cols`` and ``wa_bits`` change the tiling or the number system: convert again."""
    layers = _converted(model)
    if not layers:
        raise PsumQuantError("reconfigure: the model has no converted layer; call convert(model, config) first")
    bad = [k for k in changes if k in _GEOMETRY_FIELDS]
    if bad:
        raise PsumQuantError(f"reconfigure cannot change {', '.join(bad)}: unconvert and convert again with a new config")
    unknown = [k for k in changes if k not in PsumQuantConfig.__dataclass_fields__]
    if unknown:
        raise PsumQuantError(f"reconfigure: unknown config field(s) {', '.join(unknown)}")
    for _, layer in layers:
        layer.config = replace(layer.config, **changes)
        layer._build_policies()
    return model


def fit_report(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Per converted layer: its policy's :meth:`fit_report` (group 0 for grouped convs) plus the
    geometry; per converted matmul (``kind: 'matmul'``): its policy's report. For ``psumquant`` it
    includes the predictor's MAE/RMSE/max error (log2 units) on the calibration tiles, the chosen margin and the coefficients."""
    out: dict[str, dict[str, Any]] = {}
    for name, layer in psum_layers(model):
        g = layer.geom
        rep = layer.policies[0].fit_report() if layer.policies else {}
        rep.update({"K": g.K, "N": g.N, "k_tiles": g.kf, "n_tiles": g.nt, "groups": layer.groups, "config": asdict(layer.config)})
        out[name or "<root>"] = rep
    for name, mm in psum_matmuls(model):  # shapes vary per call: no geometry
        out[name] = {**mm.policy.report, "config": asdict(mm.config)}
    return out


class PsumTraffic:
    """Context manager counting the psum traffic of the converted layers during forwards.

    ``record(ledger, scope=None)`` writes per layer (scope = layer name under ``scope``):

    * ``psum_buffer`` ``sram_write`` at W bits: M*N*kf (every K-tile writes each output),
      ``sram_read`` at W bits: M*N*(kf-1) (read-modify-write), ``psum_adder`` ``int_add`` at W bits:
      M*N*(kf-1), where W = B for buffer semantics and ``acc_bits`` for transfer semantics and for
      policy 'none' (unquantized psums);
    * ``psum_quantizer``: ``int_mult`` at (psum_bits, 16) per tile psum with ``mult_shift`` scales,
      and ``int_add`` at psum_bits (the rounding increment) per tile psum, unless policy is 'none';
    * ``pe_array`` ``mac`` at (wa, wa, psum_bits) (wa = ``wa_bits`` or 32): the layer's MACs.

    The psum_buffer SRAM needs a capacity for energy: pass ``arch`` (an :class:`npukit.sim.Arch`)
    to declare the simulator's components, or declare ``psum_buffer`` yourself. Converted attention
    matmuls (:class:`PsumMatmul`) are not counted."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = psum_layers(model)
        if not self.layers:
            raise PsumQuantError("PsumTraffic: the model has no converted layer; call convert(model, config) first")

    def __enter__(self) -> PsumTraffic:
        for _, layer in self.layers:
            layer.traffic = {}
        self.counts: dict[str, dict[str, float]] = {}
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, layer in self.layers:
            self.counts[name] = dict(layer.traffic or {})
            layer.traffic = None

    def record(self, ledger: Ledger, scope: str | None = None, arch: Any = None) -> Ledger:
        """Write the counted traffic into ``ledger`` (see the class docstring); returns it."""
        if arch is not None:
            from npukit.sim.simulator import declare_components

            declare_components(ledger, arch)
        for name, layer in self.layers:
            t = self.counts.get(name, {})
            if not t:
                continue
            c, g = layer.config, layer.geom
            sc = "/".join(p for p in (scope, name or "root") if p)
            quantized = c.policy != "none"
            w = c.bits if (quantized and c.semantics == "buffer") else c.acc_bits
            writes = t["tile_psums"]
            reads = t["tile_psums"] - t["outputs"]
            ledger.record("psum_buffer", "sram_write", w, writes, sc)
            ledger.record("psum_buffer", "sram_read", w, reads, sc)
            ledger.record("psum_adder", "int_add", w, reads, sc)
            if quantized:
                if c.scale_form == "mult_shift":
                    ledger.record("psum_quantizer", "int_mult", (c.psum_bits, 16), writes, sc)
                ledger.record("psum_quantizer", "int_add", c.psum_bits, writes, sc)
            wa = c.wa_bits or 32
            ledger.record("pe_array", "mac", (wa, wa, c.psum_bits), t["macs"], sc)
            _ = g
        return ledger


# ---------------------------------------------------------------------------------- functional matmul
def psum_matmul(a: torch.Tensor, b: torch.Tensor, config: PsumQuantConfig | None = None) -> torch.Tensor:
    """Psum-quantized ``a @ b`` for activation x activation products (attention), opt-in.

    ``a``: (..., M, K), ``b``: (..., K, N) with equal batch dims. Only calibration-free policies:
    ``none``, ``tile-max`` (oracle) and ``a2q`` (bound from the actual max |a|); for calibrated
    policies put a :class:`Matmul` slot in the model and ``convert(..., matmuls=True)``. With
    ``wa_bits`` both operands are quantized from their own max (dynamic): per tensor, or per row of
    ``a`` and column of ``b`` with ``act_granularity='token'``. Returns float32."""
    config = config or PsumQuantConfig(policy="tile-max")
    if config.policy not in ("none", "tile-max", "a2q"):
        raise PsumQuantError(
            f"psum_matmul supports the calibration-free policies none, tile-max and a2q, not '{config.policy}'; "
            "for calibrated policies use a Matmul slot and convert(model, config, calib, matmuls=True)"
        )
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise PsumQuantError(
            f"psum_matmul needs (..., M, K) and (..., K, N) with equal batch dims, got {tuple(a.shape)}, {tuple(b.shape)}"
        )
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        raise PsumQuantError("psum_matmul got NaN or infinite inputs")
    with torch.no_grad():
        a, b, scale = quantize_operands(a, b, config.wa_bits, config.act_granularity)
        batch = a.shape[:-2]
        a3 = a.reshape(-1, *a.shape[-2:])
        b3 = b.reshape(-1, *b.shape[-2:])
        outs = []
        for i in range(a3.shape[0]):
            outs.append(_matmul_one(a3[i], b3[i], config))
        y = torch.stack(outs).reshape(*batch, a.shape[-2], b.shape[-1])
    return y * scale


def _matmul_one(a: torch.Tensor, b: torch.Tensor, c: PsumQuantConfig) -> torch.Tensor:
    if c.policy == "none":
        return a @ b
    g = Geom(a.shape[1], b.shape[1], c.rows, c.cols)
    pol = make_policy(c.policy)
    xb = float(a.abs().max()) if c.wa_bits is None else 2.0 ** (c.wa_bits - 1) - 1
    ctx = FitContext(g=g, w=b, semantics=c.semantics, bits=c.bits, integer=c.integer, x_bound=xb,
                     scale_form=c.scale_form, overflow=c.overflow)
    pol.fit(ctx)
    inv, mult, shift = hw_steps(pol.log2_step(a, _NO_FEATURES, ctx), c.scale_form, c.integer, pol.rounding)
    if c.exact:
        res = int_tiled_gemm(a.cpu().numpy().astype(np.int64), b.cpu().numpy().astype(np.int64), c.rows, c.cols, c.bits,
                             mult.numpy(), shift.numpy(), c.semantics, c.overflow, c.psum_bits)
        return torch.from_numpy(res.value).float()
    return psumquant_matmul(a, b, inv.to(a.device), c.rows, c.cols, c.bits, c.semantics, c.overflow, c.backend)

