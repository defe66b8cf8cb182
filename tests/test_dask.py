"""The Dask sweep backend on a real LocalCluster (2 worker processes, 1 thread each): equal results to
the local backend, a worker killed mid-task, the client killed and resumed, an unreachable scheduler,
a version mismatch between client and workers, the experiment flags."""

from __future__ import annotations

import functools
import os
import signal
import socket
import sqlite3
import sys
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

import npukit  # noqa: E402
from npukit.cli import build_parser, main  # noqa: E402
from npukit.sim import ConfigError  # noqa: E402
from npukit.sweeps import Executor, expand_points, load_sweep_spec, make_executor, read_rows, run_points, run_sweep  # noqa: E402
from npukit.sweeps._dask import DaskExecutor, VersionMismatchError, version_problems, worker_versions  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_sweep import BIG, kept_keys, killed_midway, write_spec  # noqa: E402

pytestmark = pytest.mark.slow  # end-to-end runs; deselect with -m 'not slow'

SKIP = {"wall_s", "created_at"}


def strip(rows: list[dict]) -> dict[str, dict]:
    return {r["key"]: {k: v for k, v in r.items() if k not in SKIP} for r in rows}


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The small spec swept in-process: the rows every backend must reproduce."""
    folder = tmp_path_factory.mktemp("ref")
    spec = write_spec(folder)
    run_sweep(spec, folder / "ref.sqlite", workers=1)
    return spec, strip(read_rows(folder / "ref.sqlite"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_worker_version(cluster, version: str) -> None:
    with distributed.Client(cluster, set_as_default=False) as c:
        c.run(setattr, npukit, "__version__", version)


# ------------------------------------------------------------------------------ results
def test_dask_rows_equal_local_rows(cluster, reference, tmp_path):
    spec, ref = reference
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
        assert ex.workers == 2
        s = run_sweep(spec, tmp_path / "d.sqlite", executor=ex)
    assert (s.computed, s.present) == (72, 0)
    rows = read_rows(tmp_path / "d.sqlite")
    assert strip(rows) == ref
    assert {r["npukit_version"] for r in rows} == {npukit.__version__}


class KillOnce(Executor):
    """Wraps an executor so that the first task to run kills its own worker process (SIGKILL) mid-task."""

    def __init__(self, inner: Executor, marker: Path) -> None:
        self.inner, self.marker, self.workers = inner, marker, inner.workers

    def map_unordered(self, fn, items):
        return self.inner.map_unordered(functools.partial(_kill_once, str(self.marker), fn), items)


def _kill_once(marker: str, fn, item):
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return fn(item)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def test_worker_killed_mid_task_every_point_once(cluster, reference, tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    spec, ref = reference
    marker = tmp_path / "killed.pid"
    db = tmp_path / "k.sqlite"
    try:
        with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
            before = set(ex.client.run(os.getpid).values())
            s = run_sweep(spec, db, executor=KillOnce(ex, marker))
            ex.client.wait_for_workers(2, timeout=30)
            after = set(ex.client.run(os.getpid).values())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    killed = int(marker.read_text())
    assert killed in before and killed not in after  # a worker really died, and the nanny replaced it
    assert s.computed == 72
    con = sqlite3.connect(db)
    keys = [r[0] for r in con.execute("SELECT key FROM points")]
    con.close()
    assert len(keys) == len(set(keys)) == 72
    assert strip(read_rows(db)) == ref


def test_client_killed_then_rerun_computes_only_missing(cluster, tmp_path):
    spec = write_spec(tmp_path, BIG)
    expected = {p.key for p in expand_points(load_sweep_spec(spec))}
    out = tmp_path / "out"
    db = out / "sweep.sqlite"
    cmd = [sys.executable, "-m", "npukit", "sweep", str(spec), "--out", str(out), "--scheduler", cluster.scheduler_address,
           "--no-progress"]
    with killed_midway(cmd, db, 40, timeout=60):
        pass
    kept = kept_keys(db)
    assert 40 <= len(kept) < len(expected) and kept <= expected
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
        summary = run_sweep(spec, db, executor=ex)
    assert (summary.present, summary.computed) == (len(kept), len(expected) - len(kept))
    con = sqlite3.connect(db)
    keys = [r[0] for r in con.execute("SELECT key FROM points")]
    con.close()
    assert len(keys) == len(set(keys)) == len(expected) and set(keys) == expected


def test_cli_dask_local_equals_local(reference, tmp_path, capsys):
    spec, ref = reference
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--dask-local", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "Dask cluster tls://127.0.0.1:" in printed  # TLS with per-run credentials and "2 worker threads" in printed
    assert "72 points, 72 computed now, 0 already present" in printed
    assert strip(read_rows(out / "sweep.sqlite")) == ref


# ------------------------------------------------------------------------------ refused before any work
def test_unreachable_scheduler_is_one_line_exit_2_nothing_written(reference, tmp_path, capsys):
    spec, _ = reference
    addr = f"tcp://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        make_executor(scheduler=addr, connect_timeout_s=1.0)
    assert time.monotonic() - t0 < 8
    msg = str(exc.value)
    assert addr in msg and "cannot reach" in msg and "\n" not in msg
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["sweep", str(spec), "--out", str(out), "--scheduler", addr, "--connect-timeout", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and addr in err
    assert not out.exists()


@pytest.mark.parametrize("bad", ["localhost", "tcp://host", "tcp://host:0", "http://h:1 x", ""])
def test_malformed_scheduler_address(bad):
    with pytest.raises(ConfigError, match="scheduler"):
        make_executor(scheduler=bad)


def test_both_backends_or_workers_with_dask_rejected():
    with pytest.raises(ConfigError, match="not both"):
        make_executor(scheduler="tcp://127.0.0.1:1", dask_local=2)
    with pytest.raises(ConfigError, match="--workers"):
        make_executor(dask_local=2, workers=3)
    with pytest.raises(ConfigError, match="--dask-local"):
        make_executor(dask_local=0)


def test_version_mismatch_refused_before_any_work(cluster, reference, tmp_path, capsys):
    spec, _ = reference
    out = tmp_path / "out"
    set_worker_version(cluster, "0.0.0+other")
    try:
        with pytest.raises(VersionMismatchError) as exc:
            DaskExecutor(scheduler=cluster.scheduler_address)
        msg = str(exc.value)
        assert "npukit 0.0.0+other on worker" in msg and f"but {npukit.__version__} on this client" in msg and "\n" not in msg
        capsys.readouterr()
        assert main(["sweep", str(spec), "--out", str(out), "--scheduler", cluster.scheduler_address]) == 2
        assert "0.0.0+other" in capsys.readouterr().err
        assert not out.exists()
    finally:
        set_worker_version(cluster, npukit.__version__)


def test_worker_changing_version_mid_sweep_stores_nothing_from_it(cluster, reference, tmp_path):
    spec, _ = reference
    db = tmp_path / "v.sqlite"
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:  # passes the up-front check
        set_worker_version(cluster, "0.0.0+late")
        try:
            with pytest.raises(VersionMismatchError, match="0.0.0\\+late"):
                run_sweep(spec, db, executor=ex)
        finally:
            set_worker_version(cluster, npukit.__version__)
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM points").fetchone()[0] == 0
    con.close()


def test_version_problems_names_each_mismatch():
    mine = worker_versions()
    other = dict(mine, python="3.99", dask="1.0.0")
    probs = version_problems(mine, {"tcp://a:1": dict(mine), "tcp://b:2": other, "tcp://c:3": other})
    assert probs == [f"python 3.99 on worker tcp://b:2 and 1 more but {mine['python']} on this client",
                     f"dask 1.0.0 on worker tcp://b:2 and 1 more but {mine['dask']} on this client"]
    assert version_problems(mine, {"tcp://a:1": dict(mine)}) == []


# ------------------------------------------------------------------------------ experiments and imports
def test_experiment_flags_for_every_experiment():
    parser = build_parser()
    for name in ("psumquant", "omnimoe", "cacheedit"):
        args = parser.parse_args(["experiment", name, "--scheduler", "tcp://127.0.0.1:8786", "--connect-timeout", "3"])
        assert (args.scheduler, args.dask_local, args.connect_timeout) == ("tcp://127.0.0.1:8786", None, 3.0)
        assert parser.parse_args(["experiment", name, "--dask-local", "2"]).dask_local == 2


def test_omnimoe_model_grid_on_dask_equals_serial(cluster):
    from npukit.experiments.omnimoe._sweeps import centric_model_sweep

    kw = dict(experts=[256, 1024, 4096], tokens=[64, 256], hidden=128, k=8, npu_max_pairs=1 << 12)
    serial = centric_model_sweep(**kw)
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
        dask_rows = centric_model_sweep(**kw, executor=ex)
    assert [(r["tokens"], r["experts"]) for r in serial] == [(T, N) for T in (64, 256) for N in (256, 1024, 4096)]
    assert dask_rows == serial
    assert "npu_token_over_expert_cycles" in serial[0]


def test_run_points_on_dask_skips_present_points(cluster, reference, tmp_path):
    spec, _ = reference
    points = expand_points(load_sweep_spec(spec))
    db = tmp_path / "p.sqlite"
    run_points(points[:30], db, workers=1)
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
        s = run_points(points, db, executor=ex)
    assert (s.present, s.computed) == (30, len(points) - 30)


def test_executor_from_experiment_flags(cluster):
    from npukit.sweeps import SerialExecutor
    from npukit.sweeps.executor_flags import executor_from_args

    parser = build_parser()
    args = parser.parse_args(["experiment", "omnimoe", "--scheduler", cluster.scheduler_address])
    with executor_from_args(args, local_workers=1) as ex:
        assert isinstance(ex, DaskExecutor) and ex.workers == 2
    assert isinstance(executor_from_args(parser.parse_args(["experiment", "omnimoe"]), local_workers=1), SerialExecutor)
    addr = f"127.0.0.1:{free_port()}"
    unreachable = parser.parse_args(["experiment", "omnimoe", "--scheduler", addr, "--connect-timeout", "0.5"])
    with pytest.raises(ConfigError, match="cannot reach"):
        executor_from_args(unreachable, local_workers=1)


def test_scheduler_lost_mid_sweep_is_one_line_and_rerun_completes(cluster, tmp_path):
    from npukit.sim import NpukitError

    spec = write_spec(tmp_path, BIG)
    expected = {p.key for p in expand_points(load_sweep_spec(spec))}
    db = tmp_path / "lost.sqlite"
    doomed = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                      dashboard_address=":0")
    stored = []

    def progress(n, total):
        stored.append(n)
        if sum(stored) > 0 and doomed.status.name == "running":
            doomed.close()  # the scheduler goes away after the first chunk is stored

    try:
        with DaskExecutor(scheduler=doomed.scheduler_address, connect_timeout_s=5) as ex:
            with pytest.raises(NpukitError) as exc:
                run_sweep(spec, db, executor=ex, progress=progress)
    finally:
        doomed.close()
    msg = str(exc.value)
    assert "lost the Dask scheduler" in msg and "rerun" in msg and "\n" not in msg
    con = sqlite3.connect(db)
    kept = {r[0] for r in con.execute("SELECT key FROM points")}
    con.close()
    assert 0 < len(kept) < len(expected)
    with DaskExecutor(scheduler=cluster.scheduler_address) as ex:
        s = run_sweep(spec, db, executor=ex)
    assert (s.present, s.computed) == (len(kept), len(expected) - len(kept))


def _slow_square(x: int) -> int:
    time.sleep(0.2)
    return x * x


def test_every_worker_gone_stops_with_one_line_instead_of_waiting(tmp_path):
    """A cluster whose workers all leave (and are not restarted) while tasks wait: one NpukitError line
    after ``lost_workers_timeout_s``, not an endless wait."""
    from npukit.sim import NpukitError

    lonely = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                      dashboard_address=":0")
    try:
        with DaskExecutor(scheduler=lonely.scheduler_address, connect_timeout_s=5, lost_workers_timeout_s=1.0) as ex:
            got = []
            t0 = time.monotonic()
            with pytest.raises(NpukitError) as exc:
                for r in ex.map_unordered(_slow_square, range(8)):
                    got.append(r)
                    if len(got) == 1:
                        lonely.scale(0)  # every worker leaves after the first result
            waited = time.monotonic() - t0
    finally:
        lonely.close()
    msg = str(exc.value)
    assert "no worker for 1 s" in msg and "rerun" in msg and "\n" not in msg
    assert 1 <= len(got) < 8
    assert waited < 30


def test_lost_workers_timeout_must_be_positive(cluster):
    with pytest.raises(ConfigError, match="lost_workers_timeout_s"):
        DaskExecutor(scheduler=cluster.scheduler_address, lost_workers_timeout_s=0)
