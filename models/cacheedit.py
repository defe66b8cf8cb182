"""CacheEdit: multi-round DiT image editing with an Adaptive Activation Cache (a switch) and baselines.

>>> model = load_model()                                     # the shipped editing DiT (CPU)
>>> sess = EditSession(model, src, method="cacheedit")       # src: (B, 3, 32, 32) in [-1, 1]
>>> out1 = sess.edit(instr1); out2 = sess.edit(instr2)       # instr: (B, 4) int64 tokens

``method`` is one of :data:`METHODS`: ``full`` (recompute every token at every step),
``cacheedit`` (the Adaptive Activation Cache, :mod:`._cacheedit_cache`), ``step-reuse``
(TeaCache/FORA-like), ``toca-random`` / ``toca-attn`` (token caching at a given per-image token
count, no first-step signal), ``oracle`` (ground-truth edit mask), and the hybrid
``cacheedit+step`` (CacheEdit whose sparse steps also run only every ``CacheConfig.stride`` steps,
the steps between reusing the last velocity of every token, RegionE-style; not pure token
caching). The same cache on diffusers' FLUX / FLUX.1 Kontext and Qwen-Image transformers, as diffusers
hooks: ``apply_cacheedit(transformer, CacheEditConfig())`` / ``remove_cacheedit(transformer)``
(:mod:`._cacheedit_diffusers`). Each round samples with
``steps`` Euler steps of rectified flow from the same per-session noise; the next round edits the
previous round's output. Executed and skipped MACs / DRAM elements per step and block go into
``ledger`` under ``executed/<scope>/round<r>/step<k>/block<l>`` and ``skipped/...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ._cacheedit_baselines import calibrate_threshold, change_indicator, random_selection, rel_l1, topk_selection
from ._cacheedit_cache import (
    CacheConfig,
    SessionState,
    StepZero,
    block_elems,
    block_macs,
    cached_step,
    dilate,
    divergence,
    full_step,
    kv_elems,
    kv_macs,
    ledger_totals,
    make_plan,
    mask_to_index,
    otsu_threshold,
    select_active,
    step_mods,
)
from ._cacheedit_data import IMAGE, OPS, TRAIN_OP_WEIGHTS, describe, make_batch, make_session
from ._cacheedit_diffusers import CacheEdit, CacheEditConfig, CacheEditState, apply_cacheedit, remove_cacheedit
from ._cacheedit_dit import DEFAULT_STEPS, DiTConfig, EditDiT, patchify, sample, timesteps, unpatchify
from ._cacheedit_metrics import TEXTURE_SMOOTH, edit_correct, iou, mse, patch_mask, psnr_db, ssim
from .weights import WeightsError, check_finite, check_state, read_torch_file

METHODS = ("full", "cacheedit", "step-reuse", "toca-random", "toca-attn", "oracle", "cacheedit+step")
WEIGHTS = Path(__file__).resolve().parent / "weights" / "cacheedit_dit.pt"
KEEP = (0, 0, 0, 0)  # the identity instruction

__all__ = [
    "METHODS", "WEIGHTS", "CacheConfig", "DiTConfig", "EditDiT", "EditSession", "RoundResult", "SessionState",
    "StepZero", "block_elems", "block_macs", "calibrate_threshold", "describe", "dilate", "edit_round", "full_steps",
    "ledger_totals", "load_model", "make_session", "otsu_threshold", "sample", "select_active", "OPS", "WeightsError",
    # the Adaptive Activation Cache as diffusers hooks on FLUX (Kontext) and Qwen-Image (Edit) transformers
    "CacheEdit", "CacheEditConfig", "CacheEditState", "apply_cacheedit", "remove_cacheedit",
    # the data, step and metric helpers the experiment uses
    "IMAGE", "TRAIN_OP_WEIGHTS", "make_batch", "full_step", "patchify", "timesteps", "unpatchify",
    "TEXTURE_SMOOTH", "edit_correct", "iou", "mse", "patch_mask", "psnr_db", "ssim",
]


_FORMAT = "npukit-cacheedit-dit/1"
_TRAIN_HINT = "pass a file written by `python -m npukit.experiments.cacheedit.train --out FILE` (or no --weights)"
_MAX_SIZE = 4096  # any DiTConfig size above this is not a weights file of this model


def _dit_config(cfg: Any, src: str) -> DiTConfig:
    """The file's ``config`` entry as a :class:`DiTConfig`; :class:`WeightsError` naming a bad field."""
    import dataclasses

    if not isinstance(cfg, dict):
        raise WeightsError(f"{src}: 'config' is a {type(cfg).__name__}, not a dict of DiTConfig fields; {_TRAIN_HINT}")
    fields = {f.name: f.type for f in dataclasses.fields(DiTConfig)}
    unknown = sorted(str(k) for k in cfg if k not in fields)
    if unknown:
        raise WeightsError(f"{src}: unknown config field(s) {', '.join(unknown)} (known: {', '.join(fields)}); {_TRAIN_HINT}")
    for k, v in cfg.items():
        if fields[k] == "bool":
            if not isinstance(v, bool):
                raise WeightsError(f"{src}: config field {k} must be true or false, got {v!r}; {_TRAIN_HINT}")
        elif isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _MAX_SIZE:
            raise WeightsError(f"{src}: config field {k} must be an integer in [1, {_MAX_SIZE}], got {v!r}; {_TRAIN_HINT}")
    c = DiTConfig(**cfg)
    if c.image % c.patch or c.dim % c.heads or c.dim % 2:
        raise WeightsError(f"{src}: inconsistent config (need image % patch == 0, dim % heads == 0 and an even dim, got "
                           f"image {c.image}, patch {c.patch}, dim {c.dim}, heads {c.heads}); {_TRAIN_HINT}")
    return c


