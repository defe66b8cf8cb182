"""CacheEdit: multi-round image editing with an Adaptive Activation Cache on diffusers' FLUX / Qwen-Image transformers.

>>> editor = load_editor()                                          # the shipped Flux editor (CPU)
>>> handle = apply_cacheedit(editor.transformer, CacheEditConfig())  # diffusers hooks (:mod:`._diffusers`)
>>> out = sample(editor, src, instr)                                 # src (1, 3, 32, 32) in [-1, 1], instr (1, 4)
>>> remove_cacheedit(editor.transformer)

The editor (:mod:`._flux`) is a small diffusers ``FluxTransformer2DModel`` in the FLUX.1 Kontext
layout (source-image tokens concatenated as context, the instruction embedding as the text stream), trained on
the procedural editing data (:mod:`._data`). :func:`edit_session` runs a multi-round session under
CacheEdit, the ground-truth mask (oracle), ToCa-like token caching or one of diffusers' caches
(:mod:`._methods`); :class:`WorkCounter` counts the executed MACs and bytes whatever a cache skips
(:mod:`._count`). :func:`pipeline_rounds` runs an unmodified ``FluxKontextPipeline`` /
``QwenImageEditPipeline`` for several rounds, each round's output image the next round's input
(:mod:`._pipelines`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..weights import WeightsError, check_finite, check_state, read_torch_file
from ._cache import CacheConfig, dilate, divergence, ledger_totals, otsu_threshold, select_active
from ._count import WorkCounter
from ._count import record as record_work
from ._data import IMAGE, OPS, TRAIN_OP_WEIGHTS, describe, make_batch, make_session
from ._diffusers import CacheEdit, CacheEditConfig, CacheEditState, apply_cacheedit, remove_cacheedit
from ._flux import (
    DEFAULT_STEPS,
    FluxEditor,
    FluxEditorConfig,
    image_ids,
    parameter_bytes,
    patchify,
    sample,
    timesteps,
    unpatchify,
)
from ._methods import METHODS as SESSION_METHODS
from ._methods import SessionRun, calibrate_mag_ratios, edit_session, token_mask
from ._metrics import TEXTURE_SMOOTH, edit_correct, iou, mse, patch_mask, psnr_db, ssim
from ._pipelines import pipeline_rounds

KEEP = (0, 0, 0, 0)  # the identity instruction
_MAX_SIZE = 4096  # any FluxEditorConfig size above this is not a weights file of this model

__all__ = [
    # the Adaptive Activation Cache as diffusers hooks on FLUX (Kontext) and Qwen-Image (Edit) transformers
    "CacheEdit", "CacheEditConfig", "CacheEditState", "apply_cacheedit", "remove_cacheedit",
    "CacheConfig", "dilate", "divergence", "otsu_threshold", "select_active",
    # the Flux editor
    "DEFAULT_STEPS", "FLUX_WEIGHTS", "FluxEditor", "FluxEditorConfig", "image_ids", "load_editor", "parameter_bytes", "patchify",
    "sample", "timesteps", "unpatchify", "KEEP", "WeightsError",
    # sessions under CacheEdit, diffusers caches and token-caching baselines; the executed-work counter
    "SESSION_METHODS", "SessionRun", "calibrate_mag_ratios", "edit_session", "token_mask", "WorkCounter",
    "record_work", "ledger_totals", "pipeline_rounds",
    # data and metrics
    "IMAGE", "OPS", "TRAIN_OP_WEIGHTS", "describe", "make_batch", "make_session",
    "TEXTURE_SMOOTH", "edit_correct", "iou", "mse", "patch_mask", "psnr_db", "ssim",
]


FLUX_WEIGHTS = Path(__file__).resolve().parent / "weights" / "cacheedit_flux.pt"
_FLUX_FORMAT = "npukit-cacheedit-flux/1"
_FLUX_HINT = "pass a file written by `python -m npukit.experiments.cacheedit.train --out FILE` (or no --weights)"


def _flux_config(cfg: Any, src: str) -> FluxEditorConfig:
    """The file's ``config`` entry as a :class:`FluxEditorConfig`; :class:`WeightsError` naming a bad field."""
    import dataclasses

    if not isinstance(cfg, dict):
        raise WeightsError(f"{src}: 'config' is a {type(cfg).__name__}, not a dict of FluxEditorConfig fields; {_FLUX_HINT}")
    fields = {f.name: f.type for f in dataclasses.fields(FluxEditorConfig)}
    unknown = sorted(str(k) for k in cfg if k not in fields)
    if unknown:
        raise WeightsError(f"{src}: unknown config field(s) {', '.join(unknown)} (known: {', '.join(fields)}); {_FLUX_HINT}")
    for k, v in cfg.items():
        if fields[k] == "bool":
            if not isinstance(v, bool):
                raise WeightsError(f"{src}: config field {k} must be true or false, got {v!r}; {_FLUX_HINT}")
        elif isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _MAX_SIZE:
            raise WeightsError(f"{src}: config field {k} must be an integer in [1, {_MAX_SIZE}], got {v!r}; {_FLUX_HINT}")
    c = FluxEditorConfig(**cfg)
    if c.image % c.patch or c.head_dim % 8:
        raise WeightsError(f"{src}: inconsistent config (need image % patch == 0 and head_dim % 8 == 0, got image "
                           f"{c.image}, patch {c.patch}, head_dim {c.head_dim}); {_FLUX_HINT}")
    return c


def load_editor(path: str | Path | None = None) -> FluxEditor:
    """Load the trained Flux editor (fp16 file -> fp32 model in eval mode; default: the shipped weights).

    Everything in the file is checked before the model is built: a torch file (``weights_only=True``) of
    format ``npukit-cacheedit-flux/1`` whose config is a valid :class:`FluxEditorConfig` and whose state has
    exactly the model's tensors, shapes and finite values; :class:`WeightsError` naming the first problem.
    """
    p = Path(path) if path is not None else FLUX_WEIGHTS
    if p.is_dir():
        raise WeightsError(f"CacheEdit weights path {p} is a folder; pass the weights file (--weights FILE)")
    if not p.exists():
        raise WeightsError(f"CacheEdit weights not found at {p}; train them with "
                           f"`python -m npukit.experiments.cacheedit.train --out {p}`")
    blob = read_torch_file(p, "CacheEdit weights", _FLUX_HINT)
    src = f"CacheEdit weights '{p}'"
    if not isinstance(blob, dict) or blob.get("format") != _FLUX_FORMAT:
        raise WeightsError(f"{p} is not a CacheEdit weights file (expected format {_FLUX_FORMAT}); {_FLUX_HINT}")
    missing = [k for k in ("config", "state") if k not in blob]
    if missing:
        raise WeightsError(f"{src} lacks the {' and '.join(repr(k) for k in missing)} entr{'ies' if len(missing) > 1 else 'y'}; "
                           f"{_FLUX_HINT}")
    record = blob.get("record", {})
    if not isinstance(record, dict):
        raise WeightsError(f"{src}: 'record' is a {type(record).__name__}, not a dict; {_FLUX_HINT}")
    cfg = _flux_config(blob["config"], src)
    model = FluxEditor(cfg)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = check_state(blob["state"], expected, src, _FLUX_HINT)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    for k, v in model.state_dict().items():
        check_finite(v, f"{src}: '{k}'", _FLUX_HINT)
    model.eval()
    model.record = record  # type: ignore[attr-defined]
    return model
