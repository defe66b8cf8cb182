"""Psum scale policies: one interface, six policies (none, static, tile-max, a2q, sigma, psumquant).

A policy decides, for every psum tile of one GEMM, the *range* R it must represent (psum-domain
units); the quantizer step is ``R / (2^(B-1) - 1)``, rounded to hardware form (power of two, or
16-bit multiplier and shift) by :func:`npukit.models.psumquant._exec.hw_steps`. Ranges are per
(row, K-tile, N-tile) for transfer semantics and per (row, N-tile) for buffer semantics (the
psum buffer keeps one step per output for all K-tiles), or anything broadcastable to those.

* ``none``: no psum quantization (fp32 psums; the reference).
* ``static``: one range per layer: the max |psum| seen on the calibration data (buffer: of every
  running-sum prefix).
* ``tile-max``: oracle: the true max |psum| of each tile of the actual input (needs the psums before
  quantizing them: an upper bound that hardware cannot cheaply do).
* ``a2q``: worst case, input independent (as Brevitas A2Q): ``max_col ||w_col||_1 * max|x|`` per
  N-tile (transfer: per K-tile slice of w), with max|x| the largest representable activation
  (2^(b-1)-1 in the integer domain) or the calibrated max in the float domain. Never clips.
* ``sigma``: clip at mu +- k sigma of the calibration psums per array column tile (as ColumnQuant),
  per (K-tile, N-tile) for transfer, per N-tile over the running sums for buffer; k = ``sigma_k``.
* ``psumquant``: the learnable predictor of :mod:`npukit.models.psumquant._predictor` (crest factor, RMS,
  tile position, weight norm, top-8 peaks times their weight rows -> log2 range) plus a per-layer head-room margin picked on the
  calibration rows among quantiles of the fit residuals and fixed clipping offsets (-3..-0.5 log2):
  the one minimising the layer's output MSE under the actual B-bit execution; plus the config's
  ``headroom_log2`` (default 0); rounded to the nearest hardware step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from npukit.kernels.psumquant import psumquant_matmul

from ._exec import LOG2_FLOOR, CalibStats, Geom, TileFeatures, hw_steps, log2_qmax, oracle_ranges, safe_log2, tile_features
from ._predictor import ScalePredictor, weight_absmax, weight_norms

POLICIES = ("none", "static", "tile-max", "a2q", "sigma", "psumquant")


@dataclass
class FitContext:
    """What a policy may use: geometry, the layer's weight in psum-domain units (K x N), the
    calibration statistics (None for calibration-free use) and the execution settings."""

    g: Geom
    w: torch.Tensor
    semantics: str
    bits: int
    integer: bool
    x_bound: float  # largest |x| the a2q bound assumes (psum-domain units)
    stats: CalibStats | None = None
    sigma_k: float = 3.0
    scale_form: str = "pow2"
    overflow: str = "saturate"
    calib_rows: int = 1024
    margin_rows: int = 512
    headroom_log2: float = 0.0
    seed: int = 0


class ScalePolicy:
    """Base class. Subclasses set ``name``, ``needs_calibration``, ``rounding`` and implement
    :meth:`_fit` and :meth:`log2_range`."""

    name: ClassVar[str] = "?"
    needs_calibration: ClassVar[bool] = False
    needs_psums: ClassVar[bool] = False  # True for the oracle (reads the psums before quantizing)
    rounding: ClassVar[str] = "ceil"  # how the continuous step is rounded to hardware form

    def __init__(self) -> None:
        self.fitted = False
        self._report: dict[str, Any] = {"policy": self.name}

    def fit(self, ctx: FitContext) -> None:
        """Fit on the calibration statistics in ``ctx`` (network weights are never changed)."""
        self._fit(ctx)
        self.fitted = True
        if ctx.stats is not None and self.name != "none":
            self._range_error(ctx)

    def _fit(self, ctx: FitContext) -> None:
        pass

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        """log2 of the psum range to represent, broadcastable to (M, nt) / (M, kf, nt)."""
        raise NotImplementedError

    def log2_step(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        """Continuous log2 step (psum-domain units per LSB) before hardware rounding."""
        return self.log2_range(x, f, ctx) - log2_qmax(ctx.bits)

    def fit_report(self) -> dict[str, Any]:
        """What the fit found; every policy reports ``range_mae_log2`` (mean |log2 range - log2 true
        range| over the calibration rows' tiles) and ``clip_frac`` (fraction of tiles whose true range
        exceeds the policy's range after hardware rounding)."""
        return dict(self._report)

    def _range_error(self, ctx: FitContext) -> None:
        gen = torch.Generator().manual_seed(ctx.seed + 1)
        xs = ctx.stats.sample_rows(ctx.margin_rows, gen)
        if xs.shape[0] == 0:
            return
        f = tile_features(xs, ctx.g)
        true = safe_log2(oracle_ranges(xs, ctx.w, ctx.g, ctx.semantics))
        pred = torch.broadcast_to(self.log2_range(xs, f, ctx), true.shape)
        inv, _, _ = hw_steps(pred - log2_qmax(ctx.bits), ctx.scale_form, ctx.integer, self.rounding)
        hw_range = safe_log2((2.0 ** (ctx.bits - 1) - 1) / inv.double()).float()
        live = true > LOG2_FLOOR + 1
        if bool(live.any()):
            self._report["range_mae_log2"] = float((pred - true)[live].abs().mean())
            self._report["clip_frac"] = float((true > hw_range + 1e-6)[live].float().mean())


class NonePolicy(ScalePolicy):
    name = "none"

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        raise RuntimeError("policy 'none' does not quantize psums")


class StaticPolicy(ScalePolicy):
    name = "static"
    needs_calibration = True

    def _fit(self, ctx: FitContext) -> None:
        s = ctx.stats
        rng = s.tile_max.max() if ctx.semantics == "transfer" else s.run_max.max()
        self.range_log2 = float(safe_log2(rng.reshape(1)))
        self._report["range_log2"] = self.range_log2

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        return torch.full((1, 1, 1) if ctx.semantics == "transfer" else (1, 1), self.range_log2)


class TileMaxPolicy(ScalePolicy):
    name = "tile-max"
    needs_psums = True

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        return safe_log2(oracle_ranges(x, ctx.w, ctx.g, ctx.semantics))


class A2QPolicy(ScalePolicy):
    name = "a2q"

    def _fit(self, ctx: FitContext) -> None:
        g = ctx.g
        w = ctx.w.abs().float()
        wp = torch.nn.functional.pad(w, (0, g.nt * g.cols - g.N, 0, g.kf * g.rows - g.K))
        l1 = wp.view(g.kf, g.rows, g.nt, g.cols).sum(1)  # (kf, nt, cols)
        if ctx.semantics == "transfer":
            bound = l1.amax(2)[None]  # (1, kf, nt)
        else:
            bound = l1.sum(0).amax(1)[None]  # (1, nt)
        self.range = safe_log2(bound * ctx.x_bound)
        self._report["x_bound"] = ctx.x_bound

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        if not self.fitted:
            self.fit(ctx)
        return self.range


class SigmaPolicy(ScalePolicy):
    name = "sigma"
    needs_calibration = True

    def _fit(self, ctx: FitContext) -> None:
        s = ctx.stats
        if ctx.semantics == "transfer":
            n, sm, sq = s.tile_n.clamp_min(1), s.tile_sum, s.tile_sumsq
        else:
            n, sm, sq = s.run_n.clamp_min(1), s.run_sum, s.run_sumsq
        mu = sm / n
        sd = (sq / n - mu * mu).clamp_min(0).sqrt()
        rng = torch.maximum((mu - ctx.sigma_k * sd).abs(), (mu + ctx.sigma_k * sd).abs())
        self.range = safe_log2(rng)[None]
        self._report["sigma_k"] = ctx.sigma_k

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        return self.range


class PsumQuantPolicy(ScalePolicy):
    """The learnable input-aware predictor (see :mod:`npukit.models.psumquant._predictor`)."""

    name = "psumquant"
    needs_calibration = True
    rounding = "nearest"
    QUANTILES = (0.25, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0)
    CRITERION = "mse"

    def _fit(self, ctx: FitContext) -> None:
        gen = torch.Generator().manual_seed(ctx.seed)
        xs = ctx.stats.sample_rows(ctx.calib_rows, gen)
        self.pred = ScalePredictor(ctx.g, ctx.semantics, wmax=weight_absmax(ctx.w, ctx.g))
        self.wn = weight_norms(ctx.w, ctx.g, ctx.semantics)
        f = tile_features(xs, ctx.g)
        target = safe_log2(oracle_ranges(xs, ctx.w, ctx.g, ctx.semantics))
        rep = self.pred.fit(f, self.wn, target)
        self.margin = 0.0
        # head-room: the residual quantile whose margin gives the lowest output MSE on calibration rows
        xm = xs[: ctx.margin_rows]
        tried: dict[str, float] = {}
        if xm.shape[0] and rep["n_tiles"] > 0:
            fm = tile_features(xm, ctx.g)
            ref = xm @ ctx.w
            base = self.pred.predict(fm, self.wn)
            best = math.inf
            top = self.pred.residual_quantile(1.0)
            cands = sorted({round(self.pred.residual_quantile(q), 4) for q in self.QUANTILES} | {0.0}
                           | {round(top + d, 4) for d in (0.5, 1.0)} | {-0.5, -1.0, -1.5, -2.0, -3.0})
            for m in cands:
                inv, _, _ = hw_steps(base + m - log2_qmax(ctx.bits), ctx.scale_form, ctx.integer, self.rounding)
                y = psumquant_matmul(xm, ctx.w, inv, ctx.g.rows, ctx.g.cols, ctx.bits, ctx.semantics, ctx.overflow, "torch")
                err = _margin_loss(y, ref, self.CRITERION)
                tried[f"{m:+.3f}"] = err
                if err < best:
                    best, self.margin = err, m
        self.margin += ctx.headroom_log2
        self._report.update({f"predictor_{k}": v for k, v in rep.items()})
        self._report["margin_log2"] = self.margin
        self._report["margin_mse"] = tried
        self._report["predictor"] = self.pred.describe()

    def log2_range(self, x: torch.Tensor, f: TileFeatures, ctx: FitContext) -> torch.Tensor:
        return self.pred.predict(f, self.wn) + self.margin


def _margin_loss(y: torch.Tensor, ref: torch.Tensor, criterion: str) -> float:
    """Output error of a candidate margin: 'mse' (mean squared error), 'row' (mean over rows of the
    row's squared error relative to the row's energy: every token/pixel counts the same)."""
    e = (y - ref).square()
    if criterion == "mse":
        return float(e.mean())
    den = ref.square().sum(1)
    live = den > 0
    return float((e.sum(1)[live] / den[live]).mean()) if bool(live.any()) else 0.0


_CLASSES: dict[str, type[ScalePolicy]] = {
    c.name: c for c in (NonePolicy, StaticPolicy, TileMaxPolicy, A2QPolicy, SigmaPolicy, PsumQuantPolicy)
}


def make_policy(name: str) -> ScalePolicy:
    """A fresh, unfitted policy by name (one of :data:`POLICIES`); KeyError if unknown."""
    return _CLASSES[name]()
