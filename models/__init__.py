"""npukit.models: PyTorch models and the ML methods (PsumQuant, OmniMoE, CacheEdit); may import npukit.sim.

:func:`workload_from_spec` turns any workload spec ``npukit.sim`` does not know (a real model of transformers or
diffusers, a PyTorch model) into a :class:`~npukit.sim.Workload`, :func:`onnx_workload` an ONNX file; importing
this package imports neither torch nor onnx.
"""

from .onnx_workload import onnx_workload
from .real_models import REAL_MODELS, workload_from_spec

__all__ = ["REAL_MODELS", "onnx_workload", "workload_from_spec"]
