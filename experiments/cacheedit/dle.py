"""Delayed Latent Emergence, measured on the Flux editor.

For each session's first round it samples twice with full recomputation from one noise draw, once with the
instruction and once with the identity instruction ``keep``, and records at every step and after every block
(double-stream first, then single-stream; PyTorch forward hooks on the diffusers blocks) the relative
divergence of the target tokens' image-stream output between the two runs (``||h_edit - h_keep|| /
||h_keep||`` per token), averaged inside the ground-truth edit patches and outside them; and per step the
latent (x_t) difference inside vs outside. Plot: per-block curves over steps (inside solid, outside dashed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def measure(editor: Any, sessions: list[Any], steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows ``{step, t, layer, div_in, div_out, ratio}`` (layer -1: the latent x_t) for every step and block."""
    import torch

    from npukit.models.cacheedit import timesteps, token_mask

    tr = editor.transformer
    blocks = [*tr.transformer_blocks, *tr.single_transformer_blocks]
    p, patch = editor.cfg.tokens, editor.cfg.patch
    src = torch.stack([torch.from_numpy(s[0]) for s in sessions])
    instr = torch.tensor([list(s[1][0]) for s in sessions])
    m = torch.stack([token_mask(torch.from_numpy(s[3][0]), patch) for s in sessions]).float()  # (B, P)
    keep = torch.zeros_like(instr)
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(seed))
    grabbed: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda mod, i, o: grabbed.append(o[1][:, :p].detach())) for b in blocks]
    ts = timesteps(steps)
    xe, xk = noise.clone(), noise.clone()
    rows: list[dict[str, Any]] = []

    def avg(d: torch.Tensor) -> tuple[float, float]:
        inside = (d * m).sum() / m.sum().clamp_min(1)
        outside = (d * (1 - m)).sum() / (1 - m).sum().clamp_min(1)
        return float(inside), float(outside)

    try:
        with torch.no_grad():
            for i in range(steps):
                t = ts[i].expand(src.shape[0])
                grabbed.clear()
                ve = editor(xe, t, src, instr)
                he = list(grabbed)
                grabbed.clear()
                vk = editor(xk, t, src, keep)
                for li, (a, b) in enumerate(zip(he, grabbed, strict=True)):
                    d = (a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-6)
                    di, do = avg(d)
                    rows.append(dict(step=i, t=round(float(ts[i]), 4), layer=li, div_in=di, div_out=do,
                                     ratio=di / max(do, 1e-9)))
                from npukit.models.cacheedit import patchify

                dl = (patchify(xe, patch) - patchify(xk, patch)).norm(dim=-1)
                di, do = avg(dl)
                rows.append(dict(step=i, t=round(float(ts[i]), 4), layer=-1, div_in=di, div_out=do, ratio=di / max(do, 1e-9)))
                xe = xe + (ts[i + 1] - ts[i]) * ve
                xk = xk + (ts[i + 1] - ts[i]) * vk
    finally:
        for h in hooks:
            h.remove()
    return rows


def plot(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Per-block divergence over steps (inside solid, outside dashed) and the latent difference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    layers = sorted({r["layer"] for r in rows if r["layer"] >= 0})
    for li in layers:
        rs = [r for r in rows if r["layer"] == li]
        line = a1.plot([r["step"] for r in rs], [r["div_in"] for r in rs], label=f"block {li} inside")[0]
        a1.plot([r["step"] for r in rs], [r["div_out"] for r in rs], "--", color=line.get_color(), label=f"block {li} outside")
    a1.set_xlabel("step")
    a1.set_ylabel("relative divergence edit vs keep")
    a1.legend(fontsize=6)
    rs = [r for r in rows if r["layer"] == -1]
    a2.plot([r["step"] for r in rs], [r["div_in"] for r in rs], label="inside")
    a2.plot([r["step"] for r in rs], [r["div_out"] for r in rs], "--", label="outside")
    a2.set_xlabel("step")
    a2.set_ylabel("latent |x_edit - x_keep| per token")
    a2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
