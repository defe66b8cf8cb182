"""Test-session set-up shared by every test module.

Triton kernels run on the CPU through the interpreter in tests (there is no GPU on CI). Triton
decides between compiling and interpreting when a kernel is decorated, so the variable must be set
before any kernel module is imported: here, before collection. Set NPUKIT_TRITON_COMPILE=1 on a
CUDA machine to test the compiled kernels instead.
"""

import os

if os.environ.get("NPUKIT_TRITON_COMPILE") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
