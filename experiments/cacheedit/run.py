"""``npukit experiment cacheedit``: CacheEdit vs baselines on multi-round editing sessions (CPU).

Draws ``--images`` sessions of ``--rounds`` edits (each touching at most a quarter of the image) from
the procedural dataset, runs every method of :data:`npukit.models.cacheedit.METHODS` on them in
batches of ``--batch`` images, and reports per method: end-to-end wall-clock speedup over ``full``
(each method timed back to back with ``full`` in one process; median over ``--reps`` of the per-rep
ratios), PSNR (dB) / SSIM of the final images against full recomputation, FLOPs saved (from the
Ledger), edit accuracy against the ground-truth targets (every round), IoU of the recomputed token
set with the ground-truth edit patches, PSNR to the final ground truth (whole image, and over the
pixels no round edits). ToCa-like baselines recompute as many tokens per image and round as CacheEdit
did; step-reuse's threshold is calibrated per round (on the full run's change indicators) to run as
many steps as CacheEdit's FLOP fraction.
``cacheedit+step`` is a documented hybrid, not pure token caching: CacheEdit with one Otsu split, ring 1
(ring_floor 0.9), budget <= 0.5 and no mid-round refresh (``HYBRID``) whose sparse steps run every
``HYBRID_STRIDE``-th step, the steps between reusing every token's
last velocity (RegionE-style).
Knob sweeps give PSNR-vs-speedup curves (``curves.csv``: method, knob, speedup, psnr_db, ssim,
flops_saved; ``curves.png``): cacheedit's ``max_active`` budget and ``refresh`` period, toca-*'s
recomputed token fraction (under the same cache schedule), cacheedit+step's stride, step-reuse's steps
run; ``summary.txt`` states whether cacheedit (and the hybrid) beats each baseline at its speedup
(interpolated on the baseline's curve), point by point along the curves as well.
Also writes the Delayed Latent Emergence measurement (``dle.csv``, ``dle.png``), the NPU cost of full
vs cached sessions (``npu.csv``), the Ledger (``ledger.json``) and ``summary.txt``.
Where the error of the token methods comes from (inside vs outside the edits, per refresh period, full
recomputation's own background regeneration): ``python -m npukit.experiments.cacheedit.diagnose``.
The batches of sessions run on the executor of ``--scheduler`` / ``--dask-local`` (default: in
this process); DLE, NPU cost and reporting run on the client.
This module imports torch only inside :func:`run`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

DEFAULT_OUT = "out/experiment/cacheedit"
TOKEN_METHODS = ("cacheedit", "toca-random", "toca-attn", "oracle")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``npukit experiment cacheedit``."""
    p.add_argument("--quick", action="store_true", help="8 images, 1 timing rep, DLE on 4 images (< 3 min)")
    p.add_argument("--images", type=int, default=None, metavar="N", help="sessions (default 50; --quick 8)")
    p.add_argument("--rounds", type=int, default=3, metavar="R", help="edit rounds per session (default 3)")
    p.add_argument("--steps", type=int, default=28, metavar="S", help="sampling steps (default 28)")
    p.add_argument("--batch", type=int, default=10, metavar="B", help="images sampled together (default 10)")
    p.add_argument("--reps", type=int, default=None, metavar="K", help="timing repetitions (default 3; --quick 1)")
    p.add_argument("--ring", type=int, default=None, metavar="R", help="active-set dilation in patches (default: CacheConfig)")
    p.add_argument("--layer", type=int, default=None, metavar="L", help="compared block (default: CacheConfig)")
    p.add_argument("--ring-floor", dest="ring_floor", type=float, default=None, metavar="F",
                   help="hysteresis of the ring: a ring token joins if its score >= F x threshold (default: CacheConfig)")
    p.add_argument("--reference", choices=("identity", "previous"), default=None,
                   help="divergence reference (default: CacheConfig)")
    p.add_argument("--score", choices=("l2", "log", "rel"), default=None, help="token divergence score (default: CacheConfig)")
    p.add_argument("--tail", type=int, default=None, metavar="N", help="trailing full steps (default: CacheConfig)")
    p.add_argument("--refresh", type=int, default=None, metavar="K", help="a full step every K steps (default: CacheConfig)")
    p.add_argument("--invariant", choices=("velocity", "source", "forecast"), default=None,
                   help="what invariant tokens do at sparse steps (default: CacheConfig)")
    p.add_argument("--max-active", dest="max_active", type=float, default=None, metavar="F",
                   help="upper compute budget, fraction of target tokens (default: CacheConfig)")
    p.add_argument("--arch", default="npu32", help="NPU arch for the energy/latency estimate (default npu32)")
    p.add_argument("--weights", default=None, metavar="FILE", help="DiT weights (default: the shipped ones)")
    p.add_argument("--threads", type=int, default=1, metavar="T",
                   help="torch CPU threads (default 1: the small ops run fastest on one thread, and a shared machine "
                        "does not stall it; 0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default {DEFAULT_OUT})")