def load_model(path: str | Path | None = None) -> EditDiT:
    """Load the trained editing DiT (fp16 file -> fp32 model in eval mode).

    Everything in the file is checked before the model is built: a torch file (read with
    ``weights_only=True``) of format ``npukit-cacheedit-dit/1`` whose config is a valid
    :class:`DiTConfig` and whose state has exactly the model's tensors, shapes and finite
    floating-point values. Raises :class:`WeightsError` (a :class:`ConfigError`) naming the first
    problem otherwise.
    """
    p = Path(path) if path is not None else WEIGHTS
    if p.is_dir():
        raise WeightsError(f"CacheEdit weights path {p} is a folder; pass the weights file (--weights FILE)")
    if not p.exists():
        raise WeightsError(f"CacheEdit weights not found at {p}; train them with "
                           f"`python -m npukit.experiments.cacheedit.train --out {p}`")
    blob = read_torch_file(p, "CacheEdit weights", _TRAIN_HINT)
    src = f"CacheEdit weights '{p}'"
    if not isinstance(blob, dict) or blob.get("format") != _FORMAT:
        raise WeightsError(f"{p} is not a CacheEdit weights file (expected format {_FORMAT}); {_TRAIN_HINT}")
    missing = [k for k in ("config", "state") if k not in blob]
    if missing:
        raise WeightsError(f"{src} lacks the {' and '.join(repr(k) for k in missing)} entr{'ies' if len(missing) > 1 else 'y'}; "
                           f"{_TRAIN_HINT}")
    record = blob.get("record", {})
    if not isinstance(record, dict):
        raise WeightsError(f"{src}: 'record' is a {type(record).__name__}, not a dict; {_TRAIN_HINT}")
    cfg = _dit_config(blob["config"], src)
    with torch.device("meta"):  # the expected shapes, allocating nothing
        expected = {k: tuple(v.shape) for k, v in EditDiT(cfg).state_dict().items()}
    state = check_state(blob["state"], expected, src, _TRAIN_HINT)
    model = EditDiT(cfg)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    for k, v in model.state_dict().items():  # a float64 value beyond float32's range would become Inf here
        check_finite(v, f"{src}: '{k}'", _TRAIN_HINT)
    model.eval()
    model.record = record  # type: ignore[attr-defined]
    return model


