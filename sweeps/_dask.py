"""The Dask distributed sweep backend: :class:`DaskExecutor`.

Workers only compute; results stream back to this process (the client), which alone writes the
SQLite store. Imported lazily (by :func:`npukit.sweeps.make_executor`), so ``npukit sim`` and a
local sweep never import dask.

Before any work: the scheduler must answer within ``connect_timeout_s`` seconds and have at least
one worker, and every worker must run the client's npukit version (``npukit.__version__``, the
version that is part of every point key), the same Python major.minor and the same dask,
distributed, cloudpickle and msgpack versions; otherwise one :class:`ConfigError` line says what
differs and how to fix it. Each task re-checks the npukit version on the worker that runs it, so a
worker that joins later with another version fails the sweep instead of mixing rows.

A worker that dies mid-task (killed, out of memory) is handled by the scheduler: its tasks are
rerun on other workers (up to ``distributed.scheduler.allowed-failures`` times, default 3); a task
completes once on the client, and the store's ``INSERT OR IGNORE`` on the point key makes a repeat
harmless anyway. If the cluster has no worker at all for ``lost_workers_timeout_s`` seconds while
tasks wait (every worker gone and none restarted), or the scheduler stops answering, the run stops
with one :class:`NpukitError` line instead of waiting forever; the results stored so far are kept.

Security (:mod:`npukit.sim._dask_security`): a LocalCluster npukit starts listens on 127.0.0.1 with TLS and a
certificate made for the run, so no other process can connect and submit code. With ``--scheduler``, the workers
run the code this client sends and the scheduler runs code any of its clients send: pass ``security`` (a
``distributed.security.Security``; the CLI builds it from ``--tls-ca-file/--tls-cert/--tls-key``) or set Dask's
TLS configuration, and use only clusters you control.
"""

from __future__ import annotations

import asyncio
import platform
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError
from typing import Any, TypeVar

from .. import __version__
from ..sim.errors import ConfigError, NpukitError
from ._dask_security import local_security
from ._exec import Executor

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_LOST_WORKERS_TIMEOUT_S = 60.0
_POLL_S = 0.05  # seconds between checks for finished tasks
_WATCH_S = 1.0  # seconds between asks to the scheduler for its workers while nothing finishes
_CHECKED_PACKAGES = ("dask", "distributed", "cloudpickle", "msgpack")
_ADDRESS = re.compile(r"^(?:(tcp|tls|ws|wss|inproc|ucx)://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")


class VersionMismatchError(ConfigError):
    """A Dask worker runs another npukit (or Python/dask) version than the client."""


def normalize_address(address: str) -> str:
    """``HOST:PORT`` or ``PROTO://HOST:PORT`` -> ``PROTO://HOST:PORT`` (tcp by default); ConfigError if malformed."""
    text = address.strip() if isinstance(address, str) else ""
    m = _ADDRESS.match(text)
    if not m or not 0 < int(m.group(3)) < 65536:
        raise ConfigError(
            f"--scheduler {address!r} is not a scheduler address; pass tcp://HOST:PORT (the address 'dask scheduler' prints)"
        )
    return text if m.group(1) else f"tcp://{text}"


def worker_versions() -> dict[str, str | None]:
    """Versions that must agree between client and workers (runs on each worker via ``Client.run``)."""
    from importlib.metadata import PackageNotFoundError, version

    import npukit

    out: dict[str, str | None] = {"npukit": npukit.__version__, "python": ".".join(platform.python_version_tuple()[:2])}
    for pkg in _CHECKED_PACKAGES:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def version_problems(client: dict[str, str | None], workers: dict[str, dict[str, str | None]]) -> list[str]:
    """One text per (package, differing version), packages in the client dict's order (npukit first)."""
    out = []
    for pkg, want in client.items():
        bad: dict[str, list[str]] = {}
        for addr, vers in sorted(workers.items()):
            got = vers.get(pkg) if isinstance(vers, dict) else None
            if got != want:
                bad.setdefault(str(got), []).append(addr)
        for got, addrs in sorted(bad.items()):
            more = f" and {len(addrs) - 1} more" if len(addrs) > 1 else ""
            out.append(f"{pkg} {got} on worker {addrs[0]}{more} but {want} on this client")
    return out


