"""Where trained weights are cached: ``psumquant`` under npukit's cache root (``$NPUKIT_CACHE_DIR`` or
``~/.cache/npukit``, :func:`npukit.sim.cache_root`; never in the repo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npukit.sim import cache_subdir
from npukit.sim.errors import ConfigError


def _root() -> Path:
    return cache_subdir("psumquant")


def check_cache_dir() -> Path:
    """Check, creating nothing, that the cache folder is or can become writable; ConfigError otherwise."""
    from npukit.sim.output import check_out_dir

    path = _root()
    try:
        return check_out_dir(path, "NPUKIT_CACHE_DIR")
    except ConfigError:
        raise ConfigError(f"cannot use the weights cache folder '{path}' (not a writable folder); "
                          "set NPUKIT_CACHE_DIR to a writable folder") from None


def cache_dir() -> Path:
    """The psumquant cache folder (created on demand); raises ConfigError when it cannot be made."""
    path = _root()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create cache folder '{path}' ({exc.strerror}); set NPUKIT_CACHE_DIR to a writable folder"
        raise ConfigError(msg) from None
    return path


def load_state(name: str) -> dict[str, Any] | None:
    """The cached object saved under ``name`` (a torch ``state``), or None when absent, unreadable, not a
    dict or holding NaN/Inf tensors (the caller then retrains and overwrites it)."""
    import torch

    path = cache_dir() / name
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a corrupt cache entry is retrained, never trusted
        return None
    if not isinstance(state, dict):
        return None
    for v in state.values():  # NaN/Inf weights (a diverged or damaged entry) are retrained too
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()):
            return None
    return state


def save_state(name: str, obj: dict[str, Any]) -> Path:
    """Save ``obj`` atomically (temp + rename) under ``name``; returns its path."""
    import torch

    from npukit.sim import atomic_file

    path = cache_dir() / name
    with atomic_file(path) as tmp:
        torch.save(obj, tmp)
    return path
