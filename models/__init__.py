"""npukit.models: PyTorch models and the ML methods (PsumQuant, OmniMoE, CacheEdit); may import npukit.sim."""

from .onnx_workload import onnx_workload

__all__ = ["onnx_workload"]
