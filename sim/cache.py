"""Where npukit keeps its on-disk caches: one root, one environment variable.

The root is ``$NPUKIT_CACHE_DIR`` if set, else ``~/.cache/npukit``; never inside the repository. Each cache
has its own sub-folder of the root (``traces`` for traced workloads, ``psumquant`` for the experiment's trained
weights). ``NPUKIT_CACHE``, the weights cache's old name for the same root, is still read when
``NPUKIT_CACHE_DIR`` is unset, with one DeprecationWarning.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

ENV = "NPUKIT_CACHE_DIR"
_OLD_ENV = "NPUKIT_CACHE"


def cache_root() -> Path:
    """The root folder of npukit's caches (not created here): ``$NPUKIT_CACHE_DIR`` or ``~/.cache/npukit``."""
    env = os.environ.get(ENV)
    if not env and os.environ.get(_OLD_ENV):
        env = os.environ[_OLD_ENV]
        warnings.warn(f"{_OLD_ENV} is deprecated; set {ENV} (the same folder: the root of npukit's caches)",
                      DeprecationWarning, stacklevel=2)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "npukit"


def cache_subdir(name: str) -> Path:
    """The folder of one cache, ``cache_root() / name`` (not created here)."""
    return cache_root() / name
