"""Every Dask cluster npukit starts uses TLS with credentials made for that run: a client without them (no
TLS, or another run's certificate) is refused; only the process that started the cluster can submit work.
``--scheduler`` documents that the cluster runs the code it is sent, and takes TLS files."""

from __future__ import annotations

import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("cryptography")

from _cli_util import refused  # noqa: E402

from npukit.cli import main  # noqa: E402
from npukit.sweeps import make_executor  # noqa: E402


def _connects(address: str, **kw) -> bool:
    try:
        with distributed.Client(address, timeout=3, set_as_default=False, **kw) as c:
            c.submit(int, "1").result(timeout=5)
        return True
    except (OSError, TimeoutError, ValueError, TypeError):  # TypeError: tls:// without any TLS context
        return False


@pytest.mark.slow
def test_local_cluster_refuses_clients_without_the_runs_credentials() -> None:
    from distributed.security import Security

    with make_executor(dask_local=1, connect_timeout_s=30) as ex:
        addr = ex.address
        assert addr.startswith("tls://127.0.0.1:"), addr
        host_port = addr.removeprefix("tls://")
        # the starting process can (first: a refused client may leave distributed's IO-loop runner unable to
        # start another client in this process within its 10 s, which would read as a refusal)
        assert _connects(addr, security=ex.security)
        assert not _connects(f"tcp://{host_port}")  # plain TCP: the scheduler speaks TLS only
        assert not _connects(addr)  # no credentials at all
        assert not _connects(addr, security=Security.temporary())  # another run's credentials


def test_scheduler_help_says_it_runs_code_and_takes_tls(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("--tls-ca-file", "--tls-cert", "--tls-key", "can run code", "TLS"):
        assert needle in text, needle


def test_partial_tls_files_are_one_line(tmp_path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n')
    refused(["sweep", str(spec), "--scheduler", "tls://127.0.0.1:1", "--tls-cert", str(spec),
             "--out", str(tmp_path / "o")], capsys, "--tls-ca-file")
    refused(["sweep", str(spec), "--dask-local", "1", "--tls-key", str(spec), "--out", str(tmp_path / "o")],
            capsys, "--dask-local")
    assert not (tmp_path / "o").exists()
