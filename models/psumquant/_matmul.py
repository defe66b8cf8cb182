"""Psum-quantized activation x activation matmuls (attention ``QK^T`` and ``PV``) with every scale policy.

A model marks such a product with a :class:`Matmul` slot (``self.qk = Matmul()``, then
``self.qk(q, k.transpose(-1, -2))`` is plain ``q @ k^T``). ``convert(model, config, calib,
matmuls=True)`` swaps every slot for a :class:`PsumMatmul`, which runs ``a @ b`` (``a``: (..., M, K),
``b``: (..., K, N), equal leading dims; every leading index, e.g. batch x head, is one *slice*) as the
R x C weight-stationary array would, with ``b`` as the stationary operand: K-tiles of ``rows``,
N-tiles of ``cols``, B-bit psums with the layer semantics (``buffer`` / ``transfer``, ``saturate`` /
``wrap``) of :mod:`npukit.models.psumquant`.

Operands (both are activations, so their scales are dynamic, computed when they reach the array):
``wa_bits=None``: float32; ``act_granularity='tensor'``: one symmetric scale per operand tensor
(max |a|, max |b| over the whole call); ``'token'``: one per row of ``a`` (query token / attention
row) and one per column of ``b`` (key token for ``K^T``; head channel for ``V``). Either way the
psums of an output (m, n) are integers in units of ``s_a[m] s_b[n]``, so the psum quantizer works
on integers and the result is ``psum * s_a * s_b``.

Policies: one per module, shared by all slices; shapes change from call to call (sequence length),
so nothing is tied to a fixed N-tile:

* ``none``, ``tile-max`` (oracle), ``a2q`` (per slice: max over the N-tile's columns of ``||b_col||_1``
  times the largest |a|: ``2^(wa_bits-1) - 1`` in the integer domain, the slice's max |a| in float):
  calibration-free.
* ``static``: one range per module, the max |psum| (buffer: of every running-sum prefix) over all
  calibration slices.
* ``sigma``: ``mu +- k sigma`` of all calibration psums pooled (the columns of an activation operand
  are tokens or head channels, not fixed array columns with their own statistics).
* ``psumquant``: the predictor of :mod:`npukit.models.psumquant._predictor` with the same input-tile
  features and the same "weight" features computed from ``b`` at run time, when it is loaded into the
  array (max column L2 norm per N-tile, top-8 |a| times the |b| row maxima), without the per-N-tile
  one-hot (N changes with the sequence); one coefficient vector fitted by ridge over calibration
  slices of every shape, plus a head-room margin chosen by output MSE on those slices (the layer
  candidates), plus ``headroom_log2``.

Execution: a batched torch path (float32, all slices at once; equal to the 2-D torch path of
:func:`npukit.kernels.psumquant.psumquant_matmul` slice by slice), or ``exact=True``: the integer-exact
NumPy path (:func:`npukit.models.psumquant._exec.int_tiled_gemm`) per slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ._exec import LOG2_FLOOR, Geom, TileFeatures, hw_steps, int_tiled_gemm, log2_qmax, safe_log2, tile_features
from ._predictor import ridge_fit

QUANTILES = (0.25, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0)  # residual quantiles tried as psumquant margins


class Matmul(nn.Module):
    """``a @ b`` as a module, so that :func:`npukit.models.psumquant.convert` (``matmuls=True``) can
    put an activation x activation product (attention) on the array. No parameters."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


# ---------------------------------------------------------------------------------- operands
def quantize_operands(a: torch.Tensor, b: torch.Tensor, wa_bits: int | None,
                      granularity: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | float]:
    """(a, b) -> (a in psum-domain units, b in psum-domain units, output scale): float32 and 1.0
    without ``wa_bits``; else symmetric integers with dynamic scales per tensor (``'tensor'``; the
    scale is a 0-dim tensor) or per row of ``a`` and per column of ``b`` (``'token'``; the scale
    broadcasts to (..., M, N)). Real result = psum-domain result * scale."""
    a, b = a.float(), b.float()
    if wa_bits is None:
        return a, b, 1.0
    qmax = 2.0 ** (wa_bits - 1) - 1
    if granularity == "token":
        sa, sb = a.abs().amax(-1, keepdim=True), b.abs().amax(-2, keepdim=True)
    else:
        sa, sb = a.abs().amax(), b.abs().amax()
    sa = torch.where(sa > 0, sa / qmax, torch.ones_like(sa))
    sb = torch.where(sb > 0, sb / qmax, torch.ones_like(sb))
    return torch.round(a / sa).clamp(-qmax, qmax), torch.round(b / sb).clamp(-qmax, qmax), sa * sb