@dataclass
class RoundResult:
    """One round's output image (B, 3, S, S) and what the method decided."""

    image: torch.Tensor
    active: torch.Tensor | None = None  # (B, P) bool tokens recomputed at steps 1.. (token methods)
    detected: torch.Tensor | None = None  # (B, P) bool before dilation (cacheedit)
    scores: torch.Tensor | None = None  # (B, P) divergence (cacheedit)
    steps_run: int = 0  # steps that executed the model (step-reuse), else all
    indicators: list[float] | None = None  # per-step change indicator (full; used to calibrate step-reuse)


def _record(ledger: Ledger | None, scope: str, model: EditDiT, counts: list[int], n: int, full: int,
            upto: int | None = None, extra: bool = False, context: bool = False) -> None:
    """Record each block of one step: ``counts`` query tokens per image executed over ``n`` keys, of
    ``full`` queries per image. ``extra`` (reference pass): executed work that skips nothing.
    ``context``: the context stream, whose last block (``upto`` or the last) runs its K/V projection only."""
    if ledger is None:
        return
    cfg = model.cfg
    last = len(model.blocks) - 1 if upto is None else upto
    for li in range(last + 1):
        sc = f"{scope}/block{li}"
        kv = context and li == last
        ex_m = sum(kv_macs(cfg, c) if kv else block_macs(cfg, c, n) for c in counts)
        ex_e = sum((kv_elems(cfg, c) if kv else block_elems(cfg, c, n)) if c else 0 for c in counts)
        fu_m = len(counts) * (kv_macs(cfg, full) if kv else block_macs(cfg, full, n))
        fu_e = len(counts) * (kv_elems(cfg, full) if kv else block_elems(cfg, full, n))
        ledger.record("pe_array", "mac", (16, 16, 32), ex_m, scope=f"executed/{sc}")
        ledger.record("dram", "dram_read", (16,), ex_e, scope=f"executed/{sc}")
        if not extra:
            ledger.record("pe_array", "mac", (16, 16, 32), fu_m - ex_m, scope=f"skipped/{sc}")
            ledger.record("dram", "dram_read", (16,), fu_e - ex_e, scope=f"skipped/{sc}")


def full_steps(cache: CacheConfig, steps: int) -> set[int]:
    """Steps 1.. of a token-method round that run every token: the first ``warmup``, every
    ``refresh``-th, those in ``refresh_at`` (negative: from the end) and the last ``tail``."""
    extra = {r % steps for r in cache.refresh_at}
    return {k for k in range(1, steps) if k < cache.warmup or k >= steps - cache.tail or k in extra
            or (cache.refresh and k % cache.refresh == 0)}


def _kv_snapshot(zero: StepZero, pp: int, t: float) -> tuple[float, list[torch.Tensor], list[torch.Tensor]]:
    """The target rows of every block's K/V buffer after a full step at time ``t`` (copies)."""
    return t, [k[:, :pp].clone() for k in zero.k], [v[:, :pp].clone() for v in zero.vv]


def _kv_slope(old: tuple[float, list[torch.Tensor], list[torch.Tensor]], new: tuple[float, list[torch.Tensor], list[torch.Tensor]]
              ) -> tuple[float, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """``(t1, K1, V1, dK/dt, dV/dt)`` from two snapshots (finite difference in t)."""
    (t0, k0, v0), (t1, k1, v1) = old, new
    return (t1, k1, v1, [(b - a) / (t1 - t0) for a, b in zip(k0, k1, strict=True)],
            [(b - a) / (t1 - t0) for a, b in zip(v0, v1, strict=True)])


def _kv_forecast(zero: StepZero, fc: tuple[float, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]],
                 pp: int, t: float) -> None:
    """Write the first-order extrapolation ``K1 + (t - t1) dK/dt`` of the target K/V rows (from the
    last two full steps, :func:`_kv_slope`) into the cache buffers, one fused op per tensor
    (TaylorSeer-like forecasting; the active rows are overwritten with fresh K/V inside :func:`cached_step`)."""
    t1, k1, v1, dk, dv = fc
    for li in range(len(zero.k)):
        torch.add(k1[li], dk[li], alpha=t - t1, out=zero.k[li][:, :pp])
        torch.add(v1[li], dv[li], alpha=t - t1, out=zero.vv[li][:, :pp])


