"""Train the CacheEdit editing DiT on the procedural dataset (rectified flow, CPU).

``python -m npukit.experiments.cacheedit.train --minutes 14 --shade --op-mix --out models/weights/cacheedit_dit.pt``
(the shipped v3 model: 6,600 steps in 14 min, 2 threads, on the quiet 2-core machine) trains
(x0-prediction loss, edit region weighted 3x) for a wall-clock budget, evaluates held-out edit accuracy
(28-step sampling) and writes the weights (fp16) with their config and training record.
Run it niced on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "weights" / "cacheedit_dit.pt"


def train(minutes: float = 14.0, batch: int = 32, lr: float = 2e-3, seed: int = 0, max_steps: int | None = None,
          log_every: int = 50, dim: int = 96, depth: int = 4, ckpt: str | Path | None = None,
          ckpt_every: int = 200, texture: bool = False, op_mix: bool = False,
          shade: bool = False) -> tuple[Any, dict[str, Any]]:
    """Train a fresh :class:`EditDiT` for ``minutes`` of wall clock (or ``max_steps``); returns (model, record).

    ``texture``: textured (stochastic) edits (the v2 model); ``shade``: shaded edits (recolour/add draw an
    unspecified brightness); ``op_mix``: the balanced op mix TRAIN_OP_WEIGHTS.
    """
    import numpy as np
    import torch

    from npukit.models.cacheedit import TRAIN_OP_WEIGHTS, DiTConfig, EditDiT, make_batch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = DiTConfig(dim=dim, depth=depth, texture=texture, shade=shade)
    weights = TRAIN_OP_WEIGHTS if op_mix else None
    model = EditDiT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.99))
    budget = minutes * 60.0
    t0 = time.perf_counter()
    step, losses = 0, []
    while True:
        elapsed = time.perf_counter() - t0
        if (max_steps is not None and step >= max_steps) or (max_steps is None and elapsed >= budget):
            break
        frac = min(1.0, elapsed / budget) if max_steps is None else step / max_steps
        cur_lr = lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = cur_lr
        src, instr, tgt, mask = (torch.from_numpy(a) for a in make_batch(rng, batch, texture=texture, op_weights=weights,
                                                                                    shade=shade))
        noise = torch.randn_like(tgt)
        t = torch.where(torch.rand(batch) < 0.5, torch.rand(batch), torch.sigmoid(torch.randn(batch)))
        xt = (1 - t)[:, None, None, None] * tgt + t[:, None, None, None] * noise
        x0 = model.predict_x0(xt, t, src, instr)
        w = 1.0 + 2.0 * mask.float()[:, None]
        loss = (((x0 - tgt) ** 2) * w).mean() / w.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if log_every and step % log_every == 0:
            if ckpt is not None and step % ckpt_every == 0:
                save(model, dict(steps=step, partial=True, config=cfg.to_dict()), ckpt)
            print(f"step {step} loss {sum(losses[-log_every:]) / log_every:.4f} lr {cur_lr:.2e} "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
    record = dict(steps=step, batch=batch, lr=lr, seed=seed, texture=texture, shade=shade, op_mix=op_mix,
                  seconds=time.perf_counter() - t0,
                  final_loss=float(sum(losses[-50:]) / max(1, len(losses[-50:]))), config=cfg.to_dict())
    return model, record


def evaluate(model: Any, n: int = 200, steps: int = 28, seed: int = 12345, batch: int = 50,
             texture: bool | None = None, smooth: int | None = None, op_mix: bool = False) -> dict[str, float]:
    """Held-out edit accuracy (fraction of edits carried out, :func:`edit_correct`), PSNR to target (dB).

    ``texture`` (default: the model's config) picks the data mode; ``smooth`` the metric's low-pass
    width in pixels (default: TEXTURE_SMOOTH in textured mode, else 1); ``op_mix``: balanced op mix.
    """
    import numpy as np
    import torch

    from npukit.models.cacheedit import OPS, TEXTURE_SMOOTH, TRAIN_OP_WEIGHTS, edit_correct, make_batch, psnr_db, sample

    tex = bool(getattr(model.cfg, "texture", False)) if texture is None else texture
    shd = bool(getattr(model.cfg, "shade", False))
    sm = (TEXTURE_SMOOTH if tex else 1) if smooth is None else smooth

    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    ok, ps, ops = [], [], []
    for i in range(0, n, batch):
        src, instr, tgt, mask = (torch.from_numpy(a) for a in make_batch(
            rng, min(batch, n - i), keep_prob=0.0, texture=tex, op_weights=TRAIN_OP_WEIGHTS if op_mix else None, shade=shd))
        out = sample(model, src, instr, steps, generator=gen).clamp(-1, 1)
        ok.append(edit_correct(out, src, tgt, mask, smooth=sm, chroma=shd))
        ps.append(psnr_db(out, tgt))
        ops.append(instr[:, 0])
    okc, opc = torch.cat(ok), torch.cat(ops)
    res = {"edit_accuracy": okc.float().mean().item(), "psnr_to_target_db": torch.cat(ps).mean().item(), "n": float(n),
           "texture": float(tex), "shade": float(shd), "smooth": float(sm)}
    for o in range(1, len(OPS)):
        sel = opc == o
        if sel.any():
            res[f"acc_{OPS[o]}"] = okc[sel].float().mean().item()
            res[f"n_{OPS[o]}"] = float(sel.sum().item())
    return res


def save(model: Any, record: dict[str, Any], path: str | Path) -> Path:
    """Write fp16 weights + config + record atomically to ``path``."""

    import torch

    path = Path(path)
    from npukit.sim import atomic_file

    state = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    with atomic_file(path) as tmp:
        torch.save({"format": "npukit-cacheedit-dit/1", "config": model.cfg.to_dict(), "state": state, "record": record},
                   tmp)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=14.0)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps instead of --minutes")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--dim", type=int, default=96)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--ckpt", default=None, help="write partial weights here every 200 steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--texture", action="store_true", help="textured (stochastic) edits: the v2 model")
    p.add_argument("--shade", action="store_true", help="shaded edits: recolour/add pick an unspecified brightness (v3)")
    p.add_argument("--op-mix", dest="op_mix", action="store_true", help="balanced op mix (more move/add)")
    p.add_argument("--eval", type=int, default=200, help="held-out examples for edit accuracy")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(DEFAULT_WEIGHTS))
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    model, record = train(a.minutes, a.batch, a.lr, a.seed, a.steps, dim=a.dim, depth=a.depth, ckpt=a.ckpt,
                          texture=a.texture, op_mix=a.op_mix, shade=a.shade)
    if a.eval:
        record["heldout"] = evaluate(model, a.eval)
        print("held-out:", record["heldout"], flush=True)
    out = save(model, record, a.out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
