"""npukit.workloads: every way to name a workload, turned into a :class:`~npukit.sim.Workload`.

:func:`load_workload` is the one entry point (the CLI, sweeps, experiments and the Python API call it);
:func:`onnx_workload` lowers an ONNX file, :func:`workload_from_spec` a real model (transformers / diffusers)
or a PyTorch model, :func:`parse_options` is the one ``key=val`` option grammar. Importing this package
imports neither torch nor onnx.
"""

from .loader import WORKLOAD_FORMS, load_workload, parse_options
from .onnx_workload import onnx_workload
from .real_models import REAL_MODELS, workload_from_spec

__all__ = ["REAL_MODELS", "WORKLOAD_FORMS", "load_workload", "onnx_workload", "parse_options", "workload_from_spec"]