def _check_inputs(cfg: DiTConfig, src: torch.Tensor, instr: torch.Tensor, noise: torch.Tensor | None = None) -> None:
    """Shapes, instruction token ranges and finiteness of one round's inputs (:class:`ConfigError` /
    :class:`WeightsError` for NaN/Inf), so that a bad input is one line, not an index error deep inside."""
    from ._cacheedit_data import VOCAB

    want = (cfg.channels, cfg.image, cfg.image)
    if not isinstance(src, torch.Tensor) or src.dim() != 4 or tuple(src.shape[1:]) != want or not src.is_floating_point():
        got = tuple(src.shape) if isinstance(src, torch.Tensor) else type(src).__name__
        raise ConfigError(f"src must be a float tensor (B, {want[0]}, {want[1]}, {want[2]}) for this model, got {got}")
    check_finite(src, "src (the images to edit)")
    b = src.shape[0]
    if not isinstance(instr, torch.Tensor) or tuple(instr.shape) != (b, len(VOCAB)) or instr.is_floating_point():
        got = tuple(instr.shape) if isinstance(instr, torch.Tensor) else type(instr).__name__
        raise ConfigError(f"instr must be an integer tensor ({b}, {len(VOCAB)}) of instruction tokens, got {got}")
    for i, v in enumerate(VOCAB):
        if bool(((instr[:, i] < 0) | (instr[:, i] >= v)).any()):
            raise ConfigError(f"instr field {i} must be in [0, {v - 1}], got {instr[:, i].tolist()}")
    if noise is not None:
        if not isinstance(noise, torch.Tensor) or noise.shape != src.shape:
            raise ConfigError(f"noise must have the shape of src {tuple(src.shape)}")
        check_finite(noise, "noise")


