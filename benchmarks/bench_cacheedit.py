"""CacheEdit per-call benchmark: one sparse transformer call at a fraction of active target tokens vs one full call.

The model is a diffusers ``FluxTransformer2DModel`` in the Kontext layout (``--model editor``: the shipped Flux
editor, 64 + 64 image tokens; ``--model wide``: a random-init 2+4-block, 24x64-wide FLUX with a 32x32 target
token grid and as many context tokens, nearer a real model's shape). The CacheEdit hooks
(:func:`npukit.models.cacheedit.apply_cacheedit`, ``context_image='cache'``) run call 0 full, then the timed
sparse calls with ``force_active`` at each fraction (the same random set for each of ``--batch`` images served
together); the unhooked full call is timed back to back (ratios' median over ``--reps``, with their
min / max and the spread max/min, flagged WIDE above 2x). On CUDA the hooks use
the Triton K/V-update and row-scatter kernels.
Prints a table and writes ``bench_cacheedit.csv`` to ``--out``.
``python benchmarks/bench_cacheedit.py [--model wide] [--reps 7] [--out out/bench/cacheedit]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def build(model: str, device: str, batch: int = 1) -> tuple[Any, dict[str, Any], int]:
    """(transformer, call kwargs, target tokens) on ``device``."""
    import torch

    from npukit.models.cacheedit import load_editor

    torch.manual_seed(0)
    if model == "editor":
        ed = load_editor()
        tr, g, c_in, j = ed.transformer, ed.cfg.grid, ed.cfg.patch_dim, ed.cfg.joint_dim
    else:
        from diffusers import FluxTransformer2DModel

        g, c_in, j = 32, 64, 256
        tr = FluxTransformer2DModel(patch_size=1, in_channels=c_in, num_layers=2, num_single_layers=4,
                                    attention_head_dim=64, num_attention_heads=24, joint_attention_dim=j,
                                    pooled_projection_dim=j, guidance_embeds=False, axes_dims_rope=(16, 24, 24))
    tr = tr.to(device).eval()
    from npukit.models.cacheedit import image_ids

    p = g * g
    kw = dict(hidden_states=torch.randn(batch, 2 * p, c_in, device=device),
              encoder_hidden_states=torch.randn(batch, 16, j, device=device),
              pooled_projections=torch.randn(batch, j, device=device),
              img_ids=torch.cat([image_ids(g, 0), image_ids(g, 1)]).to(device), txt_ids=torch.zeros(16, 3, device=device),
              return_dict=False)
    return tr, kw, p


def _timed(fn: Any, sync: Any) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def per_call(model: str, device: str, fracs: list[float], reps: int, batch: int = 1) -> list[dict[str, Any]]:
    import torch

    from npukit.models.cacheedit import CacheEditConfig, apply_cacheedit, remove_cacheedit

    tr, kw, p = build(model, device, batch)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t = torch.full((batch,), 0.5, device=device)
    rows = []
    with torch.no_grad():
        def full() -> Any:
            return tr(timestep=t, **kw)

        for _ in range(2):
            full()
        for f in fracs:
            k = max(1, round(f * p))
            mask = torch.zeros(p, dtype=torch.bool)
            mask[torch.randperm(p, generator=torch.Generator().manual_seed(0))[:k]] = True
            ratios, t_full, t_sp = [], [], []
            for _ in range(reps):
                tf = _timed(full, sync)
                h = apply_cacheedit(tr, CacheEditConfig(context_image="cache"))
                h.force_active(mask)
                tr(timestep=t, **kw)  # call 0: full, fills the caches
                tr(timestep=t, **kw)  # warm the sparse path
                ts = _timed(lambda: tr(timestep=t, **kw), sync)
                remove_cacheedit(tr)
                ratios.append(tf / ts)
                t_full.append(tf)
                t_sp.append(ts)
            rows.append(dict(model=model, device=device, batch=batch, active_frac=f, active_tokens=k, target_tokens=p,
                             full_ms=round(1e3 * statistics.median(t_full), 3),
                             sparse_ms=round(1e3 * statistics.median(t_sp), 3),
                             speedup=round(statistics.median(ratios), 3), **_ratio_spread(ratios)))
    return rows


def _ratio_spread(ratios: list[float]) -> dict[str, Any]:
    """min / max of the per-repeat speedups, n, their spread and its WIDE flag (benchmarks/_timing.py)."""
    from npukit.benchmarks._timing import spread

    sp = spread(ratios)
    return dict(speedup_min=round(sp.min, 3), speedup_max=round(sp.max, 3), n=sp.n, spread=round(sp.ratio, 2),
                spread_flag="WIDE" if sp.wide else "")


def write(rows: list[dict[str, Any]], out: Path, name: str) -> Path:
    """``out/name``: the rows as CSV (npukit.sim.write_csv: atomic, the folder made when missing)."""
    from npukit.sim import write_csv

    return write_csv(out / name, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", choices=("editor", "wide"), default="editor")
    p.add_argument("--fracs", default="0.05,0.1,0.2,0.5,1.0")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=1, help="images per call (default 1)")
    p.add_argument("--out", default="out/bench/cacheedit")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    if a.batch < 1 or a.reps < 1:
        p.error(f"--batch and --reps must be >= 1, got {a.batch}, {a.reps}")
    rows = per_call(a.model, "cpu", [float(x) for x in a.fracs.split(",")], a.reps, a.batch)
    from npukit.benchmarks._timing import wide_warnings

    print(f"{'frac':>6} {'full ms':>9} {'sparse ms':>10} {'speedup':>8} {'min':>7} {'max':>7} {'n':>3} {'max/min':>7} flag")
    for r in rows:
        print(f"{r['active_frac']:>6} {r['full_ms']:>9} {r['sparse_ms']:>10} {r['speedup']:>8} {r['speedup_min']:>7} "
              f"{r['speedup_max']:>7} {r['n']:>3} {r['spread']:>7} {r['spread_flag']}")
    for ln in wide_warnings(rows, lambda r: f"speedup at {r['active_frac']} active"):
        print(ln)
    print(f"wrote {write(rows, Path(a.out), 'bench_cacheedit.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
