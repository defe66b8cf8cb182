"""npukit.models: PyTorch models and the ML methods (PsumQuant, OmniMoE, CacheEdit); may import npukit.sim.

:func:`workload_from_spec` turns any workload spec ``npukit.sim`` does not know (a real model of transformers or
diffusers, a PyTorch model) into a :class:`~npukit.sim.Workload`, :func:`onnx_workload` an ONNX file; importing
this package imports neither torch nor onnx.
:func:`replace_mlp` swaps a transformers Llama/Qwen model's MLPs for OmniMoE or PEER layers.
"""

from .onnx_workload import onnx_workload
from .real_models import REAL_MODELS, workload_from_spec
from .replace_mlp import OmniMoEConfig, PEERConfig, load_replaced, replace_mlp

__all__ = ["REAL_MODELS", "OmniMoEConfig", "PEERConfig", "load_replaced", "onnx_workload", "replace_mlp",
           "workload_from_spec"]
