"""``npukit experiment cacheedit``: CacheEdit vs diffusers' caches and token caching on the Flux editor (CPU).

Draws ``images`` editing sessions of ``rounds`` edits from the procedural data (shaded mode, as the editor
was trained), and runs every method of :data:`npukit.models.cacheedit.SESSION_METHODS` at its knobs
(:data:`KNOBS`) on batches of ``batch`` sessions served together (one transformer call per step for the
batch; CacheEdit and the token caches choose one active set per session, diffusers' caches decide per call
for the batch), every method back to back on the same batch, same noise. Per method and knob: end-to-end
wall-clock speedup over ``full`` (sum of full's batch times / sum of the method's, every method run back to back
on each batch, full recomputation timed first and again last, the mean of the two counted),
FLOPs and bytes saved (:class:`WorkCounter`: executed Linear and attention work, reference pass included),
PSNR (dB) / SSIM of the final image vs full recomputation's, edit correctness vs the ground truth (every
round), background preservation (PSNR over the pixels no round edits, final image vs the source, and vs
full's), IoU of the recomputed tokens with the ground-truth edit patches. Writes ``results.csv`` (each
method at its main knob), ``curves.csv`` / ``curves.png`` (every knob: PSNR vs speedup and vs FLOPs saved),
``dle.csv`` / ``dle.png`` (Delayed Latent Emergence), ``npu.csv`` (FLUX.1 Kontext-dev cost, :mod:`.npu_cost`),
``ledger.json`` and ``summary.txt`` (targets and equal-speedup / equal-FLOPs verdicts).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# method -> (main knob, curve knobs); knobs: cacheedit refresh interval (calls; 0: none), toca-* recomputed
# fraction (main: CacheEdit's per-round counts), fbcache / magcache threshold, taylorseer cache interval, pab
# spatial block skip range
KNOBS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "full": (None, ()),
    "cacheedit": (0, (7, 14, 21)),
    "cacheedit-ctx": (0, ()),
    "oracle": (None, ()),
    "toca-random": ("matched", (0.1, 0.5)),
    "toca-attn": ("matched", (0.1, 0.5)),
    "fbcache": (0.1, (0.2, 0.4)),
    "magcache": (0.06, (0.02, 0.2)),
    "taylorseer": (3, (2, 6)),
    "pab": (2, (4,)),
}
QUICK_KNOBS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    m: (main, curve[-1:] if curve else ()) for m, (main, curve) in KNOBS.items()}
BASELINES = ("toca-random", "toca-attn", "fbcache", "magcache", "taylorseer", "pab")


def _sessions(n: int, rounds: int, seed: int) -> list[Any]:
    import numpy as np

    from npukit.models.cacheedit import make_session

    rng = np.random.default_rng(10_000 + seed)
    return [make_session(rng, rounds, shade=True) for _ in range(n)]


def _job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Every method and knob on a chunk of sessions; per (session, method, knob) plain numbers."""
    import numpy as np
    import torch

    from npukit.models.cacheedit import (
        WorkCounter,
        calibrate_mag_ratios,
        edit_correct,
        edit_session,
        iou,
        load_editor,
        psnr_db,
        ssim,
        token_mask,
    )

    if job["threads"]:
        torch.set_num_threads(job["threads"])
    editor = _EDITORS.get(job["weights"]) or load_editor(job["weights"])
    _EDITORS[job["weights"]] = editor
    patch, steps = editor.cfg.patch, job["steps"]
    counter = WorkCounter(editor.transformer)
    rows: list[dict[str, Any]] = []
    sessions, nb = job["sessions"], job["batch"]
    try:
        for c0 in range(0, len(sessions), nb):
            chunk = sessions[c0:c0 + nb]  # B sessions served together (one transformer call per step for all)
            b, nr = len(chunk), len(chunk[0][1][1])
            src = torch.stack([torch.from_numpy(sess[0]) for _, sess in chunk])
            ins = [torch.tensor([list(sess[1][r]) for _, sess in chunk]) for r in range(nr)]
            gt = [torch.stack([token_mask(torch.from_numpy(sess[3][r]), patch) for _, sess in chunk]) for r in range(nr)]
            noise = torch.cat([torch.randn((1, *src.shape[1:]), generator=torch.Generator().manual_seed(
                job["seed"] * 100_003 + si)) for si, _ in chunk])  # each session's own noise, as at batch 1
            mag = calibrate_mag_ratios(editor, src, ins[0], noise, steps)
            edit_session(editor, src, ins[:1], noise, "full", steps=2)  # untimed warm-up
            runs: dict[tuple[str, Any], Any] = {}
            for method, (main, curve) in job["knobs"].items():
                for knob in (main, *curve):
                    counts = None
                    if knob == "matched":
                        ce = runs[("cacheedit", job["knobs"]["cacheedit"][0])]
                        counts = [a.sum(1).tolist() for a in ce.active]
                    runs[(method, knob)] = edit_session(
                        editor, src, ins, noise, method, None if knob == "matched" else knob, steps=steps, gt_masks=gt,
                        counts=counts, seed=job["seed"] + chunk[0][0], mag_ratios=mag, counter=counter)
            full = runs[("full", None)]
            # full recomputation timed again after every method: its time is the mean of the first and this
            # run, so a slow or fast phase of a shared machine does not bias every method's speedup one way
            again = edit_session(editor, src, ins, noise, "full", steps=steps)
            full_s = (full.seconds + again.seconds) / 2
            for i, (si, sess) in enumerate(chunk):
                src0, _, tgts, masks = sess
                one = src[i:i + 1]
                untouched = torch.from_numpy(~np.logical_or.reduce(masks))[None]
                gt_final = torch.from_numpy(tgts[-1])[None]
                full_fin = full.images[-1][i:i + 1]
                for (method, knob), r in runs.items():
                    fin = r.images[-1][i:i + 1]
                    edit = [bool(edit_correct(r.images[k][i:i + 1], one if k == 0 else torch.from_numpy(tgts[k - 1])[None],
                                              torch.from_numpy(tgts[k])[None], torch.from_numpy(masks[k])[None],
                                              chroma=True)[0]) for k in range(nr)]
                    act = [a[i] for a in r.active if a is not None]
                    rows.append(dict(  # the batch's time and work, shared equally by its sessions
                        session=si, method=method, knob=knob, main=knob == job["knobs"][method][0],
                        seconds=(full_s if method == "full" else r.seconds) / b,
                        macs=r.macs / b, bytes=r.bytes / b, full_seconds=full_s / b, full_macs=full.macs / b,
                        full_bytes=full.bytes / b,
                        psnr=float(psnr_db(fin, full_fin)[0]) if method != "full" else float("inf"),
                        ssim=float(ssim(fin, full_fin)[0]), edit=float(np.mean(edit)),
                        psnr_gt=float(psnr_db(fin, gt_final)[0]),
                        psnr_bg_src=float(psnr_db(fin, one, untouched)[0]),
                        psnr_bg_full=float(psnr_db(fin, full_fin, untouched)[0]) if method != "full" else float("inf"),
                        iou=float(np.mean([iou(a, g[i]) for a, g in zip(act, gt, strict=True)])) if act else None,
                        active=float(np.mean([a.float().mean().item() for a in act])) if act else None,
                        active_r=[a.float().mean().item() for a in act] if act else None))
    finally:
        counter.remove()
    return rows


