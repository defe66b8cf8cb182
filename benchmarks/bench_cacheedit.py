"""CacheEdit speed benchmark (CPU; on CUDA the same code runs the Triton kernels).

1. Per-step: wall time of one full target-stream step vs one cached step at several active
   fractions, for a batch of images; each pair timed back to back in this process, ratios' median
   over ``--reps`` (so machine load affects both sides alike).
2. End to end (unless ``--no-e2e``): ``npukit experiment cacheedit`` on ``--images`` sessions and a
   check of the issue's targets (>= 2.5x end-to-end speedup, PSNR >= 30 dB vs full recomputation,
   higher PSNR than the ToCa-like and step-reuse baselines at equal speedup, interpolated on the
   experiment's PSNR-vs-speedup curves), for ``cacheedit`` and the hybrid ``cacheedit+step``.

Prints a table and writes ``bench_cacheedit.csv`` (+ the experiment's files) to ``--out``.
``python benchmarks/bench_cacheedit.py [--images 50] [--reps 7] [--out out/bench/cacheedit]``
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time


def per_step(batch: int, reps: int, fracs: list[float], weights: str | None = None) -> list[dict[str, object]]:
    import numpy as np
    import torch

    from npukit.models._cacheedit_cache import cached_step, full_step, make_plan, mask_to_index, step_mods
    from npukit.models._cacheedit_data import make_batch
    from npukit.models._cacheedit_dit import patchify
    from npukit.models.cacheedit import load_model

    model = load_model(weights)
    src, ins, _, _ = (torch.from_numpy(a) for a in make_batch(np.random.default_rng(0), batch))
    x = torch.randn_like(src)
    t = torch.full((batch,), 0.5)
    p = model.cfg.tokens
    rows = []
    with torch.no_grad():
        ctx = model.context_kv(src, ins)
        zero = full_step(model, x, torch.ones(batch), src, ctx)
        xt, st = patchify(x, model.cfg.patch), patchify(src, model.cfg.patch)
        for f in fracs:
            g = torch.Generator().manual_seed(1)
            mask = torch.stack([torch.randperm(p, generator=g) < max(1, round(f * p)) for _ in range(batch)])
            idx = mask_to_index(mask)
            plan, mods = make_plan(idx, p, model.cfg.seq), step_mods(model, t[:1])[0]  # once per round in edit_round
            ratios, tf, tc = [], [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                model.target_forward(x, t, src, ctx)
                t1 = time.perf_counter()
                cached_step(model, xt, st, t, idx, zero, plan=plan, mods=mods)
                t2 = time.perf_counter()
                ratios.append((t1 - t0) / (t2 - t1))
                tf.append(t1 - t0)
                tc.append(t2 - t1)
            rows.append(dict(active_frac=f, batch=batch, full_ms=round(1e3 * statistics.median(tf), 3),
                             cached_ms=round(1e3 * statistics.median(tc), 3), step_speedup=round(statistics.median(ratios), 3)))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--images", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--weights", default=None, help="DiT weights (default: the shipped ones)")
    p.add_argument("--no-e2e", dest="e2e", action="store_false")
    p.add_argument("--out", default="out/bench/cacheedit")
    a = p.parse_args(argv)
    import torch

    from npukit.sim import format_table, prepare_out_dir, write_csv

    torch.set_num_threads(a.threads)
    out = prepare_out_dir(a.out)
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({a.threads} threads), no GPU"
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  device: {dev}")
    rows = per_step(a.batch, a.reps, [0.05, 0.1, 0.2, 0.3, 0.5, 1.0], a.weights)
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    write_csv(out / "bench_cacheedit.csv", rows)
    if not a.e2e:
        return 0
    from npukit.experiments.cacheedit import run as exp

    ep = argparse.ArgumentParser()
    exp.add_arguments(ep)
    extra = ["--weights", a.weights] if a.weights else []
    exp.run(ep.parse_args(["--images", str(a.images), "--out", str(out / "e2e"), "--threads", str(a.threads), *extra]))
    res = {r["method"]: r for r in csv.DictReader((out / "e2e" / "results.csv").open())}
    for name in ("cacheedit", "cacheedit+step"):
        sp, ps = float(res[name]["speedup"]), float(res[name]["psnr_db"])
        print(f"{name}: target speedup >= 2.5x: {sp:.2f}x {'PASS' if sp >= 2.5 else 'FAIL'}; "
              f"PSNR >= 30 dB vs full: {ps:.2f} dB {'PASS' if ps >= 30 else 'FAIL'}")
    print("equal-speedup comparison (from the experiment's PSNR-vs-speedup curves):")
    summary = (out / "e2e" / "summary.txt").read_text().splitlines()
    print("\n".join(ln for ln in summary if ln.startswith("  cacheedit")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