MAX_IMAGES, MAX_ROUNDS, MAX_STEPS, MAX_BATCH, MAX_REPS, MAX_RING = 10_000, 100, 1000, 1024, 100, 64


def _check(args: argparse.Namespace) -> tuple[Any, Any]:
    """Every option, before any work (no sessions drawn, no executor started, no file or folder
    created): the numbers (ranges, finite floats), ``--out``, the executor flags, ``--arch`` (and its
    energy table, mapped once on the model's full step), the ``--weights`` file (loaded and checked)
    and the cache options against the model. Returns ``(model, cache config)``; ConfigError otherwise."""
    from .._options import MAX_SEED, MAX_THREADS, check_common, float_option, int_option

    int_option(args.images, "--images", 1, MAX_IMAGES)
    int_option(args.rounds, "--rounds", 1, MAX_ROUNDS)
    int_option(args.steps, "--steps", 2, MAX_STEPS)
    int_option(args.batch, "--batch", 1, MAX_BATCH)
    int_option(args.reps, "--reps", 1, MAX_REPS)
    int_option(args.threads, "--threads", 0, MAX_THREADS, " (0: torch's default)")
    int_option(args.seed, "--seed", 0, MAX_SEED)
    int_option(args.ring, "--ring", 0, MAX_RING, " (patches)")
    int_option(args.tail, "--tail", 0, args.steps, " (at most --steps)")
    int_option(args.refresh, "--refresh", 0, MAX_STEPS, " (0: never)")
    float_option(args.ring_floor, "--ring-floor", 0.0, 100.0)
    check_common(args, DEFAULT_OUT)
    from npukit.sim import load_arch, load_table

    arch = load_arch(args.arch)  # an unknown or malformed --arch fails here, before any training or file
    load_table(arch.energy_table)

    from npukit.models.cacheedit import (
        IMAGE,  # torch from here on
        CacheConfig,
        WeightsError,
        load_model,
    )

    from . import npu_cost

    floor = CacheConfig.min_active
    float_option(args.max_active, "--max-active", floor, 1.0, hint=f" (the lower budget min_active is {floor:g})")
    model = load_model(args.weights)
    cfg = model.cfg
    if cfg.image != IMAGE or cfg.channels != 3:
        raise WeightsError(f"--weights '{args.weights}' is a model of {cfg.channels}-channel {cfg.image}x{cfg.image} "
                           f"images; the experiment's sessions are 3-channel {IMAGE}x{IMAGE}")
    depth = len(model.blocks)
    int_option(args.layer, "--layer", -depth, depth - 1, f" for this {depth}-block model")
    opts = ("ring", "layer", "ring_floor", "reference", "score", "tail", "refresh", "max_active", "invariant")
    cache = CacheConfig(**{k: getattr(args, k) for k in opts if getattr(args, k, None) is not None})
    cache.check(depth)
    n_img = args.images or (8 if args.quick else 50)
    npu_cost.step_cost(cfg.tokens, cfg.seq, cfg.to_dict(), arch, images=min(args.batch, n_img))  # the arch maps the model
    return model, cache


