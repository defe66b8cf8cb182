"""Test-session set-up shared by every test module.

Triton kernels run on the CPU through the interpreter in tests (there is no GPU on CI). Triton
decides between compiling and interpreting when a kernel is decorated, so the variable must be set
before any kernel module is imported: here, before collection. Set NPUKIT_TRITON_COMPILE=1 on a
CUDA machine to test the compiled kernels instead.
"""

import os
import random

if os.environ.get("NPUKIT_TRITON_COMPILE") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

# the RTL tests' seed: random per session unless set, drawn once here so that every RTL test module uses the same
# one and the session prints it (rerun a failure with NPUKIT_RTL_SEED=<that seed>)
os.environ.setdefault("NPUKIT_RTL_SEED", str(random.SystemRandom().randrange(1 << 31)))

import pytest  # noqa: E402


def _rtl_seed_line() -> str:
    return f"NPUKIT_RTL_SEED={os.environ['NPUKIT_RTL_SEED']} (the RTL tests' seed)"


def pytest_report_header(config: pytest.Config) -> str:
    return _rtl_seed_line()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(_rtl_seed_line())  # also under -q, where the header is not printed

# test files of the ML methods and their experiments carry the ``ml`` marker (``pytest -m ml`` / ``-m "not ml"``)
_ML_FILES = ("test_psumquant", "test_omnimoe", "test_cacheedit", "test_experiment_", "test_real_models", "test_bad_weights")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name.startswith(_ML_FILES):
            item.add_marker(pytest.mark.ml)


@pytest.fixture
def one_torch_thread():  # type: ignore[no-untyped-def]
    """torch on one thread for the test (the machine is shared), the previous count restored after."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def psumquant_quick_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One ``npukit experiment psumquant --quick`` from an empty weights cache, shared by every test that
    reads a quick run (test_experiment_psumquant, test_experiment_executor): ``(rc, out, cache)``.
    NPUKIT_CACHE_DIR points at ``cache`` only while it runs. torch runs on one thread, as the executor
    test's Dask workers do, so that their numbers can be compared with this run's to float rounding."""
    import torch

    from npukit.cli import main

    cache = tmp_path_factory.mktemp("psumquant-cache")
    out = tmp_path_factory.mktemp("psumquant-exp") / "psumquant"
    mp = pytest.MonkeyPatch()
    mp.setenv("NPUKIT_CACHE_DIR", str(cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rc = main(["experiment", "psumquant", "--quick", "--out", str(out), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
        mp.undo()
    return rc, out, cache


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Every test session gets its own empty ``$NPUKIT_CACHE_DIR`` (lowered ONNX files, loop-nest mappings):
    a cache entry left by another run never answers for the code under test."""
    mp = pytest.MonkeyPatch()
    mp.setenv("NPUKIT_CACHE_DIR", str(tmp_path_factory.mktemp("npukit-cache")))
    yield
    mp.undo()
