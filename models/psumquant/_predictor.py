"""The PsumQuant scale predictor: input-tile features -> log2 of that tile's psum range.

Predictor: a ridge-regularised linear model in the log2 domain, one per layer, fitted post-training
on calibration rows (network weights unchanged). Features of one tile (all log2 of psum-domain
magnitudes, so that the Cauchy-Schwarz bound |x . w| <= ||x|| ||w|| is a linear function of them):

* transfer semantics, tile (row m, K-tile t, N-tile j): 1, log2 RMS(x[m, t]), log2 crest(x[m, t])
  (crest factor = peak / RMS), log2 max_col ||w[t, col in j]||_2 (a static weight feature), the
  tile position t / kf, and a one-hot of the N-tile j (when nt <= 64);
* buffer semantics, output tile (row m, N-tile j; the scale is shared by all K-tiles): 1,
  log2 RMS(x[m, :]), log2 crest(x[m, :]), mean_t and max_t of log2 crest(x[m, t]), log2 max_t
  RMS(x[m, t]), log2 max_col ||w[:, col in j]||_2, one-hot of j.

Both add a peak-times-weight feature (when the predictor is given the weight): log2 sum over the
TOP_K = 8 largest |x_k| of the tile (buffer: of the whole row) of |x_k| max_{col in j} |w[k, col]|.
Crest factor and RMS say how large the peaks are, not which channels they sit in; in transformers
a few channels carry "massive activations" on a few tokens (seen in all-MiniLM-L6-v2's FFN output)
and the psum range of such a row is set by those channels' weight rows. Hardware cost: a top-8
selector on the input tile and a static K x N-tiles table of weight-row maxima.

Target: log2 of the tile's true psum range max |psum| (buffer: over every running-sum prefix).
Fit: closed-form ridge least squares (lambda = 1e-3 x trace / n_features) on the rows sampled during
calibration; all-zero tiles are left out. The prediction plus a per-layer head-room ``margin``
(chosen by the policy to minimise output error on the calibration rows) gives the log2 step
``pred + margin - log2(2^(B-1) - 1)``, rounded to hardware form by the caller.
"""

from __future__ import annotations

import math

import torch

from ._exec import LOG2_FLOOR, Geom, TileFeatures, safe_log2

MAX_ONE_HOT = 64


def weight_absmax(w: torch.Tensor, g: Geom) -> torch.Tensor:
    """(kf * rows, nt): max |w[k, col]| over each N-tile's columns, zero rows for the K padding."""
    wp = torch.nn.functional.pad(w.float().abs(), (0, g.nt * g.cols - g.N, 0, g.kf * g.rows - g.K))
    return wp.view(g.kf * g.rows, g.nt, g.cols).amax(2)


def weight_norms(w: torch.Tensor, g: Geom, semantics: str) -> torch.Tensor:
    """log2 of the max column L2 norm: transfer (kf, nt) per (K-tile, N-tile); buffer (nt,)."""
    wf = w.float()
    padk = g.kf * g.rows - g.K
    padn = g.nt * g.cols - g.N
    wp = torch.nn.functional.pad(wf, (0, padn, 0, padk))
    sq = wp.square().view(g.kf, g.rows, g.nt, g.cols).sum(1)  # (kf, nt, cols)
    if semantics == "transfer":
        return safe_log2(sq.amax(2).sqrt())
    return safe_log2(sq.sum(0).amax(1).sqrt())


def ridge_fit(X: torch.Tensor, y: torch.Tensor, ridge: float = 1e-3) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """Closed-form ridge least squares (lambda = ``ridge`` x trace(X^T X) / n_features) of ``y`` (n,)
    on ``X`` (n, F), float64. Returns (theta (F,), report with n_tiles, n_features, mae/rmse/max
    error, bias (log2 units) and r2, residuals target - prediction (n,) float32); n must be >= 1."""
    X, y = X.double(), y.double()
    F, n = X.shape[1], y.numel()
    A = X.T @ X
    lam = ridge * float(torch.trace(A)) / F + 1e-9
    theta = torch.linalg.solve(A + lam * torch.eye(F, dtype=torch.float64), X.T @ y)
    res = X @ theta - y
    var = float(y.var()) if n > 1 else 0.0
    report = {
        "n_tiles": float(n),
        "n_features": float(F),
        "mae_log2": float(res.abs().mean()),
        "rmse_log2": float(res.square().mean().sqrt()),
        "max_err_log2": float(res.abs().max()),
        "bias_log2": float(res.mean()),
        "r2": 1.0 - float(res.square().mean()) / var if var > 0 else 1.0,
    }
    return theta, report, -res.float()


