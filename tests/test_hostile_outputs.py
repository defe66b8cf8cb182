"""Output by class: every target checked before the first byte (a planted symlink, a folder in a file's
place, a path longer than the OS allows), control characters in names escaped, non-ASCII names on an ASCII
terminal, and a closed pipe (``npukit sim ... | head -1``) ending quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, check_out_dir, check_writable_file
from npukit.sim.terminal import escape_controls

SIM = ["sim", "--arch", "npu32", "--workload", "gemm:M=8,N=8,K=8", "--quiet"]
STEM = "gemm8x8x8_npu32_ws_psum32"


@pytest.mark.parametrize("target", [f"{STEM}.ledger.json", f"{STEM}.csv", "COMPUTE_REPORT.csv"])
@pytest.mark.parametrize("kind", ["symlink-out", "symlink-in", "folder"])
def test_bad_target_refused_before_any_output(target, kind, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "victim.txt"
    if kind == "symlink-out":
        (out / target).symlink_to(outside)
    elif kind == "symlink-in":
        (out / "inside.txt").write_text("keep")
        (out / target).symlink_to(out / "inside.txt")
    else:
        (out / target).mkdir()
    before = sorted(p.name for p in out.iterdir())
    rc = main([*SIM, "--format", "scalesim", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 2 and len(cap.err.strip().splitlines()) == 1, cap.err
    assert cap.out == ""  # not even the results table
    assert sorted(p.name for p in out.iterdir()) == before and not outside.exists()


def test_out_path_longer_than_the_os_allows(tmp_path, capsys) -> None:
    for path in (tmp_path / ("a" * 300), tmp_path.joinpath(*["b" * 200] * 25)):
        refused([*SIM, "--out", str(path)], capsys, "more than the OS allows")
        with pytest.raises(ConfigError, match="OS allows"):
            check_out_dir(path)
        with pytest.raises(ConfigError, match="OS allows"):
            check_writable_file(path / "x.csv", "--csv")
    assert list(tmp_path.iterdir()) == []


def test_control_characters_in_names_are_escaped(tmp_path, capsys) -> None:
    arch = tmp_path / "a.toml"
    arch.write_text('name = "x\\u001b[2Jy\\u0007z\\rw"\nrows = 8\ncols = 8\n')
    topo = tmp_path / "t.csv"
    topo.write_bytes(b"Layer, M, N, K,\nl\x1b]0;pwned\x07, 4, 4, 4,\n")
    assert main(["sim", "--arch", str(arch), "--workload", str(topo), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r"), repr(out)
    assert "x\\x1b[2Jy\\x07z\\x0dw" in out and "l\\x1b]0;pwned\\x07" in out
    assert escape_controls("a\nb\tc\x9b") == "a\nb\\x09c\\x9b"


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npukit.cli", *args], capture_output=True, **kw)


def test_non_ascii_names_on_an_ascii_terminal(tmp_path) -> None:
    arch = tmp_path / "a.toml"
    arch.write_text('name = "café-π"\nrows = 8\ncols = 8\n', encoding="utf-8")
    env = {"PYTHONIOENCODING": "ascii", "PATH": "/usr/bin:/bin", "LANG": "C"}
    r = _run(["sim", "--arch", str(arch), "--workload", "gemm:M=8,N=8,K=8", "--quiet", "--out", str(tmp_path / "o")],
             env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert b"caf\\xe9-\\u03c0" in r.stdout and b"Traceback" not in r.stderr


def test_closed_pipe_ends_quietly(tmp_path) -> None:
    topo = tmp_path / "t.csv"  # ~2,000 table lines: more than a pipe buffer, so writes hit the closed pipe
    topo.write_text("Layer, M, N, K,\n" + "".join(f"layer{i}, 16, 16, 16,\n" for i in range(2000)))
    p = subprocess.Popen([sys.executable, "-m", "npukit.cli", "sim", "--arch", "npu32", "--workload", str(topo),
                          "--out", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline()  # like `| head -1`: read one line, then close
    p.stdout.close()
    err = p.stderr.read() if p.stderr else b""
    rc = p.wait(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert rc in (0, 141)


def test_sweep_database_symlink_refused_before_any_work(tmp_path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.sqlite").symlink_to(tmp_path / "victim.sqlite")
    refused(["sweep", str(spec), "--out", str(out), "--no-progress"], capsys, "symbolic link")
    assert not (tmp_path / "victim.sqlite").exists() and sorted(p.name for p in out.iterdir()) == ["sweep.sqlite"]
