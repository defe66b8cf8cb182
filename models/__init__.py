"""npukit.models: PyTorch models and the ML methods, one subpackage each; may import npukit.kernels and npukit.sim.

* :mod:`npukit.models.psumquant`: PsumQuant (B-bit psums on a tiled weight-stationary array);
* :mod:`npukit.models.omnimoe`: OmniMoE / PEER layers;
* :mod:`npukit.models.cacheedit`: CacheEdit (token caching for image-edit diffusion);
* shared pieces: :func:`replace_mlp` (swap a transformers Llama/Qwen model's MLPs for OmniMoE or PEER layers),
  the small reference models (``resnet18``, ``minilm``, ``byte_llama``), ``corpus`` and ``weights`` (checked
  torch file reading), and :func:`refuse_remote_code` / :data:`NO_REMOTE_CODE` (never run code a model config
  names; the workload front ends use them too).

Workload front ends (the tracer, ONNX, real models) live in :mod:`npukit.workloads`. Importing this package
imports no torch.
"""

from ._no_remote_code import NO_REMOTE_CODE, REMOTE_CODE_KEYS, refuse_remote_code
from .replace_mlp import OmniMoEConfig, PEERConfig, load_replaced, replace_mlp

__all__ = [
    "NO_REMOTE_CODE", "REMOTE_CODE_KEYS", "OmniMoEConfig", "PEERConfig", "load_replaced", "refuse_remote_code", "replace_mlp",
]
