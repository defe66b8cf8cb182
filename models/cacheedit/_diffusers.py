"""The Adaptive Activation Cache on diffusers' FLUX / FLUX.1 Kontext and Qwen-Image transformers, as hooks.

``apply_cacheedit(transformer, CacheEditConfig())`` registers diffusers :class:`~diffusers.hooks.ModelHook` s
through :class:`~diffusers.hooks.HookRegistry` (as diffusers' own caches do): one on the transformer (counts
the calls = sampling steps of a round and picks full or sparse mode) and one on every block of
``transformer_blocks`` (and ``single_transformer_blocks`` for FLUX), whose attention processor is
replaced by one that can splice cached K/V. ``remove_cacheedit`` removes them and restores the original
processors. One transformer call is one step; the calls of each diffusers cache context
(``with transformer.cache_context("cond")`` / ``("uncond")``, as true-CFG pipelines such as Qwen-Image-Edit
make) count and cache separately (:class:`CacheEdit`).

One round (reset by :meth:`CacheEdit.new_round`, which a diffusers pipeline's ``maybe_free_model_hooks()``
also calls at the end of every pipeline call through ``reset_stateful_hooks``: one pipeline call, one round):

* **Full steps** (the first ``warmup`` calls of a round, every ``refresh``-th call, the calls in ``full_at``,
  and any call before a selection exists) run every token unchanged and store, for every block, its image-stream output and the
  image tokens' K/V (after QK-norm and RoPE, as the attention sees them).
* At **call 0** the image-stream output of block ``layer`` (the blocks counted double-stream first) is
  scored per target token by :func:`._cache.divergence` against a *reference*:
  ``reference='previous'`` (default) the previous round's call-0 activation of that block when its shape
  matches, else -- and always with ``reference='input'`` -- the block's own input (the identity map; the
  score is then how much the deep block moves each token). The scores are split by
  :func:`._cache.select_active` (batched Otsu, ``levels``, the [min_active, max_active] budget,
  ``ring`` dilation), one active set per image of the batch. The rows an image computes at sparse steps are its
  active tokens, padded with its highest-scoring other tokens up to the batch's largest active set (every image
  of a batch runs the same number of rows; a padded row is simply computed, i.e. exact). When every image
  has the same rows they are shared (one index set, as at batch 1); otherwise the gathers, RoPE rows, K/V
  splice and output scatter are per image. :meth:`CacheEditState.force_active` overrides the selection.
* **Sparse steps**: each block runs on the text tokens plus the *computed* image rows (the active target
  tokens plus, with ``context_image='compute'`` (default), every non-target image token: FLUX.1 Kontext's
  concatenated context-image tokens, whose ``img_ids[:, 0] != 0``, or Qwen-Image-Edit's images after the
  first of ``img_shapes``; ``'cache'`` treats those like invariant target tokens), gathered with their
  RoPE rows (and Qwen's ``modulate_index``). Their queries attend over every key: text and computed rows
  fresh, the other image tokens' K/V from the cache of the last full step. The block's image-stream
  output is the cached one with the computed rows replaced, so invariant tokens keep their last full
  step's block outputs; the final norm/projection then runs on every token with the current timestep
  (cheap, per token), so an invariant token's prediction is its last full step's final hidden state
  re-modulated. Measured on a tiny random-init FLUX, 10 Euler steps from unit noise with 25 / 50 / 75 %
  of 64 tokens forced active: mean abs error vs the unhooked sample <= 0.0024 on the active tokens,
  0.10-0.11 on the invariant ones (all active: 0).

With every token active a sparse step computes exactly what the unhooked model does (tested). Not
supported in sparse steps: attention masks other than Qwen's text mask, IP-adapter processors,
ControlNet residuals (they are added to every row, including cached ones).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from npukit.sim.errors import ConfigError

from ._cache import CacheConfig, divergence, select_active
from ._processors import FluxCacheEditProcessor, QwenCacheEditProcessor

_MODEL_HOOK = "npukit_cacheedit"
_BLOCK_HOOK = "npukit_cacheedit_block"


@dataclass(frozen=True)
class CacheEditConfig:
    """Options of the Adaptive Activation Cache on a diffusers transformer (see the module docstring)."""

    layer: int = -1  # block (double-stream first, then single-stream) whose call-0 output is scored
    min_active: float = 0.05  # budget: at least this fraction of target tokens recomputed
    max_active: float = 0.1  # budget: at most this fraction (before dilation)
    ring: int = 0  # dilation in tokens (Chebyshev; square target grids only)
    ring_floor: float = 0.8  # a ring token joins only if its score >= ring_floor x the split threshold
    bins: int = 64  # Otsu histogram bins
    levels: int = 2  # Otsu splits (2: split the active class once more)
    score: str = "rel"  # 'l2' | 'log' | 'rel' (see divergence)
    reference: str = "previous"  # 'previous' (last round's call-0 activation, else the block input) | 'input'
    warmup: int = 1  # leading full calls of a round (>= 1)
    refresh: int = 0  # > 0: also a full call every ``refresh`` calls
    full_at: tuple[int, ...] = ()  # further full calls of a round (0-based call indices; e.g. the last step)
    # non-target image tokens (Kontext's / Qwen-Image-Edit's context images) at sparse steps: 'compute' (every
    # step, like the text) | 'cache' (like invariant target tokens: cached block outputs and K/V)
    context_image: str = "compute"

    def check(self, depth: int) -> None:
        """Raise :class:`ConfigError` naming the first bad option."""
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or not -depth <= self.layer < depth:
            raise ConfigError(f"cacheedit layer must be an integer in [-{depth}, {depth - 1}] for a {depth}-block "
                              f"transformer, got {self.layer!r}")
        if not 0.0 <= self.min_active <= self.max_active <= 1.0:
            raise ConfigError(f"need 0 <= min_active <= max_active <= 1, got {self.min_active}, {self.max_active}")
        if self.ring < 0 or self.ring_floor < 0:
            raise ConfigError(f"ring and ring_floor must be >= 0, got {self.ring}, {self.ring_floor}")
        if self.bins < 2 or self.levels < 1:
            raise ConfigError(f"need bins >= 2 and levels >= 1, got {self.bins}, {self.levels}")
        if self.score not in ("l2", "log", "rel"):
            raise ConfigError(f"score must be 'l2', 'log' or 'rel', got {self.score!r}")
        if self.reference not in ("previous", "input"):
            raise ConfigError(f"reference must be 'previous' or 'input', got {self.reference!r}")
        if self.context_image not in ("compute", "cache"):
            raise ConfigError(f"context_image must be 'compute' or 'cache', got {self.context_image!r}")
        if self.warmup < 1 or self.refresh < 0:
            raise ConfigError(f"need warmup >= 1 and refresh >= 0 calls, got {self.warmup}, {self.refresh}")
        if not isinstance(self.full_at, tuple) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                          for i in self.full_at):
            raise ConfigError(f"full_at must be a tuple of call indices >= 0, got {self.full_at!r}")

    def selection(self) -> CacheConfig:
        """The selection options as a :class:`CacheConfig` (for :func:`select_active`)."""
        return CacheConfig(ring=self.ring, ring_floor=self.ring_floor, min_active=self.min_active,
                           max_active=self.max_active, bins=self.bins, levels=self.levels)


def _as_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A forced active set as a (target,) bool tensor (every image) or a (B, target) one (one per image), or None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() not in (1, 2):
        got = getattr(mask, "shape", mask)
        raise ConfigError(f"force_active needs a (target,) or (B, target) bool tensor, got {got!r}")
    return mask


def padded_rows(active: torch.Tensor, scores: torch.Tensor | None = None) -> torch.Tensor:
    """(B, P) bool active sets -> (R, A) int64 token rows, ascending per image, A = the largest active set (>= 1).

    An image with fewer active tokens is padded with its highest-scoring inactive tokens (``scores`` (B, P)), or
    its lowest-index ones without scores. R = 1 when every image gets the same rows (shared), else R = B."""
    b, p = active.shape
    a = max(1, int(active.sum(1).max()))
    sec = (scores.float().to(active.device) if scores is not None
           else -torch.arange(p, dtype=torch.float32, device=active.device).expand(b, p))
    o1 = torch.argsort(sec, dim=1, descending=True, stable=True)  # by score
    o2 = torch.argsort(active.gather(1, o1).to(torch.int8), dim=1, descending=True, stable=True)  # active first
    rows = o1.gather(1, o2)[:, :a].sort(1).values
    return rows[:1] if bool((rows == rows[:1]).all()) else rows


@dataclass
class CacheEditState:
    """What the hooks share: the call counter, the selection and the per-block caches."""

    cfg: CacheEditConfig
    kind: str  # 'flux' | 'qwen'
    depth: int
    step: int = 0  # calls in this round
    rounds: int = 0
    mode: str = "off"  # 'full' | 'sparse' during a call
    n_img: int = 0  # image-stream tokens of this round
    target: int = 0  # leading target (noisy) tokens among them
    grid: tuple[int, int] = (0, 0)  # target token grid (h, w)
    n_txt: int = 0  # text tokens of the block being run
    rows: torch.Tensor | None = None  # (R, A) image rows computed at sparse steps (ascending; R = 1 shared, or B)
    scores: torch.Tensor | None = None  # (B, target) call-0 divergence
    detected: torch.Tensor | None = None  # (B, target) before dilation
    active: torch.Tensor | None = None  # (B, target) after dilation
    forced: torch.Tensor | None = None  # (target,) or (B, target) bool override
    prev_h: torch.Tensor | None = None  # last round's call-0 activation of block ``layer``
    out: dict[int, torch.Tensor] = field(default_factory=dict)  # block -> image-stream output of the last full step
    kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # block -> image K, V (B, N, H, Dh)
    executed: list[int] = field(default_factory=list)  # per call of this round: image tokens each block ran
    capture_attn: bool = False  # call 0: sum the attention each target token receives (ToCa-style scores)
    attn_received: torch.Tensor | None = None  # (B, target) summed over blocks, mean over heads and queries

    def new_round(self) -> None:
        """Start a round: the next call is call 0 (full, selects again); the last call-0 activation stays the reference."""
        self.step, self.rows, self.scores, self.detected, self.active = 0, None, None, None, None
        self.attn_received = None
        self.out.clear()
        self.kv.clear()
        self.executed = []
        self.rounds += 1

    def force_active(self, mask: torch.Tensor | None) -> None:
        """Recompute these target tokens at sparse steps ((target,) bool for every image, or (B, target) one set
        per image, padded as in :func:`padded_rows`); ``None`` returns to the divergence selection."""
        self.forced = _as_mask(mask)
        self.rows = None

    # ---------------------------------------------------------------- used by the hooks
    def _begin(self, n_img: int, target: int, grid: tuple[int, int], batch: int = 1) -> None:
        if self.out and n_img != self.n_img:
            raise ConfigError(f"cacheedit: this call has {n_img} image tokens, the round has {self.n_img}; call new_round() "
                              "before changing the image size")
        if target < 1 or target > n_img:
            raise ConfigError(f"cacheedit: found {target} target tokens among {n_img} image tokens")
        self.n_img, self.target, self.grid = n_img, target, grid
        c = self.cfg
        full = (self.step < c.warmup or (c.refresh > 0 and self.step % c.refresh == 0) or self.step in c.full_at
                or len(self.out) < self.depth
                or (self.forced is None and self.active is None))
        self.mode = "full" if full else "sparse"
        if not full and self.rows is None:
            scores = None
            if self.forced is not None:
                f = self.forced if self.forced.dim() == 2 else self.forced[None]
                if f.shape[1] != target or f.shape[0] not in (1, batch):
                    raise ConfigError(f"force_active mask has shape {tuple(self.forced.shape)}; this call needs "
                                      f"({target},) or ({batch}, {target})")
                act = f
            else:
                assert self.active is not None and self.scores is not None
                act, scores = self.active, self.scores
            dev = self.out[0].device
            rows = padded_rows(act.to(dev), scores)
            ctx = torch.arange(target, n_img if self.cfg.context_image == "compute" else target, device=dev)
            self.rows = torch.cat([rows, ctx.expand(rows.shape[0], -1)], 1)
        self.executed.append(n_img if full or self.rows is None else int(self.rows.shape[1]))

    def _select(self, h_in: torch.Tensor, h_out: torch.Tensor) -> None:
        """Call 0: score block ``layer``'s output against the reference and choose the active tokens."""
        p = self.target
        ref = self.prev_h if self.cfg.reference == "previous" else None
        if ref is None or ref.shape != h_out[:, :p].shape:
            ref = h_in[:, :p]
        self.prev_h = h_out[:, :p].detach().clone()
        self.scores = divergence(h_out.detach(), ref.detach(), p, self.cfg.score)
        h, w = self.grid
        if self.cfg.ring > 0 and h != w:
            raise ConfigError(f"cacheedit ring dilation needs a square target grid, got {h} x {w} tokens (use ring=0)")
        self.active, self.detected = select_active(self.scores.float().cpu(), self.cfg.selection(), h)

    def _capture(self, q: torch.Tensor, k: torch.Tensor) -> None:
        """Call 0 with ``capture_attn``: add the attention probability each target token receives (mean over
        heads and every query; q, k (B, S, H, Dh) after RoPE) to ``attn_received``."""
        if not (self.capture_attn and self.mode == "full" and self.step == 0):
            return
        n, p = self.n_txt, self.target
        probs = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * q.shape[-1] ** -0.5, -1)
        got = probs.mean((1, 2))[:, n:n + p].detach()
        self.attn_received = got if self.attn_received is None else self.attn_received + got

    def _splice(self, key: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint ``[text | image]`` K, V (B, S, H, Dh): store the image rows (full) or complete them from the cache (sparse)."""
        n = self.n_txt
        if self.mode == "full":
            self.kv[key] = (k[:, n:].detach().clone(), v[:, n:].detach().clone())
            return k, v
        if self.mode != "sparse":
            return k, v
        assert self.rows is not None
        kc, vc = self.kv[key]
        b, a = k.shape[0], self.rows.shape[1]
        grad = torch.is_grad_enabled()
        if kc.is_cuda and not grad:  # in place, with the Triton K/V-cache update kernel (heads merged: (B, N, H * Dh))
            from npukit.kernels.cacheedit import kv_update

            kv_update(kc.view(b, kc.shape[1], -1), vc.view(b, vc.shape[1], -1), self.rows.expand(b, a),
                      k[:, n:].reshape(b, a, -1), v[:, n:].reshape(b, a, -1))
        elif self.rows.shape[0] == 1:  # shared rows
            rows = self.rows[0]
            if grad:  # spliced copies keep the fresh rows' autograd graph
                kc, vc = kc.index_copy(1, rows, k[:, n:]), vc.index_copy(1, rows, v[:, n:])
            else:  # in place: the computed rows' cached entries are never read again (recomputed at every sparse
                kc.index_copy_(1, rows, k[:, n:])  # step, rewritten at the next full step): no copy of the cache
                vc.index_copy_(1, rows, v[:, n:])
        else:  # per-image rows
            idx = self.rows[:, :, None, None].expand(b, a, *k.shape[2:])
            if grad:
                kc, vc = kc.scatter(1, idx, k[:, n:]), vc.scatter(1, idx, v[:, n:])
            else:
                kc.scatter_(1, idx, k[:, n:])
                vc.scatter_(1, idx, v[:, n:])
        return torch.cat([k[:, :n], kc], 1), torch.cat([v[:, :n], vc], 1)


class CacheEdit:
    """What :func:`apply_cacheedit` returns: one :class:`CacheEditState` per diffusers cache context (a
    pipeline's ``with transformer.cache_context("cond")`` / ``("uncond")`` calls of true CFG each get their
    own call counter, selection and caches; calls outside any context use ``"default"``). Reading another
    attribute (``active``, ``scores``, ``rows``, ``step``, ...) reads it from the current context's state."""

    def __init__(self, cfg: CacheEditConfig, kind: str, depth: int) -> None:
        self.cfg, self.kind, self.depth = cfg, kind, depth
        self.branches: dict[str, CacheEditState] = {}
        self.context: str | None = None  # the diffusers cache context's name (set through the transformer hook)
        self._forced: torch.Tensor | None = None

    def state(self, name: str | None = None) -> CacheEditState:
        """The state of context ``name`` (default: the current context, else ``"default"``)."""
        key = name or self.context or "default"
        if key not in self.branches:
            st = CacheEditState(self.cfg, self.kind, self.depth)
            st.forced = self._forced
            self.branches[key] = st
        return self.branches[key]

    def new_round(self) -> None:
        """:meth:`CacheEditState.new_round` in every context."""
        for st in self.branches.values():
            st.new_round()

    def force_active(self, mask: torch.Tensor | None) -> None:
        """:meth:`CacheEditState.force_active` in every context (present and future)."""
        self._forced = _as_mask(mask)
        for st in self.branches.values():
            st.forced, st.rows = self._forced, None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("cfg", "kind", "depth", "branches", "context"):
            raise AttributeError(name)
        return getattr(self.state(), name)


# ------------------------------------------------------------------------------------------- hooks
def _flux_layout(kw: dict[str, Any], n_img: int) -> tuple[int, tuple[int, int]]:
    """Target tokens and their (h, w) grid from FLUX's ``img_ids`` (Kontext's context image: ids[:, 0] != 0)."""
    ids = kw.get("img_ids")
    if ids is None:
        return n_img, (0, 0)
    ids = ids[0] if ids.dim() == 3 else ids
    tgt = ids[:, 0] == ids[0, 0]
    p = int(tgt.sum())
    if not bool(tgt[:p].all()):
        raise ConfigError("cacheedit: FLUX target tokens (img_ids[:, 0] == img_ids[0, 0]) must lead the image tokens")
    rows, cols = ids[:p, 1], ids[:p, 2]
    return p, (int(rows.max() - rows.min()) + 1, int(cols.max() - cols.min()) + 1)


def _qwen_layout(kw: dict[str, Any], n_img: int) -> tuple[int, tuple[int, int]]:
    """Target tokens and grid from Qwen's ``img_shapes`` (the first image of the first sample is the target)."""
    shapes = kw.get("img_shapes")
    if not shapes:
        return n_img, (0, 0)
    first = shapes[0][0] if isinstance(shapes[0][0], (tuple, list)) else shapes[0]
    f, h, w = (int(x) for x in first)
    return f * h * w, (h, w)


def _hook_classes() -> tuple[type, type]:
    """The two hook classes (defined lazily: importing diffusers costs seconds)."""
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    from diffusers.hooks import ModelHook
    from diffusers.hooks.hooks import BaseState, StateManager

    class _ContextSink(StateManager):
        """Receives diffusers' cache context (``transformer.cache_context(name)``) for the :class:`CacheEdit` handle."""

        def __init__(self, handle: CacheEdit) -> None:
            super().__init__(BaseState)
            self.handle = handle

        def set_context(self, context: Any) -> None:
            super().set_context(context)
            self.handle.context = None if context is None else context.name

        def reset(self, *args: Any, **kwargs: Any) -> None:
            self.handle.new_round()

    class CacheEditTransformerHook(ModelHook):
        """On the transformer: per call, read the image layout and choose full or sparse mode; count the call."""

        _is_stateful = True

        def __init__(self, handle: CacheEdit) -> None:
            super().__init__()
            self.handle = handle
            self.contexts = _ContextSink(handle)  # diffusers' cache_context() reaches it (a StateManager attribute)

        def initialize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            self._sig = inspect.signature(module.forward)
            return module

        def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
            kw = self._sig.bind_partial(*args, **kwargs).arguments
            n_img = int(kw["hidden_states"].shape[1])
            p, grid = (_flux_layout if self.handle.kind == "flux" else _qwen_layout)(kw, n_img)
            self.handle.state()._begin(n_img, p, grid, int(kw["hidden_states"].shape[0]))
            return args, kwargs

        def post_forward(self, module: torch.nn.Module, output: Any) -> Any:
            st = self.handle.state()
            st.step += 1
            st.mode = "off"
            return output

        def reset_state(self, module: torch.nn.Module) -> torch.nn.Module:
            self.handle.new_round()
            return module

    class CacheEditBlockHook(ModelHook):
        """On one block: full mode runs it and stores its image output (and, call 0 at ``layer``, selects);
        sparse mode runs it on the text + computed image rows and fills the other rows from the cache."""

        def __init__(self, handle: CacheEdit, index: int) -> None:
            super().__init__()
            self.handle, self.index = handle, index
            self._orig_processor: Any = None

        def initialize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            self._sig = inspect.signature(module.forward)
            self._orig_processor = module.attn.processor
            proc = FluxCacheEditProcessor if self.handle.kind == "flux" else QwenCacheEditProcessor
            module.attn.set_processor(proc(self.handle, self.index))
            return module

        def deinitalize_hook(self, module: torch.nn.Module) -> torch.nn.Module:
            module.attn.set_processor(self._orig_processor)
            return module

        def new_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            st = self.handle.state()
            ba = self._sig.bind(*args, **kwargs)
            a = ba.arguments
            hs = a["hidden_states"]
            st.n_txt = int(a["encoder_hidden_states"].shape[1])
            if st.mode != "sparse":
                enc, out = self.fn_ref.original_forward(*ba.args, **ba.kwargs)
                if st.mode == "full":
                    st.out[self.index] = out.detach()
                    if st.step == 0 and self.index == st.cfg.layer % st.depth:
                        st._select(hs, out)
                return enc, out
            rows = st.rows  # (1, A) shared or (B, A) per image
            assert rows is not None
            shared = rows.shape[0] == 1
            if shared:
                a["hidden_states"] = hs.index_select(1, rows[0])
            else:
                a["hidden_states"] = hs.gather(1, rows[..., None].expand(-1, -1, hs.shape[-1]))
            rope = a.get("image_rotary_emb")
            if rope is not None:
                if st.kind == "flux":  # (cos, sin) over [text | image] rows: (S, D), or (B, S, D) per image
                    txt = torch.arange(st.n_txt, device=rows.device).expand(rows.shape[0], -1)
                    sel = torch.cat([txt, st.n_txt + rows], 1)
                    a["image_rotary_emb"] = tuple(r.index_select(0, sel[0]) if shared else r[sel] for r in rope)
                else:  # Qwen: (image freqs, text freqs)
                    a["image_rotary_emb"] = (rope[0].index_select(0, rows[0]) if shared else rope[0][rows], rope[1])
            if a.get("modulate_index") is not None:
                mi = a["modulate_index"]
                a["modulate_index"] = mi.index_select(1, rows[0]) if shared else mi.gather(1, rows.expand(mi.shape[0], -1))
            enc, sub = self.fn_ref.original_forward(*ba.args, **ba.kwargs)
            full = st.out[self.index].clone()
            if full.is_cuda and not torch.is_grad_enabled():  # the Triton row scatter (h[b, rows] = sub)
                from npukit.kernels.cacheedit import scatter_residual

                return enc, scatter_residual(full, rows.expand(full.shape[0], rows.shape[1]), sub.contiguous())
            if shared:
                return enc, full.index_copy_(1, rows[0], sub)
            return enc, full.scatter_(1, rows[..., None].expand(-1, -1, full.shape[-1]), sub)

    _CLASSES = (CacheEditTransformerHook, CacheEditBlockHook)
    return _CLASSES


_CLASSES: tuple[type, type] | None = None


def _blocks(transformer: torch.nn.Module) -> tuple[str, list[torch.nn.Module]]:
    name = type(transformer).__name__
    if name == "FluxTransformer2DModel":
        return "flux", [*transformer.transformer_blocks, *transformer.single_transformer_blocks]
    if name == "QwenImageTransformer2DModel":
        return "qwen", list(transformer.transformer_blocks)
    raise ConfigError(f"cacheedit supports FluxTransformer2DModel and QwenImageTransformer2DModel, got {name}")


def apply_cacheedit(transformer: torch.nn.Module, config: CacheEditConfig | None = None) -> CacheEdit:
    """Register the CacheEdit hooks on a diffusers FLUX / Qwen-Image transformer; returns the shared
    :class:`CacheEdit` handle (``new_round()``, ``force_active(mask)``, ``state(name)``, ``active``, ``scores``)."""
    config = config if config is not None else CacheEditConfig()
    if not isinstance(config, CacheEditConfig):
        raise ConfigError(f"apply_cacheedit needs a CacheEditConfig, got {type(config).__name__}")
    kind, blocks = _blocks(transformer)
    config.check(len(blocks))
    from diffusers.hooks import HookRegistry  # after the checks: importing diffusers takes seconds

    registry = HookRegistry.check_if_exists_or_initialize(transformer)
    if registry.get_hook(_MODEL_HOOK) is not None:
        raise ConfigError("cacheedit is already applied to this transformer; call remove_cacheedit first")
    model_hook, block_hook = _hook_classes()
    handle = CacheEdit(config, kind, len(blocks))
    for i, blk in enumerate(blocks):
        HookRegistry.check_if_exists_or_initialize(blk).register_hook(block_hook(handle, i), _BLOCK_HOOK)
    registry.register_hook(model_hook(handle), _MODEL_HOOK)
    registry.invalidate_child_registries_cache()
    return handle


def remove_cacheedit(transformer: torch.nn.Module) -> None:
    """Remove the CacheEdit hooks and restore the original attention processors (no-op if not applied)."""
    registry = getattr(transformer, "_diffusers_hook", None)
    if registry is None:
        return
    registry.remove_hook(_MODEL_HOOK, recurse=False)
    registry.remove_hook(_BLOCK_HOOK, recurse=True)
    registry.invalidate_child_registries_cache()


__all__ = ["CacheEdit", "CacheEditConfig", "CacheEditState", "FluxCacheEditProcessor", "QwenCacheEditProcessor",
           "apply_cacheedit", "padded_rows", "remove_cacheedit"]
