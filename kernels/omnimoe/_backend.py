"""Backend choice for the OmniMoE kernels: Triton on CUDA tensors, plain torch on CPU.

``backend`` is ``auto`` (Triton when the tensor is on a CUDA device and Triton imports, torch
otherwise), ``torch`` or ``triton``. Triton on CPU tensors runs only under the Triton interpreter
(``TRITON_INTERPRET=1`` set before the kernels are first built), which is what the tests use.
Kernels are built lazily (decorated at first use), so setting the variable before the first call
is enough.
"""

from __future__ import annotations

import os

import torch

from npukit.sim.errors import ConfigError

BACKENDS = ("auto", "torch", "triton")


def interpreting() -> bool:
    """True when the Triton interpreter is on (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def choose(backend: str, t: torch.Tensor) -> str:
    """Resolve ``backend`` for tensor ``t``: returns ``torch`` or ``triton``; raises ConfigError."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown kernel backend '{backend}'; use one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton" if t.is_cuda and triton_available() else "torch"
    if backend == "triton":
        if not triton_available():
            raise ConfigError("backend 'triton' needs the triton package; install it or use backend='torch'")
        if not t.is_cuda and not interpreting():
            raise ConfigError(
                "backend 'triton' needs CUDA tensors or TRITON_INTERPRET=1 (set before the first kernel call); "
                "use backend='torch' on CPU"
            )
    return backend


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