class _Refused:
    """What a task returns instead of raising an :class:`NpukitError` (bad input, not a fault): the worker then logs
    no "Compute Failed" traceback, and :meth:`DaskExecutor.map_unordered` raises ``error`` on the client."""

    def __init__(self, error: NpukitError) -> None:
        self.error = error


def _run_checked(fn: Callable[[T], R], expected_version: str, item: T) -> R | _Refused:
    """Worker side: refuse to compute under another npukit version than the client's (keys hold it); an
    :class:`NpukitError` of ``fn`` comes back as a :class:`_Refused` value, not a worker error with its traceback."""
    import npukit

    try:
        if npukit.__version__ != expected_version:
            raise VersionMismatchError(
                f"Dask worker runs npukit {npukit.__version__} but the client runs {expected_version}; "
                f"install npukit=={expected_version} on every worker"
            )
        return fn(item)
    except NpukitError as exc:
        return _Refused(exc)


class DaskExecutor(Executor):
    """Runs sweep chunks on a Dask cluster: an existing scheduler (``scheduler='tcp://HOST:PORT'``) or a
    :class:`distributed.LocalCluster` of ``local_workers`` processes with one thread each.

    ``connect_timeout_s``: seconds to wait for the scheduler and for its first worker.
    ``inflight``: chunks in flight per worker thread (so a huge sweep is not queued up front).
    ``lost_workers_timeout_s``: seconds the cluster may have no worker at all while tasks wait before
    :meth:`map_unordered` gives up (a LocalCluster restarts a killed worker well within it).
    ``workers`` is the total number of worker threads (used to size chunks).
    """

    def __init__(
        self,
        scheduler: str | None = None,
        local_workers: int | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        inflight: int = 3,
        security: Any = None,
        lost_workers_timeout_s: float = DEFAULT_LOST_WORKERS_TIMEOUT_S,
    ) -> None:
        if (scheduler is None) == (local_workers is None):
            raise ConfigError("pass either a scheduler address (--scheduler tcp://HOST:PORT) or --dask-local N, not both")
        if local_workers is not None and (isinstance(local_workers, bool) or not isinstance(local_workers, int)
                                          or local_workers < 1):
            raise ConfigError(f"--dask-local must be a positive number of worker processes, got {local_workers!r}")
        if not isinstance(connect_timeout_s, int | float) or not connect_timeout_s > 0:
            raise ConfigError(f"--connect-timeout must be a positive number of seconds, got {connect_timeout_s!r}")
        if not isinstance(lost_workers_timeout_s, int | float) or not lost_workers_timeout_s > 0:
            raise ConfigError(f"lost_workers_timeout_s must be a positive number of seconds, got {lost_workers_timeout_s!r}")
        address = normalize_address(scheduler) if scheduler is not None else None
        self.inflight = max(1, inflight)
        self.lost_workers_timeout_s = float(lost_workers_timeout_s)
        self.address = address or "LocalCluster"
        self._cluster: Any = None
        self._client: Any = None
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise ConfigError(f"the Dask backend needs dask and distributed ({exc}); pip install dask distributed") from None
        try:
            if address is None:  # TLS with credentials made for this run: only this process can connect
                self.security = local_security()
                self._cluster = LocalCluster(
                    n_workers=local_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                    host="127.0.0.1", protocol="tls://", security=self.security,
                )
                self._client = Client(self._cluster, security=self.security, set_as_default=False)
                self.address = self._cluster.scheduler_address
            else:
                try:
                    self.security = security
                    self._client = Client(address, timeout=connect_timeout_s, set_as_default=False, security=security)
                except (OSError, TimeoutError) as exc:
                    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ConfigError(
                        f"cannot reach the Dask scheduler at {address} within {connect_timeout_s:g} s ({why}); "
                        f"start one with 'dask scheduler' or fix --scheduler / raise --connect-timeout"
                    ) from None
                try:
                    self._client.wait_for_workers(1, timeout=connect_timeout_s)
                except (OSError, TimeoutError):
                    raise ConfigError(
                        f"the Dask scheduler at {address} has no workers after {connect_timeout_s:g} s; "
                        f"start some with 'dask worker {address}'"
                    ) from None
            self.check_versions()
            self.workers = max(1, sum(self._client.nthreads().values()))
        except BaseException:
            self.close()
            raise

    def versions(self) -> dict[str, dict[str, str | None]]:
        """:func:`worker_versions` of every worker, by worker address."""
        try:
            return self._client.run(worker_versions)
        except Exception as exc:  # the worker could not even load npukit
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise VersionMismatchError(
                f"the Dask workers at {self.address} cannot run npukit's version check ({type(exc).__name__}: {why}); "
                f"install npukit=={__version__} on every worker"
            ) from None

    def check_versions(self) -> None:
        """ConfigError naming the first mismatch between this client and any worker (see module doc)."""
        problems = version_problems(worker_versions(), self.versions())
        if problems:
            more = f" (and {len(problems) - 1} more mismatches)" if len(problems) > 1 else ""
            raise VersionMismatchError(
                f"Dask cluster at {self.address}: {problems[0]}{more}; install the client's versions "
                f"(npukit=={__version__}) on every worker, nothing was run"
            )

    @property
    def client(self) -> Any:
        """The :class:`distributed.Client` (None after :meth:`close`)."""
        return self._client

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        if self._client is None:
            raise NpukitError("this DaskExecutor is closed")
        tag = f"npukit-{getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex[:12]}"
        it = enumerate(items)
        pending: set[Any] = set()

        def submit(i: int, item: T) -> Any:
            fut = self._client.submit(_run_checked, fn, __version__, item, key=f"{tag}-{i}", pure=False, retries=0)
            pending.add(fut)
            return fut

        ac = as_completed(loop=self._client.loop)
        try:
            for i, item in it:
                ac.add(submit(i, item))
                if len(pending) >= self.workers * self.inflight:
                    break
            watch = _WorkerWatch(self)
            while not ac.is_empty():
                if not ac.has_ready():
                    watch.check()
                    time.sleep(_POLL_S)
                    continue
                fut = next(ac)
                watch.reset()
                pending.discard(fut)
                try:
                    result = fut.result()
                except KilledWorker as exc:
                    raise NpukitError(
                        f"a sweep task killed every Dask worker that ran it ({exc}); the points it held were not stored, "
                        "rerun to retry them"
                    ) from None
                except (CancelledError, asyncio.CancelledError) as exc:
                    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise NpukitError(
                        f"lost the Dask scheduler at {self.address} mid-run ({why}); results stored so far are kept, "
                        "rerun the same command to compute the missing ones"
                    ) from None
                if isinstance(result, _Refused):
                    raise result.error
                nxt = next(it, None)
                if nxt is not None:
                    ac.add(submit(*nxt))
                yield result
        finally:
            if pending and self._client is not None:
                self._client.cancel(list(pending))

    def close(self) -> None:
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


