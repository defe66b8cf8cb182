"""Checks every experiment (and ``npukit demo``) runs on its options before any work.

Each raises :class:`~npukit.sim.errors.ConfigError` with one line naming the flag, the value and
the allowed range. Numbers have an upper limit too (a count that would run for days or exhaust
memory is refused, not attempted); floats must be finite. Stdlib only.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from npukit.sim.errors import ConfigError

MAX_THREADS = 1024
MAX_DASK_WORKERS = 256
MAX_CONNECT_TIMEOUT_S = 3600.0
MAX_SEED = 2**32 - 1


def int_option(value: Any, flag: str, lo: int, hi: int, hint: str = "") -> int | None:
    """``value`` (None: unset, returned as is) checked to be an integer in ``[lo, hi]``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{flag} must be an integer in [{lo}, {hi}]{hint}, got {value!r}")
    return value


def float_option(value: Any, flag: str, lo: float, hi: float, *, lo_open: bool = False, hint: str = "") -> float | None:
    """``value`` (None: unset) checked to be a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    if value is None:
        return None
    ok = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
          and (lo < value if lo_open else lo <= value) and value <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ConfigError(f"{flag} must be a finite number in {rng}{hint}, got {value!r}")
    return float(value)


def check_executor_options(args: argparse.Namespace) -> None:
    """``--scheduler`` (an address), ``--dask-local`` and ``--connect-timeout``, whether Dask is used or not."""
    scheduler, dask_local = getattr(args, "scheduler", None), getattr(args, "dask_local", None)
    if scheduler is not None and dask_local is not None:
        raise ConfigError("pass either --scheduler tcp://HOST:PORT or --dask-local N, not both")
    if scheduler is not None:
        from npukit.sweeps import check_scheduler_address

        check_scheduler_address(scheduler)
    int_option(dask_local, "--dask-local", 1, MAX_DASK_WORKERS, " (worker processes)")
    float_option(getattr(args, "connect_timeout", None), "--connect-timeout", 0.0, MAX_CONNECT_TIMEOUT_S, lo_open=True,
                 hint=" (seconds)")


def check_common(args: argparse.Namespace, default_out: str | None = None) -> None:
    """The flags every experiment has: ``--out`` (a folder that is or can become writable; nothing is
    created) and the executor flags."""
    from npukit.sim.output import check_out_dir

    out = getattr(args, "out", None)
    out = default_out if out is None else out
    check_out_dir("" if out is None else out)
    check_executor_options(args)
