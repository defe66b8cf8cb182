"""Bad options of ``npukit experiment NAME`` and ``npukit demo``, by class, across every verb.

Each class (an empty, file or unwritable --out, an unknown name, a bad number: negative, zero, NaN,
Inf, huge; the executor flags) must give exit 2, one line on stderr, no traceback, and nothing
created: the options are checked before any work. To prove "before any work", creating the output
folder is made to fail the test (every verb creates it first, once its options are checked), and the
weights cache points into an empty folder that must stay empty.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import npukit._cli_demo
import npukit._cli_sim  # imported here, not first under the patch below (it would keep the patched name)
import npukit.sim
import npukit.sim.output
from npukit.cli import main

EXPERIMENTS = ("psumquant", "omnimoe", "cacheedit")
VERBS = [("experiment", e) for e in EXPERIMENTS] + [("demo",)]


@pytest.fixture(autouse=True)
def _no_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def refuse(*_a, **_k):
        raise AssertionError("work started: the output folder was created before a bad option was found")

    for mod in (npukit.sim, npukit.sim.output, npukit._cli_demo, npukit._cli_sim):
        monkeypatch.setattr(mod, "prepare_out_dir", refuse)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(cache))
    return cache


def _fails_cleanly(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], *, expect: str) -> None:
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own usage errors (choices, types)
        rc = exc.code
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, (argv, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert expect in err, err
    assert "wrote" not in captured.out
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing created anywhere


def _argv(verb: tuple[str, ...], *opts: str) -> list[str]:
    return [*verb, *(["--quick"] if verb[0] == "experiment" else []), *opts]


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v[-1])
@pytest.mark.parametrize("kind", ["empty", "file", "under-a-file", "unwritable"])
def test_bad_out(tmp_path: Path, capsys, verb, kind: str) -> None:
    f = tmp_path / "a_file"
    f.write_text("x")
    if kind == "unwritable":
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        out, expect = str(ro / "out"), "not writable"
    else:
        out, expect = {"empty": ("", "--out is empty"), "file": (str(f), "is not a folder"),
                       "under-a-file": (str(f / "sub"), "is not a folder")}[kind]
    _fails_cleanly(_argv(verb, "--out", out), tmp_path, capsys, expect=expect)


@pytest.mark.parametrize("verb,opts,expect", [
    (("demo",), ["--arch", "nosuch"], "arch file 'nosuch' does not exist"),
    (("experiment", "cacheedit"), ["--arch", "nosuch"], "'nosuch' is neither a built-in (npu128, npu32, quad128"),
    (("experiment", "psumquant"), ["--arch", "nosuch"], "'nosuch' is neither a built-in (npu128, npu32, quad128"),
    (("experiment", "psumquant"), ["--arch", "quad128"], "quad128 is a multi-core chip; the psum study runs on one"),
    (("experiment", "omnimoe"), ["--arch", ""], "an arch must be a name or a file, got ''"),  # not the default
    (("experiment", "psumquant"), ["--arch", ""], "an arch must be a name or a file, got ''"),
    (("experiment", "cacheedit"), ["--arch", "zigzag:hw.yaml"], "only `npukit sim` runs"),
    (("experiment", "psumquant"), ["--arch", "zigzag:hw.yaml"], "only `npukit sim` runs"),
    (("experiment", "omnimoe"), ["--arch", "nosuch"], "'nosuch' is neither a built-in (npu128, npu32, quad128"),
    (("sim",), ["--arch", "quad12", "--workload", "gemm:M=8,N=8,K=8"], "quad128, hetero4, tpu_v4"),  # a typo'd preset
    (("experiment", "psumquant"), ["--policies", "static,bogus"], "--policies: 'bogus' is not one of"),
    (("experiment", "psumquant"), ["--psum-buffer-bits", "7"], "--psum-buffer-bits: '7' is not one of"),
    (("experiment", "psumquant"), ["--psum-buffer-bits", ""], "--psum-buffer-bits is empty"),
], ids=lambda v: "-".join(v) if isinstance(v, list | tuple) else None)
def test_unknown_name(tmp_path: Path, capsys, verb, opts, expect) -> None:
    _fails_cleanly(_argv(verb, "--out", str(tmp_path / "o"), *opts), tmp_path, capsys, expect=expect)


BAD_NUMBERS = [  # (experiment, flag, value): negative, zero, NaN, Inf, huge, out of the model's range
    *[("cacheedit", f, v) for f in ("--images", "--rounds") for v in ("0", "-1", "1000000000")],
    ("cacheedit", "--steps", "1"), ("cacheedit", "--steps", "3"), ("cacheedit", "--steps", "1000000"),
    ("cacheedit", "--threads", "-1"), ("cacheedit", "--threads", "100000"),
    ("cacheedit", "--seed", "-1"), ("cacheedit", "--seed", str(2**40)),
    *[("omnimoe", "--steps", v) for v in ("0", "-3", "1000000000")],
    *[("omnimoe", "--threads", v) for v in ("0", "-1", "100000")],
    *[(e, "--connect-timeout", v) for e in EXPERIMENTS for v in ("nan", "inf", "0", "-1", "1e9")],
    *[(e, "--dask-local", v) for e in EXPERIMENTS for v in ("0", "-2", "100000")],
]


@pytest.mark.parametrize("exp,flag,value", BAD_NUMBERS, ids=[f"{e}{f}={v}" for e, f, v in BAD_NUMBERS])
def test_bad_number(tmp_path: Path, capsys, exp: str, flag: str, value: str) -> None:
    _fails_cleanly(["experiment", exp, "--quick", "--out", str(tmp_path / "o"), f"{flag}={value}"], tmp_path, capsys,
                   expect=flag)


@pytest.mark.parametrize("exp", EXPERIMENTS)
@pytest.mark.parametrize("opts,expect", [
    (["--scheduler", "not an address"], "is not a scheduler address"),
    (["--scheduler", "host:99999"], "is not a scheduler address"),
    (["--scheduler", "tcp://127.0.0.1:1", "--dask-local", "2"], "not both"),
], ids=["garbage", "port", "both"])
def test_bad_executor_flags(tmp_path: Path, capsys, exp: str, opts, expect: str) -> None:
    _fails_cleanly(["experiment", exp, "--quick", "--out", str(tmp_path / "o"), *opts], tmp_path, capsys, expect=expect)


def test_energy_only_still_checks_out(tmp_path: Path, capsys) -> None:
    _fails_cleanly(["experiment", "psumquant", "--energy-only", "--out", ""], tmp_path, capsys, expect="--out is empty")


@pytest.mark.parametrize("verb", [("experiment", "psumquant"), ("demo",)], ids=lambda v: v[-1])
def test_unusable_weights_cache(tmp_path: Path, capsys, monkeypatch, verb) -> None:
    f = tmp_path / "a_file"
    f.write_text("x")
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(f))
    _fails_cleanly(_argv(verb, "--out", str(tmp_path / "o")), tmp_path, capsys, expect="NPUKIT_CACHE_DIR")
