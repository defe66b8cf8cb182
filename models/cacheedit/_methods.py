"""Multi-round editing sessions on the Flux editor, with CacheEdit, diffusers' caches or token-caching baselines.

:func:`edit_session` runs ``rounds`` edits of a batch of B images (B independent sessions served together: each
round samples ``steps`` Euler steps from the same noise; the next round edits the previous round's output) under
one :data:`METHODS` entry and a knob. Token methods choose one active set per image (padded to the batch's
largest, :func:`npukit.models.cacheedit.apply_cacheedit`); diffusers' caches decide per call for the whole batch:

* ``full``: every token, every step (no hooks).
* ``cacheedit``: :func:`apply_cacheedit` (:func:`default_cache`; knob = ``refresh``, a full call every knob calls,
  0: none; ``context_image='cache'``). Its reference is
  an identity-instruction pass: before each round, one transformer call with the ``keep`` instruction on the
  round's noise at t = 1 (counted and timed) becomes the previous call-0 activation that the round's call 0
  is scored against (``reference='previous'``).
* ``cacheedit-ctx``: the same with ``context_image='compute'`` (Kontext's context-image tokens run every step).
* ``oracle``: CacheEdit's sparse steps with the ground-truth edit patches forced active.
* ``toca-random`` / ``toca-attn``: token caching (ToCa-like) with ``knob`` target tokens recomputed per round
  (CacheEdit's count when matched): random ones, or the ones receiving the most attention at call 0
  (summed over blocks, mean over heads and queries). Same splice machinery as CacheEdit.
* ``fbcache`` (diffusers FirstBlockCache, threshold = knob), ``magcache`` (MagCache, threshold = knob, ratios
  calibrated on the editor by MagCache's own calibration mode), ``taylorseer`` (TaylorSeer, cache_interval =
  knob, first order), ``pab`` (PyramidAttentionBroadcast, spatial block skip range = knob): each applied with
  ``transformer.enable_cache`` and reset between rounds (``_reset_stateful_cache``), calls inside
  ``transformer.cache_context("cond")``. FasterCache is not run: it needs classifier-free guidance (an
  unconditional branch), which this editor does not use.
"""

from __future__ import annotations

import ast
import contextlib
import io
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from npukit.sim.errors import ConfigError

from ._count import WorkCounter
from ._diffusers import CacheEditConfig, apply_cacheedit, remove_cacheedit
from ._flux import FluxEditor, patchify, timesteps

METHODS = ("full", "cacheedit", "cacheedit-ctx", "oracle", "toca-random", "toca-attn", "fbcache", "magcache",
           "taylorseer", "pab")
DIFFUSERS_CACHES = ("fbcache", "magcache", "taylorseer", "pab")
KEEP = (0, 0, 0, 0)


@dataclass
class SessionRun:
    """A batch of sessions under one method: per-round outputs (B, 3, S, S), active target tokens, time (s) and
    work of the whole batch."""

    images: list[torch.Tensor] = field(default_factory=list)
    active: list[torch.Tensor | None] = field(default_factory=list)  # (B, P) bool per round (token methods)
    detected: list[torch.Tensor | None] = field(default_factory=list)
    seconds: float = 0.0
    macs: int = 0
    bytes: int = 0
    calls: int = 0


def calibrate_mag_ratios(editor: FluxEditor, src: torch.Tensor, instr: torch.Tensor, noise: torch.Tensor,
                         steps: int) -> list[float]:
    """MagCache's magnitude ratios of this editor, from diffusers' own calibration mode (one full round)."""
    from diffusers import MagCacheConfig

    tr = editor.transformer
    tr.enable_cache(MagCacheConfig(calibrate=True, num_inference_steps=steps))
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            _sample(editor, src, instr, noise, steps)
    finally:
        tr.disable_cache()
    line = [ln for ln in buf.getvalue().splitlines() if ln.startswith("[")]
    if not line:
        raise RuntimeError("MagCache calibration printed no ratios")
    return [float(x) for x in ast.literal_eval(line[-1])]


