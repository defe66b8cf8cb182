"""PyTorch models named by a spec string, traced into workloads: ``torch:<built-in>``, ``path/to/file.py:factory``
and ``package.module:factory`` (the last two import and run that code). The tracing itself is
:func:`npukit.workloads.trace.trace_workload`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..sim import check_shape, parse_dim, short
from ..sim.errors import WorkloadError
from ..sim.workload import Workload
from .trace import _one_line, trace_workload

__all__ = ["BUILTIN_MODELS", "workload_from_model_spec"]


def _builtin_resnet18() -> nn.Module:
    from ..models.resnet18 import resnet18

    return resnet18()


def _builtin_minilm() -> nn.Module:
    from ..models.minilm import minilm_l6

    return minilm_l6()


# name -> (factory, default input shape, input kind: 'float' randn or 'tokens' int64 ids)
BUILTIN_MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], str]] = {
    "resnet18": (_builtin_resnet18, (1, 3, 224, 224), "float"),
    "minilm-l6": (_builtin_minilm, (1, 128), "tokens"),
}


def _parse_shape(input_shape: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(input_shape, str):
        parts = [p.strip() for p in input_shape.replace("x", ",").split(",")]
        ok = bool(parts) and all(p.isdigit() for p in parts)
        dims = tuple(parse_dim(p, f"input shape {short(input_shape)}", WorkloadError) for p in parts) if ok else ()
    else:
        dims = tuple(input_shape)
        ok = bool(dims) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    if not ok:
        raise WorkloadError(f"input shape '{short(input_shape)}' must be comma-separated positive integers, "
                            "e.g. 1,3,224,224")
    check_shape(dims, f"input shape '{short(input_shape)}'", WorkloadError)  # the example input is allocated
    return dims


def _random_input(shape: tuple[int, ...], kind: str, model: nn.Module) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    if kind == "tokens":
        vocab = getattr(model, "vocab_size", 1000)
        t = torch.randint(0, vocab, shape, generator=gen)
    else:
        t = torch.randn(shape, generator=gen)
    p = next(model.parameters(), None)
    return t.to(p.device) if p is not None else t


def _load_factory(target: str, attr: str, spec: str) -> Any:
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if path.is_dir():
            raise WorkloadError(f"model file '{target}' is a folder, not a file (spec '{spec}'); pass a .py file")
        if not path.is_file():
            raise WorkloadError(f"model file '{target}' does not exist (spec '{spec}')")
        mod_name = f"_npukit_model_{path.stem}_{abs(hash(str(path.resolve())))}"
        ispec = importlib.util.spec_from_file_location(mod_name, path)
        if ispec is None or ispec.loader is None:
            raise WorkloadError(f"model file '{target}' cannot be loaded as Python (spec '{spec}')")
        module = importlib.util.module_from_spec(ispec)
        sys.modules[mod_name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            ispec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(mod_name, None)
            raise WorkloadError(f"model file '{target}' failed to import: {_one_line(e)}") from e
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        try:
            module = importlib.import_module(target)
        except Exception as e:
            raise WorkloadError(f"cannot import model module '{target}' (spec '{spec}'): {_one_line(e)}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"'{target}' has no attribute '{attr}' (spec '{spec}'); name a function returning an nn.Module")
        obj = getattr(obj, part)
    if not callable(obj):
        raise WorkloadError(f"'{target}:{attr}' is not callable; name a function returning an nn.Module")
    return obj


def workload_from_model_spec(spec: str, input_shape: str | None = None) -> Workload:
    """A traced :class:`Workload` from a model spec (for the CLI).

    ``spec`` is ``path/to/file.py:factory``, ``package.module:factory`` or a built-in ``torch:<name>``
    (``torch:resnet18``, ``torch:minilm-l6``). The factory is called with no arguments and returns an
    ``nn.Module`` or a ``(module, example_inputs)`` tuple. ``input_shape`` (e.g. ``1,3,224,224``) gives a
    float32 ``randn`` input (seed 0); it is required unless the factory returns inputs or the model is a
    built-in, and overrides them if given. Every failure raises :class:`WorkloadError` with one line.
    """
    if not isinstance(spec, str) or not all(spec.rpartition(":")[::2]):
        raise WorkloadError(
            f"model spec '{spec}' must be path/to/file.py:factory, package.module:factory or "
            f"torch:<{'|'.join(BUILTIN_MODELS)}>"
        )
    target, _, attr = spec.rpartition(":")
    shape = _parse_shape(input_shape) if input_shape is not None else None
    inputs: Any = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if target == "torch":
            if attr not in BUILTIN_MODELS:
                raise WorkloadError(f"unknown built-in model 'torch:{attr}'; use one of "
                                    f"{', '.join('torch:' + n for n in BUILTIN_MODELS)}")
            factory, default_shape, kind = BUILTIN_MODELS[attr]
            model = factory()
            inputs = _random_input(shape or default_shape, kind, model)
            return trace_workload(model, inputs, attr)
        factory = _load_factory(target, attr, spec)
        try:
            made = factory()
        except Exception as e:
            raise WorkloadError(f"model factory '{spec}' raised {_one_line(e)}") from e
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module):
        model, inputs = made
    elif isinstance(made, nn.Module):
        model = made
    else:
        raise WorkloadError(
            f"model factory '{spec}' returned {type(made).__name__}; it must return an nn.Module "
            f"or a (module, example_inputs) tuple"
        )
    if shape is not None:
        inputs = _random_input(shape, "float", model)
    elif inputs is None:
        raise WorkloadError(f"model factory '{spec}' returns no example inputs; give an input shape such as 1,3,224,224")
    name = attr.rpartition(".")[2]
    wl = trace_workload(model, inputs, name)
    wl.meta["model_spec"] = spec
    return wl
