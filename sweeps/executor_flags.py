"""The executor flags every long-running verb shares (``--scheduler``, ``--dask-local``, ``--connect-timeout``):
added to a parser by :func:`add_executor_arguments`, turned into an executor by :func:`executor_from_args`.

Used by ``npukit sweep`` and every ``npukit experiment``, and by the experiments' own entry points, so
it lives in the library rather than in the CLI.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..sim.errors import ConfigError

if TYPE_CHECKING:
    from . import Executor


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """The Dask backend flags (``--scheduler``, ``--dask-local``, ``--connect-timeout``), shared by
    ``npukit sweep`` and every ``npukit experiment``; read back by :func:`executor_from_args`."""
    g = p.add_argument_group("Dask backend (instead of the local process pool)")
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="run on an existing Dask cluster (the address 'dask scheduler' prints); results come back here. "
                   "Its workers run the code this command sends, and anyone who can reach the scheduler can run code "
                   "on them: use a cluster you control, with TLS (tls://HOST:PORT and --tls-ca-file/--tls-cert/"
                   "--tls-key, or Dask's distributed.comm.tls configuration)")
    g.add_argument("--tls-ca-file", dest="tls_ca_file", default=None, metavar="PEM",
                   help="with --scheduler tls://...: the CA certificate of the cluster")
    g.add_argument("--tls-cert", dest="tls_cert", default=None, metavar="PEM", help="with --scheduler: this client's certificate")
    g.add_argument("--tls-key", dest="tls_key", default=None, metavar="PEM", help="with --scheduler: this client's private key")
    g.add_argument("--dask-local", dest="dask_local", type=int, default=None, metavar="N",
                   help="start a Dask LocalCluster of N worker processes (1 thread each) on this machine, on 127.0.0.1 "
                   "with TLS and credentials made for this run (no other process can connect)")
    g.add_argument("--connect-timeout", dest="connect_timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the scheduler and its first worker before giving up (default 10)")


def executor_from_args(args: argparse.Namespace, local_workers: int | None = None) -> Executor:
    """The executor of the parsed flags (:func:`npukit.sweeps.make_executor`): Dask when ``--scheduler``
    or ``--dask-local`` is given (connected and version-checked now, before any work), else the local
    backend with ``args.workers`` (when the parser has ``--workers``) or ``local_workers`` (default:
    CPU count; 1 = in-process)."""
    from ._exec import make_executor

    scheduler, dask_local = getattr(args, "scheduler", None), getattr(args, "dask_local", None)
    workers = getattr(args, "workers", None)
    if workers is None and scheduler is None and dask_local is None:
        workers = local_workers
    from ._dask_security import security_from_files

    tls = (getattr(args, "tls_ca_file", None), getattr(args, "tls_cert", None), getattr(args, "tls_key", None))
    if any(tls) and scheduler is None:
        raise ConfigError("--tls-ca-file/--tls-cert/--tls-key go with --scheduler; --dask-local makes its own credentials")
    security = security_from_files(*tls) if scheduler is not None else None
    return make_executor(scheduler=scheduler, dask_local=dask_local, workers=workers,
                         connect_timeout_s=getattr(args, "connect_timeout", 10.0), security=security)


def check_scheduler_address(address: str) -> str:
    """``address`` as a Dask scheduler address (``tcp://HOST:PORT``), or :class:`ConfigError` with one line;
    checked without importing or connecting to Dask."""
    from ._dask import normalize_address

    return normalize_address(address)
