"""``npukit rtl test --rtl-dir DIR`` (the testbench on a user's Verilog), ``--waves`` and the one default size."""

from __future__ import annotations

import shutil

import pytest

from npukit.cli import build_parser, main
from npukit.rtl import DEFAULT_ARRAY, declared_modules, user_sources
from npukit.rtl._config import source_paths

needs_icarus = pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed")
SHIPPED = ("sram_sp.v", "pe.v", "systolic_array.v", "psum_quantizer.v", "accumulator.v", "npu_top.v")


def _copy(tmp_path, names=SHIPPED, edit=None):
    d = tmp_path / "mine"
    d.mkdir()
    for s in source_paths(names):
        text = s.read_text()
        if edit and s.name == edit[0]:
            assert text.count(edit[1]) == 1
            text = text.replace(edit[1], edit[2])
        (d / s.name).write_text(text)
    return d


def test_one_default_array_size_across_test_stats_and_lint() -> None:
    parser = build_parser("rtl")
    sizes = {cmd: (parser.parse_args(["rtl", cmd]).rows, parser.parse_args(["rtl", cmd]).cols)
             for cmd in ("test", "stats", "lint")}
    assert set(sizes.values()) == {(DEFAULT_ARRAY, DEFAULT_ARRAY)}, sizes


def test_declared_modules_ignore_comments(tmp_path) -> None:
    f = tmp_path / "a.v"
    f.write_text("// module fake_one\n/* module fake_two (\n) */\nmodule npu_top #(parameter R = 1) ();\nendmodule\n")
    assert declared_modules(f) == {"npu_top"}
    assert user_sources(tmp_path) == [f.resolve()]


@pytest.mark.parametrize("setup,msg", [
    (lambda d: None, "holds no Verilog sources"),
    (lambda d: (d / "x.v").write_text("module other;\nendmodule\n"), "no file declares module npu_top"),
    (lambda d: (d / "x.v").write_text("// module npu_top\nmodule other;\nendmodule\n"), "no file declares module npu_top"),
])
def test_rtl_dir_refused_with_one_line_and_nothing_built(tmp_path, capsys, setup, msg) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    setup(d)
    build = tmp_path / "build"
    assert main(["rtl", "test", "--rtl-dir", str(d), "--build-dir", str(build)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert not build.exists()


def test_rtl_dir_missing_folder_refused(tmp_path, capsys) -> None:
    assert main(["rtl", "test", "--rtl-dir", str(tmp_path / "nope"), "--build-dir", str(tmp_path / "b")]) == 2
    assert "is not a folder" in capsys.readouterr().err


@needs_icarus
@pytest.mark.rtl
@pytest.mark.slow
def test_rtl_dir_runs_the_testbench_on_the_users_copy_and_catches_a_bug(tmp_path, capsys) -> None:
    good = _copy(tmp_path)
    out = tmp_path / "waves"
    rc = main(["rtl", "test", "--rtl-dir", str(good), "--m", "5", "--n", "6", "--k", "7", "--quant-samples", "500",
               "--build-dir", str(tmp_path / "b"), "--waves", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "all passed" in text and f"design: {len(SHIPPED)} file(s)" in text and "quantizer" in text
    waves = list(out.glob("*_all.fst"))  # --waves alone traces the whole suite and says where
    assert len(waves) == 1 and f"wrote {waves[0]}" in text and waves[0].stat().st_size > 1000

    bad_root = tmp_path / "bad"
    bad_root.mkdir()
    bad = _copy(bad_root, edit=("accumulator.v", "assign sum = old_x + in_x;", "assign sum = old_x - in_x;"))
    rc = main(["rtl", "test", "--rtl-dir", str(bad), "--m", "5", "--n", "6", "--k", "7", "--quant-samples", "0",
               "--build-dir", str(tmp_path / "b")])
    cap = capsys.readouterr()
    assert rc == 1 and "FAIL" in cap.out
