"""The one backend chooser of every kernel (psum-quantized matmul, OmniMoE, CacheEdit ops).

``backend`` is ``auto`` (Triton when the tensor is on a CUDA device, Triton imports and the kernel supports
the arguments; plain torch otherwise), ``torch`` or ``triton``. Triton on CPU tensors runs only under the
Triton interpreter (``TRITON_INTERPRET=1`` set before the kernels are first built), which is what the tests
use. Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from npukit.sim.errors import ConfigError, NpukitError

if TYPE_CHECKING:
    import torch

BACKENDS = ("auto", "torch", "triton")


def interpreting() -> bool:
    """True when the Triton interpreter is on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_available() -> bool:
    """True when the Triton package imports (it does not say whether a GPU is present)."""
    try:
        import triton  # noqa: F401
    except Exception:  # pragma: no cover - triton is a declared dependency
        return False
    return True


def choose_backend(backend: str, t: torch.Tensor, *, triton_ok: bool = True, choices: tuple[str, ...] = BACKENDS,
                   error: type[NpukitError] = ConfigError) -> str:
    """Resolve ``backend`` for tensor ``t`` to a concrete backend (``torch``, ``triton`` or another of
    ``choices``); ``triton_ok``: whether the kernel's Triton path supports these arguments (``auto`` falls back
    to torch when not). Raises ``error`` with one line for an unknown backend or an explicit ``triton`` that
    cannot run here."""
    if backend not in choices:
        raise error(f"unknown kernel backend '{backend}'; use one of {', '.join(choices)}")
    if backend == "auto":
        return "triton" if t.is_cuda and triton_ok and triton_available() else "torch"
    if backend == "triton":
        if not triton_available():
            raise error("backend 'triton' needs the triton package; install it or use backend='torch'")
        if not t.is_cuda and not interpreting():
            raise error("backend 'triton' needs CUDA tensors or TRITON_INTERPRET=1 (set before the first kernel "
                        "call); use backend='torch' on CPU")
    return backend


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1): Triton block sizes."""
    return 1 << max(0, (int(n) - 1).bit_length())
