"""Where the error of token caching comes from, and why whole-step reuse wins on this editor (CPU).

``python -m npukit.experiments.cacheedit.diagnose [--sessions N] [--out DIR]`` prints one table and
writes ``diagnose.csv`` (columns: ``probe``, ``setting``, ``value``, ``unit``):

- ``split``: mean squared error (per pixel, [0, 1] scale) of the final images of 3-round sessions
  against full recomputation, and the share of it outside the union of the session's edit masks, for
  ``cacheedit``, ``oracle`` and ``step-reuse`` at 9 evaluated steps (threshold calibrated on full's
  indicators);
- ``refresh``: PSNR (dB) of one cacheedit round against full for refresh periods 14 / 7 / 4 / 2, and for
  every token recomputed at every step with stale K/V of the other tokens (``refresh_kv=False``);
- ``background``: PSNR (dB) outside the edit (dilated by 4 pixels) of full recomputation against its
  source and against itself under another noise seed (full regenerates the background every round);
- ``diversity``: std across 3 noise seeds of the mean brightness inside the edit, for edits whose
  target is sampled (recolour / add in the shaded mode) and the others.

Sessions come from the model's data mode (shaded for the shipped v3 model). This module imports
torch only inside :func:`run`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

DEFAULT_OUT = "out/experiment/cacheedit-diagnose"


def _sq_sum(a: Any, b: Any, where: Any) -> float:
    return float(((((a - b) / 2) ** 2).mean(1) * where.float()).sum())


def run(sessions: int = 20, steps: int = 28, seed: int = 7, weights: str | None = None, threads: int = 1) -> list[dict[str, Any]]:
    """All probes on ``sessions`` 3-round sessions; returns the rows (see the module docstring)."""
    import dataclasses

    import numpy as np
    import torch
    import torch.nn.functional as F

    from npukit.models.cacheedit import (
        CacheConfig,
        EditSession,
        calibrate_threshold,
        edit_round,
        load_model,
        make_session,
        mse,
        patch_mask,
        psnr_db,
    )

    if threads:
        torch.set_num_threads(threads)
    model = load_model(weights)
    cfg = model.cfg
    mode = {"texture": bool(cfg.texture), "shade": bool(cfg.shade)}
    rng = np.random.default_rng(seed)
    sess = [make_session(rng, 3, **mode) for _ in range(sessions)]
    src = torch.from_numpy(np.stack([s[0] for s in sess]))
    instrs = [torch.tensor([s[1][r] for s in sess]) for r in range(3)]
    masks = [torch.from_numpy(np.stack([s[3][r] for s in sess])) for r in range(3)]
    cache = CacheConfig()
    rows: list[dict[str, Any]] = []

    def add(probe: str, setting: str, value: float, unit: str) -> None:
        rows.append({"probe": probe, "setting": setting, "value": round(value, 3), "unit": unit})

    def session(method: str, cc: Any = None, kws: list[dict[str, Any]] | None = None, rounds: int = 3) -> Any:
        s = EditSession(model, src, method, steps=steps, cache=cc or cache, seed=0)
        for r in range(rounds):
            s.edit(instrs[r], **(kws[r] if kws else {}))
        return s

    def mean_mse(a: Any, b: Any, where: Any) -> float:
        return float(mse(a, b, where).mean())

    # full recomputation, once: its change indicators calibrate step-reuse; its round-1 output is seed 0's
    cal = EditSession(model, src, "full", steps=steps, cache=cache, seed=0)
    for r in range(3):
        cal.edit(instrs[r], indicators=True)
    full, full1 = cal.source, cal.results[0].image.clamp(-1, 1)
    inds = [res.indicators for res in cal.results]
    # split: error inside / outside the edits after 3 rounds
    union = masks[0] | masks[1] | masks[2]
    everywhere = torch.ones_like(union)
    oracle_kw = [{"gt_mask": patch_mask(m, cfg.patch)} for m in masks]
    reuse_kw = [{"threshold": calibrate_threshold(i, 9)} for i in inds]
    for name, s in (("cacheedit", session("cacheedit")), ("oracle", session("oracle", kws=oracle_kw)),
                    ("step-reuse (9 steps)", session("step-reuse", kws=reuse_kw))):
        add("split", f"{name}: error vs full", 1e4 * mean_mse(s.source, full, everywhere), "mse x1e-4")
        share = _sq_sum(s.source, full, ~union) / max(_sq_sum(s.source, full, everywhere), 1e-20)
        add("split", f"{name}: share outside the edits", 100 * share, "%")
    # refresh: one round against full
    for name, kw in (("refresh 14", {"refresh": 14}), ("refresh 7", {"refresh": 7}), ("refresh 4", {"refresh": 4}),
                     ("refresh 2", {"refresh": 2}),
                     ("all tokens, stale K/V", {"min_active": 1.0, "max_active": 1.0, "refresh_kv": False})):
        out = session("cacheedit", dataclasses.replace(cache, **kw), rounds=1).source
        add("refresh", name, float(psnr_db(out, full1).mean()), "dB")
    # background: full's own regeneration outside the (dilated) edit
    far = ~(F.max_pool2d(masks[0][:, None].float(), 9, 1, 4)[:, 0] > 0)
    noises = [torch.randn(src.shape, generator=torch.Generator().manual_seed(k)) for k in (1, 2)]  # seed 0: full1
    outs = [full1] + [edit_round(model, src, instrs[0], z, "full", steps=steps).image.clamp(-1, 1) for z in noises]
    add("background", "full vs its source", 10 * math.log10(1 / max(mean_mse(outs[0], src, far), 1e-10)), "dB")
    add("background", "full seed 0 vs seed 1", 10 * math.log10(1 / max(mean_mse(outs[0], outs[1], far), 1e-10)), "dB")
    # diversity: brightness inside the edit across the 3 seeds
    m0 = masks[0]
    bright = torch.stack([(((o + 1) / 2).mean(1) * m0).flatten(1).sum(1) / m0.flatten(1).sum(1).clamp_min(1)
                          for o in outs], 1)
    sampled = (instrs[0][:, 0] == 1) | (instrs[0][:, 0] == 3)  # recolor, add
    for name, sel in (("recolour/add", sampled), ("other edits", ~sampled)):
        if sel.any():
            add("diversity", name, float(bright[sel].std(1).mean()), "std")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npukit.experiments.cacheedit.diagnose", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=20, metavar="N", help="3-round sessions (default 20)")
    p.add_argument("--steps", type=int, default=28, metavar="S", help="sampling steps (default 28)")
    p.add_argument("--weights", default=None, metavar="FILE", help="DiT weights (default: the shipped ones)")
    p.add_argument("--threads", type=int, default=1, metavar="T", help="torch CPU threads (default 1; 0: torch's default)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default {DEFAULT_OUT})")
    a = p.parse_args(argv)
    if a.sessions < 1 or a.steps < 2:
        print("error: need --sessions >= 1 and --steps >= 2", file=sys.stderr)
        return 2
    from npukit.sim import format_table, prepare_out_dir, write_csv
    from npukit.sim.errors import ConfigError

    try:
        out = prepare_out_dir(a.out)
        rows = run(a.sessions, a.steps, weights=a.weights, threads=a.threads)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cols = ["probe", "setting", "value", "unit"]
    print(format_table(cols, [[r[k] for k in cols] for r in rows]))
    path = Path(out) / "diagnose.csv"
    write_csv(path, rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