class _WorkerWatch:
    """While no task finishes, asks the scheduler for its workers (every ``_WATCH_S`` s) and raises
    :class:`NpukitError` once it has had none for ``lost_workers_timeout_s`` s or stops answering."""

    def __init__(self, ex: DaskExecutor) -> None:
        self.ex = ex
        self.next_ask = time.monotonic() + _WATCH_S
        self.none_since: float | None = None

    def reset(self) -> None:
        self.next_ask = time.monotonic() + _WATCH_S
        self.none_since = None

    def check(self) -> None:
        now = time.monotonic()
        if now < self.next_ask:
            return
        self.next_ask = now + _WATCH_S
        try:
            workers = self.ex.client.nthreads()
        except (OSError, TimeoutError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise NpukitError(
                f"lost the Dask scheduler at {self.ex.address} mid-run ({why}); results stored so far are kept, "
                "rerun the same command to compute the missing ones"
            ) from None
        if workers:
            self.none_since = None
            return
        if self.none_since is None:
            self.none_since = now
        elif now - self.none_since >= self.ex.lost_workers_timeout_s:
            raise NpukitError(
                f"the Dask cluster at {self.ex.address} has had no worker for {self.ex.lost_workers_timeout_s:g} s "
                "while tasks wait; results stored so far are kept: start workers and rerun the same command"
            )