def _sample(editor: FluxEditor, src: torch.Tensor, instr: torch.Tensor, noise: torch.Tensor, steps: int,
            after_first: Any = None, clock: Any = None) -> torch.Tensor:
    """Euler sampling with every call inside ``cache_context("cond")``; ``after_first()`` runs after call 0;
    ``clock`` (a one-element list) receives the current timestep x 1000 (PAB's callback reads it)."""
    x = noise.clone()
    ts = timesteps(steps)
    tr = editor.transformer
    with torch.no_grad():
        for i in range(steps):
            if clock is not None:
                clock[0] = float(ts[i]) * 1000.0
            with tr.cache_context("cond"):
                v = editor(x, ts[i].expand(src.shape[0]), src, instr)
            x = x + (ts[i + 1] - ts[i]) * v
            if i == 0 and after_first is not None:
                after_first()
    return x


def _cache_config(method: str, knob: float, steps: int, mag_ratios: list[float] | None, clock: list[float]) -> Any:
    import diffusers

    if method == "fbcache":
        return diffusers.FirstBlockCacheConfig(threshold=float(knob))
    if method == "magcache":
        if mag_ratios is None:
            raise ConfigError("magcache needs mag_ratios (calibrate_mag_ratios)")
        return diffusers.MagCacheConfig(threshold=float(knob), num_inference_steps=steps, mag_ratios=mag_ratios,
                                        max_skip_steps=3, retention_ratio=0.2)
    if method == "taylorseer":
        return diffusers.TaylorSeerCacheConfig(cache_interval=int(knob), disable_cache_before_step=3, max_order=1,
                                               taylor_factors_dtype=torch.float32)
    if method == "pab":
        return diffusers.PyramidAttentionBroadcastConfig(spatial_attention_block_skip_range=int(knob),
                                                         spatial_attention_timestep_skip_range=(50, 950),
                                                         current_timestep_callback=lambda: clock[0])
    raise ConfigError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def default_cache(steps: int) -> CacheEditConfig:
    """The experiment's CacheEdit options for ``steps``-step rounds: one Otsu split, 2-30 % of the target tokens,
    a full last call and no periodic refresh (the knob of :func:`edit_session` sets ``refresh``: a full call every
    ``refresh`` calls). On calibration sessions the experiment does not draw (procedural seed 10001, 25 sessions,
    batch 25, 28 steps; PSNR vs full recomputation): last call only 34.1 dB; one more full call at call 16 37.5 dB,
    20 38.8 dB, 22 39.2 dB (docs/cacheedit.md)."""
    return CacheEditConfig(min_active=0.02, max_active=0.3, levels=1, score="rel", refresh=0, full_at=(steps - 1,))