@torch.no_grad()
def edit_round(model: EditDiT, src: torch.Tensor, instr: torch.Tensor, noise: torch.Tensor, method: str = "cacheedit", *,
               steps: int = DEFAULT_STEPS, cache: CacheConfig | None = None, state: SessionState | None = None,
               gt_mask: torch.Tensor | None = None, counts: torch.Tensor | None = None,
               threshold: float | None = None, generator: torch.Generator | None = None,
               ledger: Ledger | None = None, scope: str = "", indicators: bool = False) -> RoundResult:
    """Run one edit round with ``method``; see the module docstring.

    ``gt_mask`` (B, P) bool patch mask (oracle); ``counts`` (B,) tokens to recompute per image
    (toca-*; default: 25% of the target tokens); ``threshold`` (step-reuse; default 0.3);
    ``indicators``: ``full`` also computes step-reuse's per-step change indicator (to calibrate
    step-reuse; off by default so that timed full runs do no extra work).
    """
    if method not in METHODS:
        raise ConfigError(f"unknown CacheEdit method {method!r}; choose one of {', '.join(METHODS)}")
    if steps < 2:
        raise ConfigError(f"steps must be >= 2, got {steps}")
    cfg = model.cfg
    _check_inputs(cfg, src, instr, noise)
    cache = cache or CacheConfig()
    cache.check(len(model.blocks))
    state = state if state is not None else SessionState()
    b, n, pp, grid = src.shape[0], cfg.seq, cfg.tokens, cfg.image // cfg.patch
    nc = n - pp
    scope = scope or method
    ts = timesteps(steps)
    x = noise.clone()
    src_tok = patchify(src, cfg.patch)
    ctx = model.context_kv(src, instr)  # once per round, exact at every step
    _record(ledger, f"{scope}/context", model, [nc] * b, nc, nc, context=True)

    def tvec(k: int) -> torch.Tensor:
        return ts[k].expand(b)

    if method in ("full", "step-reuse"):
        inds: list[float] = []
        prev_ind, v, acc, ran = None, None, 0.0, 0
        for k in range(steps):
            if method == "step-reuse" or indicators:
                ind = change_indicator(model, x, tvec(k), src)
                inds.append(0.0 if prev_ind is None else rel_l1(ind, prev_ind))
                prev_ind = ind
            run = True
            if method == "step-reuse" and 0 < k < steps - 1:
                acc += inds[-1]
                run = acc >= (0.3 if threshold is None else threshold)
            if run:
                acc = 0.0
                v = model.target_forward(x, tvec(k), src, ctx)
                ran += 1
            _record(ledger, f"{scope}/step{k}", model, [pp if run else 0] * b, n, pp)
            x = x + (ts[k + 1] - ts[k]) * v
        return RoundResult(x, steps_run=ran, indicators=inds or None)

    # token methods: step 0 runs everything
    depth = len(model.blocks)
    layer = cache.layer % depth
    zero: StepZero = full_step(model, x, tvec(0), src, ctx, layer=layer, importance=(method == "toca-attn"))
    _record(ledger, f"{scope}/step0", model, [pp] * b, n, pp)
    detected = scores = None
    if method in ("cacheedit", "cacheedit+step"):
        ref = state.prev_h if cache.reference == "previous" else None
        if ref is None or ref.shape != zero.h_layer.shape:
            keep = torch.tensor(KEEP, dtype=torch.long).expand(b, 4)
            ctx_keep = model.context_kv(src, keep, upto=layer)
            ref = full_step(model, x, tvec(0), src, ctx_keep, layer=layer, stop_after=layer).h_layer
            _record(ledger, f"{scope}/reference/context", model, [nc] * b, nc, nc, upto=layer, extra=True, context=True)
            _record(ledger, f"{scope}/reference", model, [pp] * b, n, pp, upto=layer, extra=True)
        state.prev_h = zero.h_layer
        scores = divergence(zero.h_layer, ref, pp, cache.score)
        active, detected = select_active(scores, cache, grid)
    elif method == "oracle":
        if gt_mask is None:
            raise ConfigError("method 'oracle' needs gt_mask, the (B, P) ground-truth patch mask")
        active = dilate(gt_mask.bool(), cache.ring, grid)
    else:
        c = counts if counts is not None else torch.full((b,), pp // 4)
        c = c.clamp(1, pp)
        if method == "toca-random":
            active = random_selection(c, pp, generator or torch.Generator().manual_seed(0))
        else:
            active = topk_selection(zero.importance, c)
    state.rounds += 1
    idx = mask_to_index(active)
    plan = make_plan(idx, pp, n, model, src_tok)
    mods = step_mods(model, ts[:-1])  # per step, computed once per round
    per_img = active.sum(1).tolist()
    # the sampler state stays in token space (B, P, patch_dim) until the round ends
    x_tok = patchify(x, cfg.patch) + float(ts[1] - ts[0]) * zero.v
    v_last = zero.v  # the last computed velocity (cacheedit+step's skipped steps reuse it)
    full_at = full_steps(cache, steps)
    fc = None
    snap = _kv_snapshot(zero, pp, float(ts[0])) if cache.forecast else None
    stride = cache.stride if method == "cacheedit+step" else 1
    # invariant='forecast': (t, x0-hat) of every target token at the last two full steps
    x0_snaps = [(float(ts[0]), x_tok - float(ts[1]) * zero.v)] if cache.invariant == "forecast" else []
    for k in range(1, steps):
        dt = float(ts[k + 1] - ts[k])
        if k in full_at:  # full step: refresh every cache entry
            _record(ledger, f"{scope}/step{k}", model, [pp] * b, n, pp)
            x_img = unpatchify(x_tok, cfg.patch, cfg.channels)
            if k == steps - 1:  # the last step: no cache to refresh, the plain forward
                v_last = patchify(model.target_forward(x_img, tvec(k), src, ctx), cfg.patch)
            else:
                zero = full_step(model, x_img, tvec(k), src, ctx)
                v_last = zero.v
                if x0_snaps:
                    x0_snaps = [x0_snaps[-1], (float(ts[k]), x_tok - float(ts[k]) * v_last)]
                if snap is not None:
                    new = _kv_snapshot(zero, pp, float(ts[k]))
                    fc, snap = _kv_slope(snap, new), new
            x_tok.add_(v_last, alpha=dt)
            continue
        if stride > 1 and (k - 1) % stride:  # cacheedit+step: reuse the last velocity
            _record(ledger, f"{scope}/step{k}", model, [0] * b, n, pp)
            x_tok.add_(v_last, alpha=dt)
            continue
        if fc is not None:
            _kv_forecast(zero, fc, pp, float(ts[k]))
        v_tok = cached_step(model, x_tok, src_tok, tvec(k), idx, zero, cache.refresh_kv, cache.impl, plan=plan, mods=mods[k])
        if cache.invariant == "source":
            v_tok = torch.where(active[..., None], v_tok, (x_tok - src_tok) / ts[k])
        elif len(x0_snaps) == 2:  # 'forecast': x0-hat extrapolated linearly in t, v = (x_t - x0-hat) / t
            (ta, xa), (tb, xb) = x0_snaps
            x0f = torch.add(xb, xb - xa, alpha=(float(ts[k]) - tb) / (tb - ta))
            v_tok = torch.where(active[..., None], v_tok, (x_tok - x0f) / ts[k])
        _record(ledger, f"{scope}/step{k}", model, per_img, n, pp)
        v_last = v_tok
        x_tok.add_(v_tok, alpha=dt)
    x = unpatchify(x_tok, cfg.patch, cfg.channels)
    return RoundResult(x, active=active, detected=detected, scores=scores, steps_run=steps)


class EditSession:
    """A multi-round editing session on a batch of images; the method is a switch.

    Every round starts from the same noise (drawn once from ``seed``) and edits the previous round's
    output (clamped to [-1, 1]); for ``cacheedit`` the previous round's step-0 activations are the
    next round's reference.
    """

    def __init__(self, model: EditDiT, src: torch.Tensor, method: str = "cacheedit", *, steps: int = DEFAULT_STEPS,
                 cache: CacheConfig | None = None, seed: int = 0, ledger: Ledger | None = None, scope: str = "") -> None:
        if method not in METHODS:
            raise ConfigError(f"unknown CacheEdit method {method!r}; choose one of {', '.join(METHODS)}")
        if steps < 2:
            raise ConfigError(f"steps must be >= 2, got {steps}")
        self.model, self.method, self.steps, self.cache = model, method, steps, cache or CacheConfig()
        self.cache.check(len(model.blocks))
        if not isinstance(src, torch.Tensor) or src.dim() != 4 or not src.is_floating_point():
            raise ConfigError(f"src must be a float tensor (B, C, S, S), got {getattr(src, 'shape', type(src).__name__)}")
        check_finite(src, "src (the images to edit)")
        self.source = src.clone()
        self.noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(seed))
        self.state = SessionState()
        self.ledger = ledger
        self.scope = scope or method
        self.results: list[RoundResult] = []

    def edit(self, instr: torch.Tensor, **kw: Any) -> torch.Tensor:
        """Apply one instruction (B, 4) to the current images; returns the new images (B, 3, S, S)."""
        r = len(self.results)
        res = edit_round(self.model, self.source, instr, self.noise, self.method, steps=self.steps, cache=self.cache,
                         state=self.state, ledger=self.ledger, scope=f"{self.scope}/round{r}", **kw)
        self.results.append(res)
        self.source = res.image.clamp(-1, 1)
        return self.source
