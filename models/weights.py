"""Reading weights and tensors from user files, with one clear error line for every way they go wrong.

:func:`read_torch_file` opens a ``torch.save`` file with ``weights_only=True`` (no code runs) and
turns an unreadable, empty, truncated or non-torch file into :class:`WeightsError`;
:func:`check_state` compares a state dict with the parameters a model expects (missing and extra
keys, shapes, dtypes) and refuses NaN/Inf; :func:`check_finite` does the last for any tensor
(inputs too). Torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from npukit.sim.errors import ConfigError


class WeightsError(ConfigError):
    """A weights or tensor file npukit cannot use (unreadable, truncated, not a torch file, wrong keys,
    shapes or dtypes, NaN/Inf values), or NaN/Inf in an input tensor."""


def read_torch_file(path: str | Path, what: str, hint: str = "") -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; :class:`WeightsError` (``what`` names the
    file's role, ``hint`` how to get a good one) when it is missing, a folder, empty or not readable as
    a torch file (text, truncated, another format, or objects that are not plain tensors)."""
    import pickle
    import zipfile

    import torch

    p = Path(path)
    tail = f"; {hint}" if hint else ""
    if p.is_dir():
        raise WeightsError(f"{what} '{p}' is a folder; pass the weights file{tail}")
    if not p.is_file():
        raise WeightsError(f"{what} not found at '{p}'{tail}")
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise WeightsError(f"cannot read {what} '{p}' ({exc.strerror}){tail}") from None
    if size == 0:
        raise WeightsError(f"{what} '{p}' is empty{tail}")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except PermissionError as exc:
        raise WeightsError(f"cannot read {what} '{p}' ({exc.strerror}){tail}") from None
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError):
        raise WeightsError(f"{what} '{p}' is not a torch weights file of plain tensors (weights_only loading "
                           f"refused it){tail}") from None
    except Exception:  # torch reports truncated archives and foreign bytes as RuntimeError, OSError, KeyError, ...
        raise WeightsError(f"{what} '{p}' is not a readable torch weights file (truncated, or another format){tail}") from None


def _names(keys: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def check_finite(t: Any, what: str, hint: str = "") -> None:
    """:class:`WeightsError` when tensor ``t`` holds NaN or Inf (``what`` names it, ``hint`` the fix)."""
    import torch

    if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
        return
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        n_nan = int(torch.isnan(t).sum())
        n_inf = int(bad.sum()) - n_nan
        parts = [f"{n} {kind}" for n, kind in ((n_nan, "NaN"), (n_inf, "Inf")) if n]
        raise WeightsError(f"{what} holds {' and '.join(parts)} of {t.numel()} values; every value must be finite"
                           + (f"; {hint}" if hint else ""))


def check_state(state: Any, expected: Mapping[str, tuple[int, ...]], source: str, hint: str = "") -> dict[str, Any]:
    """``state`` (a loaded state dict) checked against ``expected`` (parameter name -> shape):
    a mapping of str to floating-point tensors, no key missing or extra, every shape equal, every
    value finite. Returns it as a plain dict; :class:`WeightsError` naming the first problem and
    ``source`` (the file) otherwise."""
    import torch

    tail = f"; {hint}" if hint else ""
    if not isinstance(state, Mapping):
        raise WeightsError(f"{source}: the weights are a {type(state).__name__}, not a name -> tensor mapping{tail}")
    state = dict(state)
    odd = [k for k in state if not isinstance(k, str)]
    if odd:
        raise WeightsError(f"{source}: weight names must be strings, got {_names([repr(k) for k in odd])}{tail}")
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    if missing or extra:
        parts = ([f"missing {len(missing)} tensor(s): {_names(missing)}"] if missing else []) + (
            [f"{len(extra)} unexpected tensor(s): {_names(extra)}"] if extra else [])
        raise WeightsError(f"{source} does not fit the model ({'; '.join(parts)}){tail}")
    for k, shape in expected.items():
        v = state[k]
        if not isinstance(v, torch.Tensor):
            raise WeightsError(f"{source}: '{k}' is a {type(v).__name__}, not a tensor{tail}")
        if not v.is_floating_point():
            raise WeightsError(f"{source}: '{k}' has dtype {v.dtype}; weights must be floating point{tail}")
        if tuple(v.shape) != tuple(shape):
            raise WeightsError(f"{source}: '{k}' has shape {tuple(v.shape)}, the model expects {tuple(shape)}{tail}")
        check_finite(v, f"{source}: '{k}'", hint)
    return state