def check_inputs(editor: FluxEditor, src: torch.Tensor, instrs: list[torch.Tensor], noise: torch.Tensor) -> None:
    """ConfigError for a wrong shape or an instruction token out of range, :class:`WeightsError` for NaN/Inf."""
    from ..weights import WeightsError
    from ._data import VOCAB

    c = editor.cfg
    b = src.shape[0] if isinstance(src, torch.Tensor) and src.dim() == 4 and src.shape[0] >= 1 else 1
    want = (b, c.channels, c.image, c.image)
    for name, x in (("src", src), ("noise", noise)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != want:
            raise ConfigError(f"{name} must be a (B, {c.channels}, {c.image}, {c.image}) tensor (the same B for src "
                              f"and noise), got {getattr(x, 'shape', type(x).__name__)}")
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            kind = "NaN" if bool(torch.isnan(x).any()) else "Inf"
            raise WeightsError(f"{name} holds {int(bad.sum())} {kind} value(s); pass finite images in [-1, 1]")
    for r, ins in enumerate(instrs):
        if not isinstance(ins, torch.Tensor) or tuple(ins.shape) != (b, len(VOCAB)) or ins.dtype != torch.long:
            raise ConfigError(f"instr of round {r} must be a ({b}, {len(VOCAB)}) int64 tensor, got "
                              f"{getattr(ins, 'shape', type(ins).__name__)}")
        for i, v in enumerate(VOCAB):
            bad = (ins[:, i] < 0) | (ins[:, i] >= v)
            if bool(bad.any()):
                raise ConfigError(f"instr of round {r}: token {i} must be in [0, {v - 1}], got {int(ins[bad, i][0])}")


def edit_session(editor: FluxEditor, src: torch.Tensor, instrs: list[torch.Tensor], noise: torch.Tensor, method: str,
                 knob: float | None = None, *, steps: int = 28, gt_masks: list[torch.Tensor] | None = None,
                 counts: list[int] | None = None, seed: int = 0, mag_ratios: list[float] | None = None,
                 counter: WorkCounter | None = None, cache: CacheEditConfig | None = None) -> SessionRun:
    """Run the rounds of a batch of B sessions (``src`` (B, 3, S, S), ``instrs`` per round (B, 4), ``noise`` like
    src) under ``method``; ``gt_masks`` (B, P) or (P,) bool per round (``oracle``), ``counts`` per round, an int
    or B ints (``toca-*``; default ``knob`` as a fraction of P). ``counter``: a :class:`WorkCounter` on
    ``editor.transformer`` (its counts of this batch go into the result)."""
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    check_inputs(editor, src, instrs, noise)
    tr = editor.transformer
    p, nb = editor.cfg.tokens, src.shape[0]
    run = SessionRun()
    clock = [1000.0]
    handle = None
    if method.startswith("cacheedit") or method in ("oracle", "toca-random", "toca-attn"):
        base = cache or default_cache(steps)
        kw: dict[str, Any] = {"context_image": "compute" if method == "cacheedit-ctx" else "cache"}
        if method.startswith("cacheedit") and knob is not None:
            if isinstance(knob, bool) or int(knob) != knob or knob < 0:
                raise ConfigError(f"the cacheedit knob is the refresh interval in calls (an integer >= 0), got {knob!r}")
            kw["refresh"] = int(knob)
        import dataclasses

        handle = apply_cacheedit(tr, dataclasses.replace(base, **kw))
        handle.state("cond").capture_attn = method == "toca-attn"
    elif method in DIFFUSERS_CACHES:
        tr.enable_cache(_cache_config(method, 0 if knob is None else knob, steps, mag_ratios, clock))
    if counter is not None:
        counter.reset()
    gen = torch.Generator().manual_seed(seed)
    cur = src
    try:
        t0 = time.perf_counter()
        for r, instr in enumerate(instrs):
            after = None
            if handle is not None:
                st = handle.state("cond")
                if method.startswith("cacheedit"):  # identity-instruction reference pass (call 0 of a keep round)
                    with torch.no_grad(), tr.cache_context("cond"):
                        editor(noise, torch.ones(nb), cur, torch.tensor([KEEP]).expand(nb, -1))
                    handle.new_round()
                elif method == "oracle":
                    assert gt_masks is not None
                    handle.force_active(gt_masks[r])
                else:
                    want = counts[r] if counts is not None else max(1, round(float(knob or 0.1) * p))
                    ks = [max(1, min(p, int(k))) for k in (want if isinstance(want, (list, tuple)) else [want] * nb)]
                    if len(ks) != nb:
                        raise ConfigError(f"counts of round {r} must be one int or {nb} ints, got {len(ks)}")

                    def pick(st: Any = st, ks: list[int] = ks) -> None:
                        m = torch.zeros(nb, p, dtype=torch.bool)
                        for i, k in enumerate(ks):
                            if method == "toca-random":
                                idx = torch.randperm(p, generator=gen)[:k]
                            else:
                                assert st.attn_received is not None
                                idx = st.attn_received[i].topk(k).indices
                            m[i, idx] = True
                        handle.force_active(m)

                    handle.force_active(None)
                    after = pick
            out = _sample(editor, cur, instr, noise, steps, after, clock)
            if handle is not None:
                st = handle.state("cond")
                act = st.forced if st.forced is not None else st.active
                run.active.append(None if act is None else act.expand(nb, p).clone())
                run.detected.append(None if st.detected is None else st.detected.clone())
            else:
                run.active.append(None)
                run.detected.append(None)
            tr._reset_stateful_cache()
            cur = out.clamp(-1, 1)
            run.images.append(cur)
        run.seconds = time.perf_counter() - t0
    finally:
        if handle is not None:
            remove_cacheedit(tr)
        elif method in DIFFUSERS_CACHES:
            tr.disable_cache()
    if counter is not None:
        run.macs, run.bytes, run.calls = counter.reset()
    return run


def token_mask(mask: torch.Tensor, patch: int) -> torch.Tensor:
    """(S, S) pixel mask -> (P,) bool patch tokens touching it."""
    s = mask.shape[-1]
    g = s // patch
    return mask.reshape(g, patch, g, patch).any(3).any(1).reshape(-1)


__all__ = ["DIFFUSERS_CACHES", "METHODS", "SessionRun", "calibrate_mag_ratios", "check_inputs", "default_cache",
           "edit_session", "patchify", "token_mask"]