def _sessions(n: int, rounds: int, seed: int, texture: bool = False, shade: bool = False) -> list[Any]:
    import numpy as np

    from npukit.models.cacheedit import make_session

    rng = np.random.default_rng(10_000 + seed)
    return [make_session(rng, rounds, texture=texture, shade=shade) for _ in range(n)]


CURVE_CE = (("max_active=0.06", {"max_active": 0.06}), ("max_active=0.2", {"max_active": 0.2}),
            ("max_active=0.35", {"max_active": 0.35}), ("refresh=9", {"refresh": 9}),
            ("refresh=0", {"refresh": 0, "forecast": 0}))  # cacheedit's knobs (the main point: the CacheConfig)
CURVE_TOCA = (0.05, 0.1, 0.2, 0.3, 0.45, 0.6)  # toca-*: recomputed fraction of the target tokens
CURVE_SR = (20, 14, 10, 8, 6, 4)  # step-reuse: steps run (threshold calibrated per round)
CURVE_HYBRID = (2, 3, 6)  # cacheedit+step: stride (the main point runs HYBRID_STRIDE)
HYBRID_STRIDE = 4
# cacheedit+step's active set: one Otsu split, ring 1 (its sparse steps are fewer, so it affords more tokens), no refresh
HYBRID = {"ring": 1, "ring_floor": 0.9, "levels": 1, "max_active": 0.5, "refresh": 0, "forecast": 0}


def _hybrid(cache: Any, stride: int = HYBRID_STRIDE) -> Any:
    import dataclasses

    return dataclasses.replace(cache, stride=stride, **HYBRID)


