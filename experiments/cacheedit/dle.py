"""Delayed Latent Emergence, measured on the trained editing DiT.

For a batch of (source, instruction) pairs and one noise draw it samples twice with full
recomputation, once with the instruction and once with the identity instruction ``keep``, and
records at every step and after every block the activation divergence between the two runs, averaged
over target tokens inside the ground-truth edit mask and outside it; and at every step the latent
(x_t) difference inside vs outside the mask. Plots: per-layer curves over steps (inside / outside),
and the latent change over steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def measure(model: Any, src: Any, instr: Any, patch_mask: Any, steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows ``{step, t, layer, div_in, div_out, ratio}`` (layer -1: latent x_t) for every step and block."""
    import torch

    from npukit.models.cacheedit import full_step, patchify, timesteps, unpatchify

    cfg = model.cfg
    b = src.shape[0]
    ts = timesteps(steps)
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(seed))
    keep = torch.zeros(b, 4, dtype=torch.long)
    m = patch_mask.float()  # (B, P)
    xe, xk = noise.clone(), noise.clone()
    rows: list[dict[str, Any]] = []

    def split(d: torch.Tensor) -> tuple[float, float]:
        din = ((d * m).sum() / m.sum().clamp_min(1)).item()
        dout = ((d * (1 - m)).sum() / (1 - m).sum().clamp_min(1)).item()
        return din, dout

    with torch.no_grad():
        ctx_e, ctx_k = model.context_kv(src, instr), model.context_kv(src, keep)
        for k in range(steps):
            t = ts[k].expand(b)
            he: list[torch.Tensor] = []
            hk: list[torch.Tensor] = []
            ze = full_step(model, xe, t, src, ctx_e, capture_all=he)
            zk = full_step(model, xk, t, src, ctx_k, capture_all=hk)
            lat = (patchify(xe, cfg.patch) - patchify(xk, cfg.patch)).norm(dim=-1)
            din, dout = split(lat)
            rows.append(dict(step=k, t=float(ts[k]), layer=-1, div_in=din, div_out=dout, ratio=din / max(dout, 1e-9)))
            for li, (a, c) in enumerate(zip(he, hk, strict=True)):
                d = (a - c).norm(dim=-1) / c.norm(dim=-1).mean()
                din, dout = split(d)
                rows.append(dict(step=k, t=float(ts[k]), layer=li, div_in=din, div_out=dout, ratio=din / max(dout, 1e-9)))
            xe = xe + (ts[k + 1] - ts[k]) * unpatchify(ze.v, cfg.patch, cfg.channels)
            xk = xk + (ts[k + 1] - ts[k]) * unpatchify(zk.v, cfg.patch, cfg.channels)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Two panels: per-layer activation divergence (inside solid, outside dashed) and latent change."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({r["layer"] for r in rows if r["layer"] >= 0})
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for li in layers:
        rr = [r for r in rows if r["layer"] == li]
        line = ax[0].plot([r["step"] for r in rr], [r["div_in"] for r in rr], label=f"block {li} in")[0]
        ax[0].plot([r["step"] for r in rr], [r["div_out"] for r in rr], "--", color=line.get_color())
    ax[0].set_xlabel("sampling step (0 = t=1, pure noise)")
    ax[0].set_ylabel("activation divergence edit vs keep (rel. L2)")
    ax[0].set_title("deep-layer divergence: inside edit (solid) vs outside (dashed)")
    ax[0].legend(fontsize=7)
    lat = [r for r in rows if r["layer"] == -1]
    ax[1].plot([r["step"] for r in lat], [r["div_in"] for r in lat], label="inside edit mask")
    ax[1].plot([r["step"] for r in lat], [r["div_out"] for r in lat], "--", label="outside")
    ax[1].set_xlabel("sampling step")
    ax[1].set_ylabel("latent x_t difference edit vs keep (L2 per patch)")
    ax[1].set_title("latent change emerges late")
    ax[1].legend()
    fig.tight_layout()
    from npukit.sim import write_figure

    write_figure(path, fig, dpi=110)
    plt.close(fig)
    return path
