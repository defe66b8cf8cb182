"""The modules :func:`npukit.models.psumquant.convert` puts in a model: :class:`PsumQuantLayer` (an
``nn.Linear`` / ``nn.Conv2d`` run as a tiled GEMM with B-bit psums) and :class:`PsumMatmul` (a :class:`Matmul`
slot, activation x activation), and the functions that find them in a model."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from npukit.kernels.psumquant import psumquant_matmul

from ._config import PsumQuantConfig, PsumQuantError
from ._exec import CalibStats, Geom, TileFeatures, hw_steps, int_tiled_gemm, tile_features
from ._matmul import Matmul, MatmulPolicy, MatmulStats, fit_key, quantize_operands
from ._policies import FitContext, ScalePolicy, make_policy


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
            g=self.geom, w=self.wd[gi], semantics=c.semantics, bits=c.psum_buffer_bits, integer=c.integer, x_bound=float(xb),
            stats=self.stats[gi] if self.stats else None, sigma_k=float(c.sigma_k), scale_form=c.scale_form,
            overflow=c.overflow, calib_rows=c.calib_rows, margin_rows=c.margin_rows, headroom_log2=float(c.headroom_log2),
            seed=c.seed,
        )

    def _fit_key(self) -> tuple[Any, ...]:
        c = self.config
        return (c.policy, c.psum_buffer_bits, c.semantics, c.overflow, c.scale_form, c.sigma_k, c.calib_rows, c.margin_rows,
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
        f = _cpu_features(tile_features(xd, g)) if pol.name == "psumquant" else NO_FEATURES
        log2_step = pol.log2_step(xd.cpu() if pol.needs_psums else xd, f, ctx)
        inv, mult, shift = hw_steps(log2_step, c.scale_form, c.integer, pol.rounding)
        if c.exact:
            res = int_tiled_gemm(
                xd.cpu().numpy().astype(np.int64), w.cpu().numpy().astype(np.int64), c.rows, c.cols, c.psum_buffer_bits,
                mult.numpy(), shift.numpy(), c.semantics, c.overflow, c.pe_psum_bits,
            )
            return torch.from_numpy(res.value).float().to(xd.device)
        dev = xd.device
        return psumquant_matmul(xd, self._w_on(dev, gi), inv.to(dev), c.rows, c.cols, c.psum_buffer_bits, c.semantics,
                                c.overflow, c.backend)

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
        f = tile_features(xd, self.geom) if pol.name == "psumquant" else NO_FEATURES
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
        return (f"{type(self.orig).__name__}, {c.rows}x{c.cols}, "
                f"B={c.psum_buffer_bits}, policy={c.policy}, {c.semantics}, {c.overflow}")


def token_scales(x2: torch.Tensor, wa_bits: int) -> torch.Tensor:
    """Per-row (per-token) symmetric activation scales (M, 1), real units per integer:
    ``max_k |x[m, k]| / (2^(wa_bits-1) - 1)``, 1.0 for an all-zero row."""
    amax = x2.detach().float().abs().amax(1, keepdim=True)
    return torch.where(amax > 0, amax / (2.0 ** (wa_bits - 1) - 1), torch.ones_like(amax))


NO_FEATURES = TileFeatures(torch.zeros(0, 0), torch.zeros(0, 0), torch.zeros(0), torch.zeros(0))


def _cpu_features(f: TileFeatures) -> TileFeatures:
    def cpu(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.cpu()

    return TileFeatures(f.rms.cpu(), f.peak.cpu(), f.row_rms.cpu(), f.row_peak.cpu(), cpu(f.top_val), cpu(f.top_idx))


class PsumMatmul(nn.Module):
    """A converted :class:`Matmul` slot: ``forward(a, b)`` = psum-quantized ``a @ b`` for
    activation x activation products (attention), with every scale policy, calibrated ones included
    (fitted by :func:`calibrate` like the converted layers). ``a``: (..., M, K), ``b``: (..., K, N)
    with equal leading dims; returns a tensor of ``a``'s dtype. Operand scales are dynamic (per
    tensor, or per row of ``a`` / column of ``b`` with ``act_granularity='token'``); see
    :mod:`npukit.models.psumquant._matmul` for the policies. The original slot is ``.orig``."""

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
        return (f"Matmul, {c.rows}x{c.cols}, "
                f"B={c.psum_buffer_bits}, policy={c.policy}, {c.semantics}, {c.overflow}, act={c.act_granularity}")


def psum_matmuls(model: nn.Module) -> list[tuple[str, PsumMatmul]]:
    """(qualified name, module) of every converted :class:`Matmul` slot, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumMatmul)]


def converted(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, module) of every converted layer and matmul, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumQuantLayer | PsumMatmul)]


def psum_layers(model: nn.Module) -> list[tuple[str, PsumQuantLayer]]:
    """(qualified name, layer) of every converted layer, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, PsumQuantLayer)]


def convertible(m: nn.Module) -> bool:
    """True for an ``nn.Linear`` / ``nn.Conv2d`` that is not converted yet."""
    return isinstance(m, nn.Linear | nn.Conv2d) and not isinstance(m, PsumQuantLayer)