# ---------------------------------------------------------------------------------- batched tiles
def _geom(a3: torch.Tensor, b3: torch.Tensor, rows: int, cols: int) -> Geom:
    return Geom(a3.shape[2], b3.shape[2], rows, cols)


def _absmax_nt(p: torch.Tensor, g: Geom) -> torch.Tensor:
    """(S, M, N) -> (S, M, nt): max |p| over each N-tile's columns."""
    S, M, _ = p.shape
    pad = g.nt * g.cols - g.N
    pp = torch.nn.functional.pad(p.abs(), (0, pad)) if pad else p.abs()
    return pp.view(S, M, g.nt, g.cols).amax(3)


def _per_col(v: torch.Tensor, g: Geom) -> torch.Tensor:
    """(S, M, nt) -> (S, M, N) repeating each N-tile value over its columns."""
    return v.repeat_interleave(g.cols, dim=-1)[..., : g.N]


def oracle_ranges3(a3: torch.Tensor, b3: torch.Tensor, g: Geom, semantics: str) -> torch.Tensor:
    """True psum ranges per slice: transfer (S, M, kf, nt) of each K-tile psum; buffer (S, M, nt) of
    the running sum over every K-tile prefix (psum-domain units)."""
    S, M = a3.shape[:2]
    if semantics == "transfer":
        out = torch.empty(S, M, g.kf, g.nt, device=a3.device)
        for t in range(g.kf):
            k0, k1 = t * g.rows, min(g.K, (t + 1) * g.rows)
            out[:, :, t] = _absmax_nt(a3[:, :, k0:k1] @ b3[:, k0:k1], g)
        return out
    run = torch.zeros(S, M, g.N, device=a3.device)
    best = torch.zeros(S, M, g.nt, device=a3.device)
    for t in range(g.kf):
        k0, k1 = t * g.rows, min(g.K, (t + 1) * g.rows)
        run += a3[:, :, k0:k1] @ b3[:, k0:k1]
        best = torch.maximum(best, _absmax_nt(run, g))
    return best


def bmm_psum(a3: torch.Tensor, b3: torch.Tensor, inv: torch.Tensor, rows: int, cols: int, bits: int,
             semantics: str = "buffer", overflow: str = "saturate") -> torch.Tensor:
    """Batched psum-quantized ``a3 @ b3`` ((S, M, K) @ (S, K, N) -> (S, M, N), float32): slice by
    slice the torch path of :func:`npukit.kernels.psumquant.psumquant_matmul` (same operations in
    the same order). ``inv`` (1/step) broadcasts to (S, M, nt) (buffer) or (S, M, kf, nt) (transfer)."""
    a3, b3 = a3.float(), b3.float()
    S, M, K = a3.shape
    g = Geom(K, b3.shape[2], rows, cols)
    if K == 0:
        return torch.zeros(S, M, g.N, device=a3.device)
    shape = (S, M, g.nt) if semantics == "buffer" else (S, M, g.kf, g.nt)
    inv = torch.broadcast_to(inv.float().to(a3.device), shape)
    step = 1.0 / inv
    lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1
    span = 2.0**bits

    def ovf(v: torch.Tensor) -> torch.Tensor:
        return v.clamp(lo, hi) if overflow == "saturate" else (v - lo).remainder(span) + lo

    acc: torch.Tensor | None = None
    for t in range(g.kf):
        k0, k1 = t * rows, min(K, (t + 1) * rows)
        p = a3[:, :, k0:k1] @ b3[:, k0:k1]
        if semantics == "buffer":
            q = (p * _per_col(inv, g)).round().clamp(lo, hi)
            acc = q if acc is None else ovf(acc + q)
        else:
            q = ovf((p * _per_col(inv[:, :, t], g)).round()) * _per_col(step[:, :, t], g)
            acc = q if acc is None else acc + q
    assert acc is not None
    return acc * _per_col(step, g) if semantics == "buffer" else acc


