"""Train the CacheEdit Flux editor (a diffusers FluxTransformer2DModel, Kontext layout) on the procedural data.

``python -m npukit.experiments.cacheedit.train --minutes 15 --out models/cacheedit/weights/cacheedit_flux.pt`` trains
(rectified flow, x0 loss with the edit region weighted 3x, shaded data, balanced op mix) for a wall-clock
budget on the CPU, evaluates held-out edit accuracy per edit type (28-step sampling) and writes the weights
(fp16) with their config and training record. Run it niced on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "cacheedit" / "weights" / "cacheedit_flux.pt"
FORMAT = "npukit-cacheedit-flux/1"


def train(minutes: float = 15.0, batch: int = 32, lr: float = 2e-3, seed: int = 0, max_steps: int | None = None,
          log_every: int = 50, ckpt: str | Path | None = None, ckpt_every: int = 200,
          **sizes: Any) -> tuple[Any, dict[str, Any]]:
    """Train a fresh :class:`FluxEditor` for ``minutes`` of wall clock (or ``max_steps``); returns (model, record).
    ``sizes``: :class:`FluxEditorConfig` fields."""
    import numpy as np
    import torch

    from npukit.models.cacheedit import TRAIN_OP_WEIGHTS, FluxEditor, FluxEditorConfig, make_batch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = FluxEditorConfig(**sizes)
    model = FluxEditor(cfg)
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
        src, instr, tgt, mask = (torch.from_numpy(a) for a in make_batch(rng, batch, op_weights=TRAIN_OP_WEIGHTS,
                                                                                    shade=cfg.shade))
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
                save(model, dict(steps=step, partial=True), ckpt)
            print(f"step {step} loss {sum(losses[-log_every:]) / log_every:.4f} lr {cur_lr:.2e} "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
    record = dict(steps=step, batch=batch, lr=lr, seed=seed, seconds=time.perf_counter() - t0,
                  threads=torch.get_num_threads(),
                  final_loss=float(sum(losses[-50:]) / max(1, len(losses[-50:]))))
    return model, record


def evaluate(model: Any, n: int = 200, steps: int = 28, seed: int = 12345, batch: int = 50) -> dict[str, float]:
    """Held-out edit accuracy (fraction of edits carried out, :func:`edit_correct`, on chromaticity in the
    shaded mode) overall and per edit type, and PSNR to the target (dB); balanced op mix, unseen seed."""
    import numpy as np
    import torch

    from npukit.models.cacheedit import OPS, TRAIN_OP_WEIGHTS, edit_correct, make_batch, psnr_db
    from npukit.models.cacheedit import sample as flux_sample

    shd = bool(model.cfg.shade)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    ok, ps, ops = [], [], []
    for i in range(0, n, batch):
        src, instr, tgt, mask = (torch.from_numpy(a) for a in make_batch(
            rng, min(batch, n - i), keep_prob=0.0, op_weights=TRAIN_OP_WEIGHTS, shade=shd))
        out = flux_sample(model, src, instr, steps, generator=gen).clamp(-1, 1)
        ok.append(edit_correct(out, src, tgt, mask, chroma=shd))
        ps.append(psnr_db(out, tgt))
        ops.append(instr[:, 0])
    okc, opc = torch.cat(ok), torch.cat(ops)
    res = {"edit_accuracy": okc.float().mean().item(), "psnr_to_target_db": torch.cat(ps).mean().item(), "n": float(n)}
    for o in range(1, len(OPS)):
        sel = opc == o
        if sel.any():
            res[f"acc_{OPS[o]}"] = okc[sel].float().mean().item()
            res[f"n_{OPS[o]}"] = float(sel.sum().item())
    return res


def save(model: Any, record: dict[str, Any], path: str | Path) -> Path:
    """Write fp16 weights + config + record atomically to ``path``."""
    import torch

    from npukit.sim import atomic_file

    path = Path(path)
    state = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    with atomic_file(path) as tmp:
        torch.save({"format": FORMAT, "config": model.cfg.to_dict(), "state": state, "record": record}, tmp)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=15.0)
    p.add_argument("--steps", type=int, default=None, help="stop after this many steps instead of --minutes")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--single-layers", dest="single_layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--head-dim", dest="head_dim", type=int, default=32)
    p.add_argument("--ckpt", default=None, help="write partial weights here every 200 steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval", type=int, default=200, help="held-out examples for edit accuracy")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(DEFAULT_WEIGHTS))
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    model, record = train(a.minutes, a.batch, a.lr, a.seed, a.steps, ckpt=a.ckpt, layers=a.layers,
                          single_layers=a.single_layers, heads=a.heads, head_dim=a.head_dim)
    if a.eval:
        record["heldout"] = evaluate(model, a.eval)
        print("held-out:", record["heldout"], flush=True)
    out = save(model, record, a.out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
