"""npukit: from a PyTorch model to systolic-array cycles, joules and verified RTL.

Subpackages: :mod:`npukit.sim` (accounting layer and NPU simulator), :mod:`npukit.models`,
:mod:`npukit.kernels`, :mod:`npukit.rtl`, :mod:`npukit.experiments`. Importing ``npukit``
imports nothing heavy.
"""

__version__ = "0.1.0"