# ---------------------------------------------------------------------------------- predictor features
def matmul_features(a3: torch.Tensor, b3: torch.Tensor, g: Geom, semantics: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(design matrix, all-zero mask) of every psum tile of the slices: buffer (S, M, nt, 8) with
    1, log2 row RMS, log2 row crest, mean and max over K-tiles of the tile log2 crest, log2 max tile
    RMS, log2 max column L2 norm of b over the N-tile, log2 peak-times-b; transfer (S, M, kf, nt, 6)
    with 1, log2 tile RMS, log2 tile crest, log2 max column L2 norm of b's K-tile slice, tile
    position t / kf, log2 peak-times-b (see :mod:`npukit.models.psumquant._predictor`)."""
    S, M, K = a3.shape
    f: TileFeatures = tile_features(a3.reshape(S * M, K), g)
    wp = torch.nn.functional.pad(b3.float().abs(), (0, g.nt * g.cols - g.N, 0, g.kf * g.rows - g.K))
    wmax = wp.view(S, g.kf * g.rows, g.nt, g.cols).amax(3)  # (S, Kp, nt)
    sq = wp.square().view(S, g.kf, g.rows, g.nt, g.cols).sum(2)  # (S, kf, nt, cols)
    assert f.top_val is not None and f.top_idx is not None
    if semantics == "transfer":
        kf, nt = g.kf, g.nt
        lr = safe_log2(f.rms).view(S, M, kf)
        lc = safe_log2(f.peak).view(S, M, kf) - lr
        wn = safe_log2(sq.amax(3).sqrt())  # (S, kf, nt)
        k8 = f.top_val.shape[2]
        v, idx = f.top_val.float().view(S, M, kf, k8), f.top_idx.view(S, M, kf, k8)
        gathered = wmax[torch.arange(S).view(S, 1, 1, 1), idx]  # (S, M, kf, k8, nt)
        pw = safe_log2((v[..., None] * gathered).sum(3))  # (S, M, kf, nt)
        pos = (torch.arange(kf, dtype=torch.float32) / max(1, kf)).view(1, 1, kf, 1).expand(S, M, kf, nt)
        shp = (S, M, kf, nt)
        X = torch.stack([torch.ones(shp), lr[..., None].expand(shp), lc[..., None].expand(shp),
                         wn[:, None].expand(shp), pos, pw], -1)
        return X, (f.peak == 0).view(S, M, kf, 1).expand(shp)
    nt = g.nt
    lr = safe_log2(f.row_rms)
    lc = safe_log2(f.row_peak) - lr
    tl = safe_log2(f.rms)
    tc = safe_log2(f.peak) - tl
    valid = f.rms > 0
    mean_tc = torch.where(valid, tc, torch.zeros_like(tc)).sum(1) / valid.sum(1).clamp_min(1)
    max_tc = torch.where(valid, tc, torch.full_like(tc, -1e9)).amax(1).clamp_min(0)
    per_row = torch.stack([torch.ones_like(lr), lr, lc, mean_tc, max_tc, tl.amax(1)], -1).view(S, M, 1, 6)
    wn = safe_log2(sq.sum(1).amax(2).sqrt())  # (S, nt)
    v, idx = f.top_val.float().reshape(S * M, -1), f.top_idx.reshape(S * M, -1)
    v, j = v.topk(min(v.shape[1], f.top_val.shape[2]), dim=1)
    idx = idx.gather(1, j)
    k = v.shape[1]
    gathered = wmax[torch.arange(S).view(S, 1, 1), idx.view(S, M, k)]  # (S, M, k, nt)
    pw = safe_log2((v.view(S, M, k, 1) * gathered).sum(2))  # (S, M, nt)
    X = torch.cat([per_row.expand(S, M, nt, 6), wn[:, None, :, None].expand(S, M, nt, 1), pw[..., None]], -1)
    return X, (f.row_peak == 0).view(S, M, 1).expand(S, M, nt)


# ---------------------------------------------------------------------------------- calibration
@dataclass
class MatmulStats:
    """Calibration statistics of one matmul module, pooled over every slice (psum-domain units):
    max |psum|, sum, sum of squares and count of the K-tile psums (``tile_*``) and of the running
    sums of every prefix (``run_*``); ``samples``: (a3, b3) slices kept for the predictor fit."""

    tile_max: float = 0.0
    tile_sum: float = 0.0
    tile_sumsq: float = 0.0
    tile_n: float = 0.0
    run_max: float = 0.0
    run_sum: float = 0.0
    run_sumsq: float = 0.0
    run_n: float = 0.0
    samples: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    batches: int = 0

    def update(self, a3: torch.Tensor, b3: torch.Tensor, rows: int, keep_rows: int, gen: torch.Generator) -> None:
        S, M, K = a3.shape
        run = torch.zeros(S, M, b3.shape[2])
        for k0 in range(0, K, rows):
            p = (a3[:, :, k0:k0 + rows] @ b3[:, k0:k0 + rows]).double()
            run += p.float()
            r = run.double()
            self.tile_max = max(self.tile_max, float(p.abs().max()) if p.numel() else 0.0)
            self.run_max = max(self.run_max, float(r.abs().max()) if r.numel() else 0.0)
            self.tile_sum += float(p.sum())
            self.tile_sumsq += float(p.square().sum())
            self.tile_n += p.numel()
            self.run_sum += float(r.sum())
            self.run_sumsq += float(r.square().sum())
            self.run_n += r.numel()
        take = min(S, max(1, math.ceil(keep_rows / max(1, M))))
        idx = torch.randperm(S, generator=gen)[:take]
        self.samples.append((a3[idx].clone(), b3[idx].clone()))
        self.batches += 1


# ---------------------------------------------------------------------------------- policies
class MatmulPolicy:
    """The scale policy of one :class:`PsumMatmul` (see the module docstring); ``c`` is a
    :class:`npukit.models.psumquant.PsumQuantConfig`."""

    CALIBRATED = ("static", "sigma", "psumquant")

    def __init__(self, name: str) -> None:
        self.name = name
        self.needs_calibration = name in self.CALIBRATED
        self.rounding = "nearest" if name == "psumquant" else "ceil"
        self.fitted = not self.needs_calibration
        self.range = torch.tensor(LOG2_FLOOR)
        self.theta: torch.Tensor | None = None
        self.margin = 0.0
        self.report: dict[str, Any] = {"policy": name, "kind": "matmul"}

    def _dims(self, c: Any) -> tuple[int, ...]:
        return (1, 1, 1) if c.semantics == "buffer" else (1, 1, 1, 1)

    def fit(self, stats: MatmulStats, c: Any) -> None:
        buf = c.semantics == "buffer"
        if self.name == "static":
            self.range = safe_log2(torch.tensor(stats.run_max if buf else stats.tile_max)).view(self._dims(c))
            self.report["range_log2"] = float(self.range)
        elif self.name == "sigma":
            n = max(1.0, stats.run_n if buf else stats.tile_n)
            mu = (stats.run_sum if buf else stats.tile_sum) / n
            sd = math.sqrt(max(0.0, (stats.run_sumsq if buf else stats.tile_sumsq) / n - mu * mu))
            rng = max(abs(mu - c.sigma_k * sd), abs(mu + c.sigma_k * sd))
            self.range = safe_log2(torch.tensor(rng)).view(self._dims(c))
            self.report["sigma_k"] = float(c.sigma_k)
        elif self.name == "psumquant":
            self._fit_predictor(stats, c)
        self.fitted = True
        if self.name != "none":
            self._range_error(stats, c)

    def _fit_predictor(self, stats: MatmulStats, c: Any) -> None:
        Xs, ys = [], []
        for a3, b3 in stats.samples:
            g = _geom(a3, b3, c.rows, c.cols)
            X, zero = matmul_features(a3, b3, g, c.semantics)
            y = safe_log2(oracle_ranges3(a3, b3, g, c.semantics))
            keep = ~zero & (y > LOG2_FLOOR + 1)
            Xs.append(X[keep].reshape(-1, X.shape[-1]))
            ys.append(y[keep].reshape(-1))
        X, y = torch.cat(Xs), torch.cat(ys)
        if y.numel() == 0:
            self.theta = torch.zeros(X.shape[-1], dtype=torch.float64)
            self.theta[0] = LOG2_FLOOR
            self.report.update({"predictor_n_tiles": 0.0, "margin_log2": 0.0})
            return
        self.theta, rep, res = ridge_fit(X, y)
        self.margin = 0.0
        q = [float(torch.quantile(res, v)) if res.numel() < 2**24 else float(res.max()) for v in QUANTILES]
        top = q[-1]
        cands = sorted({round(v, 4) for v in q} | {0.0} | {round(top + d, 4) for d in (0.5, 1.0)}
                       | {-0.5, -1.0, -1.5, -2.0, -3.0})
        tried: dict[str, float] = {}
        best, chosen = math.inf, 0.0
        for m in cands:
            self.margin = m
            err = n = 0.0
            for a3, b3 in stats.samples:
                y_q = self.execute(a3, b3, c)
                err += float((y_q - a3 @ b3).double().square().sum())
                n += y_q.numel()
            tried[f"{m:+.3f}"] = err / max(1.0, n)
            if tried[f"{m:+.3f}"] < best:
                best, chosen = tried[f"{m:+.3f}"], m
        self.margin = chosen + float(c.headroom_log2)
        self.report.update({f"predictor_{k}": v for k, v in rep.items()})
        self.report.update({"margin_log2": self.margin, "margin_mse": tried,
                            "predictor": ", ".join(f"{float(t):+.3f}" for t in self.theta)})

    def _range_error(self, stats: MatmulStats, c: Any) -> None:
        err, clip, n = 0.0, 0.0, 0
        for a3, b3 in stats.samples:
            g = _geom(a3, b3, c.rows, c.cols)
            true = safe_log2(oracle_ranges3(a3, b3, g, c.semantics))
            pred = torch.broadcast_to(self.log2_range(a3, b3, g, c), true.shape)
            inv, _, _ = hw_steps(pred - log2_qmax(c.psum_buffer_bits), c.scale_form, c.wa_bits is not None, self.rounding)
            hw_range = safe_log2((2.0 ** (c.psum_buffer_bits - 1) - 1) / inv.double()).float()
            live = true > LOG2_FLOOR + 1
            err += float((pred - true)[live].abs().sum())
            clip += float((true > hw_range + 1e-6)[live].sum())
            n += int(live.sum())
        if n:
            self.report["range_mae_log2"] = err / n
            self.report["clip_frac"] = clip / n

    def log2_range(self, a3: torch.Tensor, b3: torch.Tensor, g: Geom, c: Any) -> torch.Tensor:
        """log2 of the psum range per tile, broadcastable to (S, M, nt) / (S, M, kf, nt)."""
        if self.name == "tile-max":
            return safe_log2(oracle_ranges3(a3, b3, g, c.semantics))
        if self.name == "a2q":
            S = a3.shape[0]
            wp = torch.nn.functional.pad(b3.abs(), (0, g.nt * g.cols - g.N, 0, g.kf * g.rows - g.K))
            l1 = wp.view(S, g.kf, g.rows, g.nt, g.cols).sum(2)  # (S, kf, nt, cols)
            xb = (torch.full((S,), 2.0 ** (c.wa_bits - 1) - 1, device=b3.device) if c.wa_bits is not None
                  else a3.abs().amax((1, 2)).to(b3.device))
            if c.semantics == "transfer":
                return safe_log2(l1.amax(3) * xb.view(S, 1, 1))[:, None]  # (S, 1, kf, nt)
            return safe_log2(l1.sum(1).amax(2) * xb.view(S, 1))[:, None]  # (S, 1, nt)
        if self.name == "psumquant":
            assert self.theta is not None
            X, zero = matmul_features(a3, b3, g, c.semantics)
            out = (X.double() @ self.theta).float() + self.margin
            return torch.where(zero, torch.full_like(out, LOG2_FLOOR), out)
        return self.range

    def execute(self, a3: torch.Tensor, b3: torch.Tensor, c: Any) -> torch.Tensor:
        """Psum-quantized ``a3 @ b3`` (psum-domain units) under this policy: (S, M, N) float32."""
        if self.name == "none":
            return (a3.double() @ b3.double()).float() if c.exact else a3 @ b3
        g = _geom(a3, b3, c.rows, c.cols)
        S, M = a3.shape[:2]
        shape = (S, M, g.nt) if c.semantics == "buffer" else (S, M, g.kf, g.nt)
        log2_step = torch.broadcast_to(self.log2_range(a3, b3, g, c), shape) - log2_qmax(c.psum_buffer_bits)
        inv, mult, shift = hw_steps(log2_step, c.scale_form, c.wa_bits is not None, self.rounding)
        if c.exact:
            a_np, b_np = a3.cpu().numpy().astype(np.int64), b3.cpu().numpy().astype(np.int64)
            out = [int_tiled_gemm(a_np[s], b_np[s], c.rows, c.cols,
                                  c.psum_buffer_bits, mult[s].numpy(), shift[s].numpy(), c.semantics, c.overflow,
                                  c.pe_psum_bits).value
                   for s in range(S)]
            return (torch.from_numpy(np.stack(out)).float() if out else torch.zeros(0, M, g.N)).to(a3.device)
        return bmm_psum(a3, b3, inv, c.rows, c.cols, c.psum_buffer_bits, c.semantics, c.overflow)


def fit_key(c: Any) -> tuple[Any, ...]:
    """Config fields a matmul policy fit depends on."""
    return (c.policy, c.psum_buffer_bits, c.semantics, c.overflow, c.scale_form, c.sigma_k, c.headroom_log2, c.rows, c.cols)