def _run_batch(model: Any, sess: list[Any], rounds: int, steps: int, cache: Any, reps: int, seed: int, ledger: Any,
               tag: str) -> dict[Any, dict[str, Any]]:
    """All methods (and the knob sweeps of the PSNR-vs-speedup curves) on one batch of sessions.

    Per method (key: name; curve points: ``(method, knob)``): final session, wall times, and the
    median over reps of the per-rep ratio full time / method time (each rep times ``full`` first).
    """
    import dataclasses

    import numpy as np
    import torch

    from npukit.models.cacheedit import EditSession, calibrate_threshold, ledger_totals, patch_mask

    cfg = model.cfg
    src = torch.from_numpy(np.stack([s[0] for s in sess]))
    instrs = [torch.tensor([s[1][r] for s in sess], dtype=torch.long) for r in range(rounds)]
    gt_masks = [patch_mask(torch.from_numpy(np.stack([s[3][r] for s in sess])), cfg.patch) for r in range(rounds)]
    out: dict[Any, dict[str, Any]] = {}
    ratios: dict[Any, list[float]] = {}
    for m in ("full", "cacheedit", "toca-attn", "step-reuse", "cacheedit+step"):  # untimed warm-up (allocator, lazy init)
        EditSession(model, src, m, steps=3, cache=cache, seed=seed).edit(instrs[0])
    # untimed: full's per-step change indicators, to calibrate step-reuse's threshold per round
    cal = EditSession(model, src, "full", steps=steps, cache=cache, seed=seed)
    for r in range(rounds):
        cal.edit(instrs[r], indicators=True)
    inds = [res.indicators for res in cal.results]
    for rep in range(reps):
        led = ledger if rep == 0 else None

        def go(method: str, kw_per_round: list[dict[str, Any]] | None = None, *, scope: str = "", cc: Any = None,
               _led: Any = led) -> tuple[Any, float]:
            s = EditSession(model, src, method, steps=steps, cache=cc or cache, seed=seed, ledger=_led,
                            scope=f"{scope or method}/{tag}")
            t0 = time.perf_counter()
            for r in range(rounds):
                s.edit(instrs[r], **(kw_per_round[r] if kw_per_round else {}))
            return s, time.perf_counter() - t0

        s_full, t_full = go("full")
        s_ce, t_ce = go("cacheedit")
        counts = [res.active.sum(1) for res in s_ce.results]
        frac = [c.float().mean().item() / cfg.tokens for c in counts]
        runs: dict[Any, tuple[Any, float]] = {"full": (s_full, t_full), "cacheedit": (s_ce, t_ce)}
        runs["toca-random"] = go("toca-random", [{"counts": c, "generator": torch.Generator().manual_seed(seed + r)}
                                                 for r, c in enumerate(counts)])
        runs["toca-attn"] = go("toca-attn", [{"counts": c} for c in counts])
        runs["oracle"] = go("oracle", [{"gt_mask": m} for m in gt_masks])
        runs["cacheedit+step"] = go("cacheedit+step", cc=_hybrid(cache))
        # step-reuse at CacheEdit's compute: FLOP fraction of cacheedit's round r -> steps to run
        if rep == 0 and ledger is not None:
            fl_full = ledger_totals(ledger, f"full/{tag}")["flops_executed"]
            fl_ce = ledger_totals(ledger, f"cacheedit/{tag}")["flops_executed"]
            ce_frac = fl_ce / max(fl_full, 1.0)
        else:
            ce_frac = out["cacheedit"]["flop_frac"]
        target = max(2, round(steps * ce_frac))
        runs["step-reuse"] = go("step-reuse", [{"threshold": calibrate_threshold(i, target)} for i in inds])
        # knob sweeps: PSNR-vs-speedup curves
        for knob, kw in CURVE_CE:
            runs[("cacheedit", knob)] = go("cacheedit", scope=f"curve/cacheedit/{knob.split('=')[1]}",
                                           cc=dataclasses.replace(cache, **kw))
        for f in CURVE_TOCA:
            c = torch.full((len(sess),), max(1, round(f * cfg.tokens)))
            runs[("toca-attn", f"frac={f}")] = go("toca-attn", [{"counts": c}] * rounds, scope=f"curve/toca-attn/{f}")
            runs[("toca-random", f"frac={f}")] = go(
                "toca-random", [{"counts": c, "generator": torch.Generator().manual_seed(seed + r)} for r in range(rounds)],
                scope=f"curve/toca-random/{f}")
        for st in CURVE_HYBRID:
            runs[("cacheedit+step", f"stride={st}")] = go("cacheedit+step", scope=f"curve/cacheedit+step/{st}",
                                                          cc=_hybrid(cache, st))
        for n in CURVE_SR:
            runs[("step-reuse", f"steps={n}")] = go("step-reuse", [{"threshold": calibrate_threshold(i, n)} for i in inds],
                                                    scope=f"curve/step-reuse/{n}")
        for m, (s, t) in runs.items():
            ratios.setdefault(m, []).append(t_full / t)
            if rep == 0:
                out[m] = {"session": s, "time": [t], "active_frac": frac if m != "full" else None}
            else:
                out[m]["time"].append(t)
        if rep == 0:
            out["cacheedit"]["flop_frac"] = ce_frac
    for m in out:
        out[m]["speedup"] = statistics.median(ratios[m])
    out["_meta"] = {"src": src, "gt_masks": gt_masks}
    return out