_EDITORS: dict[Any, Any] = {}


def _interp(curve: list[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation of (x, y) points at ``x``; None outside their range."""
    pts = sorted(curve)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def _aggregate(rows: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    import numpy as np

    out = []
    keys = list(dict.fromkeys((r["method"], r["knob"]) for r in rows))
    for method, knob in keys:
        rs = [r for r in rows if r["method"] == method and r["knob"] == knob]
        fin = [r["psnr"] for r in rs if np.isfinite(r["psnr"])]
        act = [r["active"] for r in rs if r["active"] is not None]
        ious = [r["iou"] for r in rs if r["iou"] is not None]
        out.append(dict(
            method=method, knob="" if knob is None else knob, main=rs[0]["main"],
            speedup=round(sum(r["full_seconds"] for r in rs) / sum(r["seconds"] for r in rs), 3),
            psnr_db=round(float(np.mean(fin)), 2) if fin else float("inf"),
            ssim=round(float(np.mean([r["ssim"] for r in rs])), 4),
            flops_saved=round(1 - sum(r["macs"] for r in rs) / sum(r["full_macs"] for r in rs), 4),
            bytes_saved=round(1 - sum(r["bytes"] for r in rs) / sum(r["full_bytes"] for r in rs), 4),
            model=model,
            edit_acc=round(float(np.mean([r["edit"] for r in rs])), 4),
            psnr_gt_db=round(float(np.mean([r["psnr_gt"] for r in rs])), 2),
            psnr_bg_src_db=round(float(np.mean([r["psnr_bg_src"] for r in rs])), 2),
            iou=round(float(np.mean(ious)), 4) if ious else "",
            active_frac=round(float(np.mean(act)), 4) if act else "",
            time_s=round(sum(r["seconds"] for r in rs), 3), sessions=len(rs)))
    return out


def _verdicts(curves: list[dict[str, Any]], me: dict[str, Any],
              axes: tuple[str, ...] = ("speedup", "flops_saved")) -> list[str]:
    """``me`` (a row) against every baseline's curve, at equal speedup and at equal FLOPs saved."""
    lines = []
    for axis in axes:
        for m in BASELINES:
            pts = [(r[axis], r["psnr_db"]) for r in curves if r["method"] == m]
            y = _interp(pts, me[axis])
            head = f"  {me['method']} {me['knob']} ({me[axis]:.3g} {axis}, {me['psnr_db']:.2f} dB) vs {m} at equal {axis}:"
            if y is None:
                lo, hi = min(p[0] for p in pts), max(p[0] for p in pts)
                lines.append(f"{head} no bracketing point (its {axis} spans {lo:.3g}-{hi:.3g}); no verdict")
            else:
                lines.append(f"{head} {y:.2f} dB (interpolated) -> {'BEATS' if me['psnr_db'] > y else 'does NOT beat'} it")
    return lines


def _plot(curves: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, axis in zip(axes, ("speedup", "flops_saved"), strict=True):
        for m in dict.fromkeys(r["method"] for r in curves):
            pts = sorted((r[axis], min(r["psnr_db"], 60.0)) for r in curves if r["method"] == m)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=m, ms=4)
        ax.axhline(30, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("wall-clock speedup (x)" if axis == "speedup" else "FLOPs saved (fraction)")
        ax.set_ylabel("PSNR vs full recomputation (dB)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_experiment(out_dir: str | Path, config: Any, *, executor: Any = None, progress: bool = True) -> list[Path]:
    """Run the experiment into ``out_dir`` (exists, writable); returns the files written."""
    import torch

    from npukit.models.cacheedit import load_editor, record_work
    from npukit.sim import format_table, write_csv, write_text
    from npukit.sim.ledger import Ledger

    from . import dle, npu_cost

    out = Path(out_dir)
    t0 = time.perf_counter()
    if config.threads:
        torch.set_num_threads(config.threads)
    editor = load_editor(config.weights)
    _EDITORS[config.weights] = editor
    c = editor.cfg
    model = (f"FluxTransformer2DModel {c.layers}+{c.single_layers} blocks, {c.heads}x{c.head_dim} wide, "
             f"{c.tokens}+{c.tokens} image tokens")
    knobs = QUICK_KNOBS if config.quick else KNOBS
    sessions = _sessions(config.images, config.rounds, config.seed)
    nbat = -(-config.images // config.batch)  # jobs hold whole batches (the same batches as in process)
    per = config.batch * max(1, -(-nbat // 4)) if executor is not None else config.images
    jobs = [dict(sessions=list(enumerate(sessions))[i:i + per], steps=config.steps, knobs=knobs, seed=config.seed,
                 weights=config.weights, threads=config.threads, batch=config.batch)
            for i in range(0, config.images, per)]
    rows: list[dict[str, Any]] = []
    for part in (executor.map(_job, jobs) if executor is not None else map(_job, jobs)):
        rows += part
        if progress:
            print(f"cacheedit: {len({r['session'] for r in rows})}/{config.images} sessions "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    agg = _aggregate(rows, model)
    ledger = Ledger(meta={"experiment": "cacheedit", "device": "cpu", "model": model})
    for r in rows:
        record_work(ledger, f"{r['method']}/{r['knob']}/session{r['session']}", r["macs"], r["bytes"], r["full_macs"],
                    r["full_bytes"])
    main = [r for r in agg if r["main"]]
    files = [write_csv(out / "results.csv", main)]
    curves = [r for r in agg if r["method"] not in ("full", "oracle")]
    files.append(write_csv(out / "curves.csv", curves))
    _plot(curves, out / "curves.png")
    files.append(out / "curves.png")
    files.append(write_text(out / "ledger.json", ledger.to_json()))

    n_dle = 3 if config.quick else 8
    dle_rows = dle.measure(editor, sessions[:n_dle], config.steps, config.seed)
    files.append(write_csv(out / "dle.csv", dle_rows))
    dle.plot(dle_rows, out / "dle.png")
    files.append(out / "dle.png")

    ce = next(r for r in main if r["method"] == "cacheedit")
    npu_rows = npu_cost.kontext_cost(float(ce["active_frac"]), config.arch, quick=config.quick)
    files.append(write_csv(out / "npu.csv", npu_rows))

    headers = ["method", "knob", "speedup", "psnr_db", "ssim", "flops_saved", "edit_acc", "psnr_bg_src_db", "iou",
               "active_frac"]
    full_row = next(r for r in main if r["method"] == "full")
    lines = [
        f"CacheEdit experiment: {config.images} sessions x {config.rounds} rounds, {config.steps} steps, "
        f"batch {config.batch} (sessions served together per transformer call); "
        f"device: CPU ({torch.get_num_threads()} thread(s); no GPU in this run)",
        f"model: {model}; trained record: {getattr(editor, 'record', {}).get('heldout', {})}",
        "",
        format_table(headers, [[r[h] for h in headers] for r in main]),
        "",
        "speedup: sum of full's batch wall times (mean of a run before and after the methods) / the method's; "
        "flops_saved from the executed-work counter (Linear + attention MACs; CacheEdit's identity reference pass "
        "included); psnr/ssim vs "
        "full recomputation's final image; edit_acc vs the ground truth every round; psnr_bg_src_db: final image vs "
        f"the source over the pixels no round edits (full recomputation: {full_row['psnr_bg_src_db']} dB; higher = "
        "less background drift).",
        *(f"target (>= 2.5x at >= 30 dB vs full): {r['method']} {r['speedup']:.2f}x at {r['psnr_db']:.2f} dB -> "
          + ("MET" if r["speedup"] >= 2.5 and r["psnr_db"] >= 30 else "NOT met") for r in main
          if r["method"].startswith("cacheedit")),
        "equal-speedup and equal-FLOPs comparison (curves.csv / curves.png; linear interpolation):",
        *_verdicts(curves, ce),
        "the other CacheEdit knobs (refresh interval) at equal speedup:",
        *(ln for r in curves if r["method"] == "cacheedit" and not r["main"] for ln in _verdicts(curves, r, ("speedup",))),
        f"NPU ({config.arch}; FLUX.1 Kontext-dev, 1024x1024, 28 steps): " + "; ".join(
            f"active {r['active_frac']:.3f}: latency x{r['latency_speedup']:.2f}, energy x{r['energy_ratio']:.2f}"
            for r in npu_rows),
        f"wall time {time.perf_counter() - t0:.1f} s",
    ]
    summary = "\n".join(lines) + "\n"
    files.append(write_text(out / "summary.txt", summary))
    if progress:
        print(summary, end="")
    return files
