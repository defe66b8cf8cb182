"""Executors: where sweep work runs. The sweep hands an executor chunks of points and a picklable
function; the executor yields each chunk's result as soon as it is done, in any order.

:class:`SerialExecutor` runs in the calling process; :class:`LocalPoolExecutor` runs a
``concurrent.futures.ProcessPoolExecutor``; ``npukit.sweeps._dask.DaskExecutor`` runs on a Dask
cluster (imported only by :func:`make_executor` when asked for). Another backend only has to
implement :meth:`Executor.map_unordered` (and optionally :meth:`Executor.close`); :meth:`Executor.map`
(results in item order, for callers that merge them) is built on it.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from ..sim.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")


MAX_WORKERS = 256  # local worker processes at most: each is a forked Python (a fork bomb above)


class Executor:
    """Interface of a sweep backend. ``workers`` is the number of parallel workers (for chunking)."""

    workers: int = 1

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """Yield ``fn(item)`` for every item, in completion order. ``fn`` and items must pickle."""
        raise NotImplementedError

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(item) for item in items]`` in item order, whichever order the work completes in."""
        items = list(items)
        out: list[Any] = [None] * len(items)
        for i, r in self.map_unordered(functools.partial(_call_indexed, fn), enumerate(items)):
            out[i] = r
        return out

    def close(self) -> None:
        """Release workers (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_indexed(fn: Callable[[T], R], job: tuple[int, T]) -> tuple[int, R]:
    """``(i, fn(item))`` of an enumerated item (top level, so it pickles for pools and Dask)."""
    return job[0], fn(job[1])


class SerialExecutor(Executor):
    """Runs every item in the calling process, in order."""

    workers = 1

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        for item in items:
            yield fn(item)


class LocalPoolExecutor(Executor):
    """A process pool on this machine. At most ``workers * inflight`` items are submitted at once,
    so a huge sweep does not queue every chunk up front. ``start_method``: ``fork``, ``forkserver``
    or ``spawn``; default :func:`default_start_method`."""

    def __init__(self, workers: int, start_method: str | None = None, inflight: int = 3) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
            raise ConfigError(f"workers must be an integer from 1 to {MAX_WORKERS}, got {workers!r}")
        if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
            known = ", ".join(multiprocessing.get_all_start_methods())
            raise ConfigError(f"start method '{start_method}' is not available here; use one of {known}")
        self.workers = workers
        self.inflight = max(1, inflight)
        self.start_method = start_method
        self._pool: ProcessPoolExecutor | None = None

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:  # the start method is picked now: threads may have started since __init__
            ctx = multiprocessing.get_context(self.start_method or default_start_method())
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx, initializer=_watch_parent, initargs=(os.getpid(),)
            )
        return self._pool

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        pool = self._get_pool()
        it = iter(items)
        pending: set[Future[Any]] = set()
        try:
            for item in it:
                pending.add(pool.submit(fn, item))
                if len(pending) >= self.workers * self.inflight:
                    break
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    nxt = next(it, _END)
                    if nxt is not _END:
                        pending.add(pool.submit(fn, nxt))
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


_END = object()


def _watch_parent(parent_pid: int, interval_s: float = 0.5) -> None:
    """Worker initializer: a daemon thread that ends this worker once its parent is gone (killed
    with SIGKILL, say), since a worker blocked on the task queue would otherwise wait forever."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(interval_s)

    threading.Thread(target=watch, name="npukit-parent-watch", daemon=True).start()


def default_start_method() -> str:
    """``fork`` (workers start in milliseconds) when available and this process runs a single Python
    thread, else ``spawn`` (forking a multi-threaded process can deadlock the child)."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def local_executor(workers: int | None = None, start_method: str | None = None) -> Executor:
    """The default backend: :class:`SerialExecutor` for one worker, else :class:`LocalPoolExecutor`
    (``workers`` defaults to ``os.cpu_count()``)."""
    n = min(os.cpu_count() or 1, MAX_WORKERS) if workers is None else workers  # a 384-CPU host: 256
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}; pass --workers 1 or more")
    return SerialExecutor() if n == 1 else LocalPoolExecutor(n, start_method)


def make_executor(
    scheduler: str | None = None,
    dask_local: int | None = None,
    workers: int | None = None,
    connect_timeout_s: float = 10.0,
    security: Any = None,
) -> Executor:
    """The executor the common CLI flags ask for: ``scheduler`` (``tcp://HOST:PORT`` of an existing Dask
    scheduler) or ``dask_local`` (a Dask LocalCluster of that many worker processes, one thread each)
    give a :class:`~npukit.sweeps._dask.DaskExecutor` (connected and version-checked before it is
    returned; ``connect_timeout_s`` seconds at most for the scheduler and its first worker); neither
    gives :func:`local_executor` (``workers``). Dask is imported only in the first two cases. The caller
    closes the executor (or uses it as a context manager). The LocalCluster's workers start by spawn,
    so a script that asks for ``dask_local`` must do so under ``if __name__ == "__main__":``. A LocalCluster
    always uses TLS with credentials made for the run; ``security`` (a ``distributed.security.Security``) is
    used to reach ``scheduler`` (None: Dask's configuration)."""
    if scheduler is not None and dask_local is not None:
        raise ConfigError("pass either --scheduler tcp://HOST:PORT or --dask-local N, not both")
    if workers is not None and (scheduler is not None or dask_local is not None):
        raise ConfigError("--workers sizes the local process pool only; with Dask, the cluster's workers run the sweep")
    if scheduler is None and dask_local is None:
        return local_executor(workers)
    from ._dask import DaskExecutor

    return DaskExecutor(scheduler=scheduler, local_workers=dask_local, connect_timeout_s=connect_timeout_s,
                        security=security)