def _interp(curve: list[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation of (speedup, psnr) points at speedup ``x``; None outside their range."""
    pts = sorted(curve)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def _plot_curves(rows: list[dict[str, Any]], path: Any) -> None:
    """PSNR vs speedup per method (one line per method through its knob sweep)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for m in sorted({r["method"] for r in rows}):
        pts = sorted((r["speedup"], r["psnr_db"]) for r in rows if r["method"] == m)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=m)
    ax.axhline(30, color="grey", ls=":", lw=1)
    ax.axvline(2.5, color="grey", ls=":", lw=1)
    ax.set_xlabel("end-to-end CPU speedup over full (x)")
    ax.set_ylabel("PSNR vs full recomputation (dB)")
    ax.set_title("CacheEdit vs baselines: PSNR at equal speedup")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    from npukit.sim import write_figure

    write_figure(path, fig, dpi=110)
    plt.close(fig)


_MODELS: dict[Any, Any] = {}  # per process: the DiT of a weights path, loaded once per worker


def _empty_per(methods: Any) -> dict[str, dict[str, Any]]:
    keys = ("psnr", "ssim", "edit", "iou", "psnr_gt", "psnr_bg", "speedup", "time", "frac", "iou_det")
    return {m: {**{k: [] for k in keys}, "frac_r": {}} for m in methods}


def _batch_job(job: dict[str, Any]) -> dict[str, Any]:
    """One batch of sessions, run wherever the executor puts it (this process, a pool or a Dask worker).

    Runs every method back to back (:func:`_run_batch`, so speedup ratios are measured in one process)
    and returns plain numbers: per-method metric lists, the knob-curve points and the batch's Ledger
    as a dict. The weights path (``None``: the shipped weights) must exist on the worker.
    """
    import torch

    from npukit.models.cacheedit import METHODS, CacheConfig, load_model
    from npukit.sim.ledger import Ledger

    if job["threads"]:
        torch.set_num_threads(job["threads"])
    if job["weights"] not in _MODELS:
        _MODELS[job["weights"]] = load_model(job["weights"])
    model = _MODELS[job["weights"]]
    ledger = Ledger()
    sess = job["sessions"]
    res = _run_batch(model, sess, job["rounds"], job["steps"], CacheConfig(**job["cache"]), job["reps"], job["seed"],
                     ledger, f"batch{job['index']}")
    per, curve = _batch_metrics(res, sess, METHODS, _metric_kw(model))
    return {"per": per, "curve": list(curve.items()), "ledger": ledger.to_dict()}


def _metric_kw(model: Any) -> dict[str, Any]:
    """Options of edit correctness for the model's data mode: textured edits compare low-passed images
    (mean colour / shape), shaded edits chromaticity (hue / shape / place, not the unspecified brightness)."""
    from npukit.models.cacheedit import TEXTURE_SMOOTH

    return {"smooth": TEXTURE_SMOOTH if getattr(model.cfg, "texture", False) else 1,
            "chroma": bool(getattr(model.cfg, "shade", False))}


def _batch_metrics(res: dict[Any, dict[str, Any]], sess: list[Any], methods: Any,
                   metric_kw: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[Any, Any]]:
    """PSNR/SSIM vs full, edit accuracy (``metric_kw``: :func:`edit_correct` options), IoU, active fractions,
    times of one batch's methods."""
    import numpy as np
    import torch

    from npukit.models.cacheedit import edit_correct, iou, psnr_db, ssim

    per = _empty_per(methods)
    curve: dict[tuple[str, str], dict[str, list[float]]] = {}
    gt_masks = res["_meta"]["gt_masks"]
    full_final = res["full"]["session"].source
    gt_final = torch.from_numpy(np.stack([s[2][-1] for s in sess]))
    untouched = ~torch.from_numpy(np.stack([np.logical_or.reduce(s[3]) for s in sess]))  # outside every round's edit
    for key, rk in res.items():
        if isinstance(key, tuple):
            c = curve.setdefault(key, {"psnr": [], "ssim": [], "time": []})
            c["psnr"] += psnr_db(rk["session"].source, full_final).tolist()
            c["ssim"] += ssim(rk["session"].source, full_final).tolist()
            c["time"].append(statistics.median(rk["time"]))
    for m in methods:
        s = res[m]["session"]
        d = per[m]
        d["psnr"] += psnr_db(s.source, full_final).tolist()
        d["ssim"] += ssim(s.source, full_final).tolist()
        d["psnr_gt"] += psnr_db(s.source, gt_final).tolist()
        d["psnr_bg"] += psnr_db(s.source, gt_final, untouched).tolist()
        d["speedup"].append(res[m]["speedup"])
        d["time"].append(statistics.median(res[m]["time"]))
        for r, rr in enumerate(s.results):
            src_r = torch.from_numpy(np.stack([x[0] if r == 0 else x[2][r - 1] for x in sess]))
            tgt_r = torch.from_numpy(np.stack([x[2][r] for x in sess]))
            mask_r = torch.from_numpy(np.stack([x[3][r] for x in sess]))
            d["edit"] += edit_correct(rr.image.clamp(-1, 1), src_r, tgt_r, mask_r, **(metric_kw or {})).float().tolist()
            if rr.active is not None:
                for i in range(len(sess)):
                    d["iou"].append(iou(rr.active[i], gt_masks[r][i]))
                    d["frac"].append(rr.active[i].float().mean().item())
                    d["frac_r"].setdefault(r, []).append(d["frac"][-1])
                    if rr.detected is not None:
                        d["iou_det"].append(iou(rr.detected[i], gt_masks[r][i]))
    return per, curve


def run(args: argparse.Namespace) -> int:
    """Run the experiment; returns 0. The batches of sessions run on the executor of ``--scheduler`` /
    ``--dask-local`` (default: in this process); everything else runs here."""
    from npukit.sim import executor_from_args

    model, cache = _check(args)  # every option, the weights and the arch: before any work
    quick = bool(args.quick)
    n_img = args.images or (8 if quick else 50)
    reps = args.reps or (1 if quick else 3)

    executor = executor_from_args(args, local_workers=1)  # Dask connects and checks versions before anything is written
    try:
        return _run(args, executor, quick, n_img, reps, model, cache)
    finally:
        executor.close()


def _run(args: argparse.Namespace, executor: Any, quick: bool, n_img: int, reps: int, model: Any, cache: Any) -> int:
    import dataclasses

    import numpy as np
    import torch

    from npukit.models.cacheedit import METHODS, ledger_totals
    from npukit.sim import format_table, prepare_out_dir, write_csv, write_text
    from npukit.sim.ledger import Ledger

    from . import dle, npu_cost

    out_dir = prepare_out_dir(args.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    _MODELS[args.weights] = model  # the checked model serves this process's batches (workers elsewhere load the file)
    cfg = model.cfg
    # a model trained on textured / shaded edits gets sessions of its data mode
    sessions = _sessions(n_img, args.rounds, args.seed, bool(getattr(cfg, "texture", False)), bool(getattr(cfg, "shade", False)))
    ledger = Ledger(meta={"experiment": "cacheedit", "device": "cpu"})
    t_start = time.perf_counter()
    per: dict[str, dict[str, Any]] = _empty_per(METHODS)
    curve: dict[tuple[str, str], dict[str, list[float]]] = {}
    jobs = [dict(index=bi // args.batch, sessions=sessions[bi: bi + args.batch], rounds=args.rounds, steps=args.steps,
                 cache=dataclasses.asdict(cache), reps=reps, seed=args.seed, weights=args.weights, threads=args.threads)
            for bi in range(0, n_img, args.batch)]
    # each batch times its methods back to back in one process; merged in batch order, whichever backend ran them
    for part in executor.map(_batch_job, jobs):
        ledger.merge(Ledger.from_dict(part["ledger"]))
        for m, d in part["per"].items():
            for k, v in d.items():
                if k == "frac_r":
                    for r, fr in v.items():
                        per[m]["frac_r"].setdefault(int(r), []).extend(fr)
                else:
                    per[m][k] += v
        for key, c in part["curve"]:
            cc = curve.setdefault(key, {"psnr": [], "ssim": [], "time": []})
            for k in cc:
                cc[k] += c[k]
    fl_full = ledger_totals(ledger, "full")["flops_executed"]
    rows = []
    for m in METHODS:
        d = per[m]
        tot = ledger_totals(ledger, m)
        # speedup: per batch medians of back-to-back ratios, combined as total-time ratio weights
        rows.append(dict(
            method=m,
            speedup=round(sum(per["full"]["time"]) / sum(d["time"]), 3) if m != "full" else 1.0,
            speedup_median_ratio=round(statistics.median(d["speedup"]), 3),
            psnr_db=round(float(np.mean(d["psnr"])), 2) if m != "full" else float("inf"),
            ssim=round(float(np.mean(d["ssim"])), 4),
            flops_saved=round(1 - tot["flops_executed"] / fl_full, 4),
            bytes_executed=int(tot["bytes_executed"]),
            edit_acc=round(float(np.mean(d["edit"])), 4),
            iou=round(float(np.mean(d["iou"])), 4) if d["iou"] else "",
            iou_detected=round(float(np.mean(d["iou_det"])), 4) if d["iou_det"] else "",
            active_frac=round(float(np.mean(d["frac"])), 4) if d["frac"] else "",
            psnr_gt_db=round(float(np.mean(d["psnr_gt"])), 2),
            psnr_bg_db=round(float(np.mean(d["psnr_bg"])), 2),
            time_s=round(sum(d["time"]), 3),
        ))
    write_csv(out_dir / "results.csv", rows)
    t_full = sum(per["full"]["time"])
    main_knob = {"cacheedit": "default", "cacheedit+step": f"stride={HYBRID_STRIDE}", "toca-random": "cacheedit-counts",
                 "toca-attn": "cacheedit-counts", "step-reuse": "cacheedit-flops"}
    crows = [dict(method=r["method"], knob=main_knob[r["method"]], speedup=r["speedup"], psnr_db=r["psnr_db"], ssim=r["ssim"],
                  flops_saved=r["flops_saved"]) for r in rows if r["method"] not in ("full", "oracle")]
    for (m, knob), c in curve.items():
        prefix = f"curve/{m}/{knob.split('=')[1]}"
        crows.append(dict(method=m, knob=knob, speedup=round(t_full / sum(c["time"]), 3),
                          psnr_db=round(float(np.mean(c["psnr"])), 2), ssim=round(float(np.mean(c["ssim"])), 4),
                          flops_saved=round(1 - ledger_totals(ledger, prefix)["flops_executed"] / fl_full, 4)))
    write_csv(out_dir / "curves.csv", crows)
    _plot_curves(crows, out_dir / "curves.png")
    ce_row = next(r for r in rows if r["method"] == "cacheedit")
    hy_row = next(r for r in rows if r["method"] == "cacheedit+step")
    equal = []
    for me in (ce_row, hy_row):
        for m in ("toca-random", "toca-attn", "step-reuse"):
            pts = [(r["speedup"], r["psnr_db"]) for r in crows if r["method"] == m]
            y = _interp(pts, me["speedup"])
            head = f"  {me['method']} ({me['speedup']:.2f}x, {me['psnr_db']:.2f} dB) vs {m}:"
            if y is None:
                lo, hi = min(p[0] for p in pts), max(p[0] for p in pts)
                equal.append(f"{head} no {m} point brackets {me['speedup']:.2f}x (its curve: {lo:.2f}-{hi:.2f}x); no verdict")
            else:
                verdict = "BEATS" if me["psnr_db"] > y else "does NOT beat"
                equal.append(f"{head} {m} at equal speedup {y:.2f} dB (interpolated) -> {verdict} it")
    for cm in ("cacheedit", "cacheedit+step"):  # whole curves: every point of the method against each baseline's curve
        mine = sorted((r["speedup"], r["psnr_db"], r["knob"]) for r in crows if r["method"] == cm)
        for m in ("toca-random", "toca-attn", "step-reuse"):
            pts = [(r["speedup"], r["psnr_db"]) for r in crows if r["method"] == m]
            cmp = [(sp, ps, y) for sp, ps, _ in mine if (y := _interp(pts, sp)) is not None]
            wins = sum(ps > y for _, ps, y in cmp)
            equal.append(f"  curve {cm} vs {m}: higher PSNR at {wins} of {len(cmp)} matched speedups ("
                         + ", ".join(f"{sp:.2f}x {ps:.1f}/{y:.1f} dB" for sp, ps, y in cmp) + ")")
    ledger.meta.update({"images": n_img, "rounds": args.rounds, "steps": args.steps, "cache": cache.__dict__})
    write_text(out_dir / "ledger.json", ledger.to_json())

    # Delayed Latent Emergence on the first sessions' first round
    n_dle = 4 if quick else 10
    sd = sessions[:n_dle]
    from npukit.models.cacheedit import patch_mask

    dle_rows = dle.measure(model, torch.from_numpy(np.stack([s[0] for s in sd])),
                           torch.tensor([s[1][0] for s in sd], dtype=torch.long),
                           patch_mask(torch.from_numpy(np.stack([s[3][0] for s in sd])), cfg.patch), args.steps, args.seed)
    write_csv(out_dir / "dle.csv", dle_rows)
    dle.plot(dle_rows, out_dir / "dle.png")

    # NPU cost per image session, full vs cacheedit (mean active tokens per round)
    fr = per["cacheedit"]["frac_r"]
    act_per_round = [float(np.mean(fr[r])) * cfg.tokens for r in range(args.rounds)]
    layer = cache.layer % len(model.blocks)
    from npukit.models.cacheedit import full_steps

    npu = npu_cost.session_cost(act_per_round, cfg.to_dict(), args.steps, args.arch, ref_blocks=layer + 1,
                                images=min(args.batch, n_img), ref_rounds=args.rounds if cache.reference == "identity" else 1,
                                full_extra=len(full_steps(cache, args.steps)))
    write_csv(out_dir / "npu.csv", [npu])

    elapsed = time.perf_counter() - t_start
    headers = ["method", "speedup", "psnr_db", "ssim", "flops_saved", "edit_acc", "iou", "active_frac", "psnr_gt_db",
               "psnr_bg_db"]
    table = format_table(headers, [[r[h] for h in headers] for r in rows])
    s0 = [r for r in dle_rows if r["step"] == 0 and r["layer"] >= 0]
    lat_mid = [r for r in dle_rows if r["layer"] == -1]
    lines = [
        f"CacheEdit experiment: {n_img} sessions x {args.rounds} rounds, {args.steps} steps, batch {args.batch}, "
        f"{reps} timing rep(s); device: CPU ({torch.get_num_threads()} threads; no GPU in this run)",
        f"model: {cfg.to_dict()} trained record: {getattr(model, 'record', {}).get('heldout', {})}",
        f"cache: {cache}",
        "",
        table,
        "",
        "speedup = sum of full's wall time / sum of the method's (each batch timed back to back with full); "
        "psnr/ssim vs full recomputation's final image; flops_saved from the Ledger (reference pass included); "
        "psnr_gt_db vs the ground-truth final image, psnr_bg_db the same over the pixels no round edits (structural "
        "consistency: full recomputation regenerates them every round, a cache keeps them).",
        "Delayed Latent Emergence (step 0, per block: divergence inside / outside the edit mask): "
        + ", ".join(f"b{r['layer']} {r['div_in']:.3f}/{r['div_out']:.3f}" for r in s0),
        "latent x_t difference inside the mask at steps 0, S/4, S/2, 3S/4, S-1: "
        + ", ".join(f"{lat_mid[i]['div_in']:.3f}" for i in (0, len(lat_mid) // 4, len(lat_mid) // 2, 3 * len(lat_mid) // 4, -1)),
        f"NPU ({args.arch}) per batch of {npu['images']} sessions: "
        f"full {npu['full_latency_ms']:.3f} ms / {npu['full_energy_uj']:.1f} uJ, "
        f"cached {npu['cached_latency_ms']:.3f} ms / {npu['cached_energy_uj']:.1f} uJ "
        f"(latency x{npu['latency_speedup']:.2f}, energy x{npu['energy_ratio']:.2f})",
        *(f"target (>= 2.5x at >= 30 dB vs full): {r['method']} {r['speedup']:.2f}x at {r['psnr_db']:.2f} dB -> "
          + ("MET" if r["speedup"] >= 2.5 and r["psnr_db"] >= 30 else "NOT met") for r in (ce_row, hy_row)),
        "equal-speedup comparison (PSNR-vs-speedup curves in curves.csv / curves.png; linear interpolation):",
        *equal,
        f"wall time {elapsed:.1f} s",
    ]
    summary = "\n".join(lines) + "\n"
    write_text(out_dir / "summary.txt", summary)
    print(summary, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="npukit experiment cacheedit", description=__doc__)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