class ScalePredictor:
    """Linear model in log2 space from tile features to log2 max |psum| (see module docstring)."""

    def __init__(self, g: Geom, semantics: str, ridge: float = 1e-3, wmax: torch.Tensor | None = None) -> None:
        self.g = g
        self.wmax = wmax  # weight_absmax(w, g): enables the peak-times-weight feature
        self.semantics = semantics
        self.ridge = ridge
        self.theta: torch.Tensor | None = None
        self.report: dict[str, float] = {}

    # ------------------------------------------------------------------ features
    def features(self, f: TileFeatures, wn: torch.Tensor) -> torch.Tensor:
        """Design matrix: transfer (M, kf, nt, F); buffer (M, nt, F)."""
        g = self.g
        M = f.rms.shape[0]
        one_hot = g.nt > 1 and g.nt <= MAX_ONE_HOT
        eye = torch.eye(g.nt) if one_hot else None
        if self.semantics == "transfer":
            lr = safe_log2(f.rms)  # (M, kf)
            lc = safe_log2(f.peak) - lr
            pos = (torch.arange(g.kf, dtype=torch.float32) / max(1, g.kf)).expand(M, g.kf)
            cols = [
                torch.ones(M, g.kf, g.nt),
                lr[:, :, None].expand(M, g.kf, g.nt),
                lc[:, :, None].expand(M, g.kf, g.nt),
                wn[None].expand(M, g.kf, g.nt),
                pos[:, :, None].expand(M, g.kf, g.nt),
            ]
            if self.wmax is not None:
                cols.append(self._peak_w(f))
            X = torch.stack(cols, -1)
            if eye is not None:
                X = torch.cat([X, eye[None, None].expand(M, g.kf, g.nt, g.nt)], -1)
            return X
        lr = safe_log2(f.row_rms)
        lc = safe_log2(f.row_peak) - lr
        tl = safe_log2(f.rms)
        tc = safe_log2(f.peak) - tl
        valid = f.rms > 0
        tcm = torch.where(valid, tc, torch.zeros_like(tc))
        mean_tc = tcm.sum(1) / valid.sum(1).clamp_min(1)
        max_tc = torch.where(valid, tc, torch.full_like(tc, -1e9)).amax(1).clamp_min(0)
        max_tr = tl.amax(1)
        per_row = torch.stack([torch.ones(M), lr, lc, mean_tc, max_tc, max_tr], -1)  # (M, 6)
        X = torch.cat([per_row[:, None].expand(M, g.nt, 6), wn[None, :, None].expand(M, g.nt, 1)], -1)
        if self.wmax is not None:
            X = torch.cat([X, self._peak_w(f)[..., None]], -1)
        if eye is not None:
            X = torch.cat([X, eye[None].expand(M, g.nt, g.nt)], -1)
        return X

    def _peak_w(self, f: TileFeatures) -> torch.Tensor:
        """log2 sum_top |x_k| max_col |w[k, col]|: transfer (M, kf, nt) per K-tile, buffer (M, nt) per row."""
        if f.top_val is None or f.top_idx is None:
            raise RuntimeError("ScalePredictor: tile features lack top_val/top_idx (use tile_features)")
        v, idx = f.top_val.float(), f.top_idx
        if self.semantics == "buffer":
            M = v.shape[0]
            v, j = v.reshape(M, -1).topk(min(v.shape[1] * v.shape[2], v.shape[2]), dim=1)
            idx = idx.reshape(M, -1).gather(1, j)
            return safe_log2((v[..., None] * self.wmax[idx]).sum(1))
        return safe_log2((v[..., None] * self.wmax[idx]).sum(2))

    def _zero_mask(self, f: TileFeatures) -> torch.Tensor:
        """True where the input tile is all zero (its psums are exactly zero)."""
        g = self.g
        if self.semantics == "transfer":
            return (f.peak == 0)[:, :, None].expand(-1, g.kf, g.nt)
        return (f.row_peak == 0)[:, None].expand(-1, g.nt)

    # ------------------------------------------------------------------ fit / predict
    def fit(self, f: TileFeatures, wn: torch.Tensor, target_log2: torch.Tensor) -> dict[str, float]:
        """Fit on calibration tiles; ``target_log2`` has the design's leading shape. Returns the report."""
        X = self.features(f, wn).double()
        F = X.shape[-1]
        keep = ~self._zero_mask(f) & (target_log2 > LOG2_FLOOR + 1)
        Xk = X[keep].reshape(-1, F)
        yk = target_log2.double()[keep].reshape(-1)
        n = yk.numel()
        if n == 0:
            self.theta = torch.zeros(F, dtype=torch.float64)
            self.theta[0] = LOG2_FLOOR
            self.report = {"n_tiles": 0.0, "mae_log2": 0.0, "rmse_log2": 0.0, "max_err_log2": 0.0, "r2": 1.0}
            return self.report
        self.theta, self.report, self.residuals = ridge_fit(Xk, yk, self.ridge)
        return self.report

    def predict(self, f: TileFeatures, wn: torch.Tensor) -> torch.Tensor:
        """Predicted log2 max |psum| per tile (transfer (M, kf, nt), buffer (M, nt))."""
        if self.theta is None:
            raise RuntimeError("ScalePredictor.predict before fit")
        X = self.features(f, wn).double()
        out = (X @ self.theta).float()
        return torch.where(self._zero_mask(f), torch.full_like(out, LOG2_FLOOR), out)

    def residual_quantile(self, q: float) -> float:
        r = getattr(self, "residuals", None)
        if r is None or r.numel() == 0:
            return 0.0
        return float(torch.quantile(r, q)) if r.numel() < 2**24 else float(r.max())

    def describe(self) -> str:
        names = (
            ["1", "log2_rms", "log2_crest", "log2_wnorm", "pos"]
            if self.semantics == "transfer"
            else ["1", "log2_rms", "log2_crest", "mean_tile_log2_crest", "max_tile_log2_crest", "max_tile_log2_rms", "log2_wnorm"]
        ) + (["log2_peak_w"] if self.wmax is not None else [])
        if self.theta is None:
            return "unfitted"
        coef = ", ".join(f"{n}={float(c):+.3f}" for n, c in zip(names, self.theta[: len(names)], strict=False))
        extra = len(self.theta) - len(names)
        mae = self.report.get("mae_log2", math.nan)
        return coef + (f", +{extra} N-tile offsets" if extra > 0 else "") + f" (mae {mae:.3f} log2)"
