"""npukit.benchmarks: the microbenchmarks of ``npukit bench NAME`` (one module per NAME, e.g. :mod:`.omnimoe`).

The ``bench_*.py`` files beside them are stand-alone scripts (``python benchmarks/bench_sim.py``) that measure
the speed targets and print a table; they are not imported by npukit.
"""
