"""Hostile multi-core arch files and command lines, each refused with one line and nothing written: deep nesting,
entries of the wrong type, numbers beyond any float, too many cores, schedules that overflow, links out of a
Stream chip's folder, an empty arch file; and a name the plot's font lacks, which once hung the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.sim import ConfigError
from npukit.sim.multicore import MAX_CORES, load_multicore_arch

HW = Path(__file__).parent / "data" / "stream_hw"
GEMM = "gemm:M=64,N=64,K=64"
TWO = 'name = "x"\n[[core]]\narch = "npu128"\ncount = 2\n'


@pytest.mark.parametrize("text, needle", [
    (TWO + "[interconnect]\nx = " + "[" * 5000 + "]" * 5000 + "\n", "nests 5,000 levels deep"),
    ('base = "npu128"\nx = ' + "[" * 3000 + "]" * 3000 + "\n", "nests 3,000 levels deep"),  # a single-core file
    ('name = "x"\ncore = [1, 2]\n', "each core must be a [[core]] table"),
    (TWO + f"[shared_memory]\nkib = {10**400}\n", "shared_memory.kib"),
    (TWO + "[shared_memory]\nkib = 1e308\n", "out of range"),
    (TWO + f"[interconnect]\nlatency_cycles = {10**400}\n", "interconnect.latency_cycles"),
    (TWO + f"[dram]\nbandwidth_bytes_per_cycle = {10**400}\n", "dram.bandwidth_bytes_per_cycle"),
    (TWO + f"[dram]\nchannels = {10**30}\n", "dram.channels"),
    (TWO + '[interconnect]\nmulticast = "false"\n', "must be true or false"),
    (TWO + "[interconnect]\nmulticast = 0\n", "must be true or false"),
    (TWO + "[interconnect]\nsource = 5\n", "interconnect.source' must be a string"),
    (TWO + "[interconnect]\ntopology = 3\n", "interconnect.topology"),
    (TWO.replace('name = "x"', "name = {a = 1}"), "'name' must be a string"),
    (TWO + 'name = ["x"]\n', "[[core]] name must be a string"),
    (TWO + "kind = 7\n", "[[core]] kind must be a string"),
    (TWO.replace("count = 2", f"count = {MAX_CORES}") + '[[core]]\narch = "npu128"\ncount = 2\n',
     f"from 1 to {MAX_CORES} cores in all"),
    ("", "sets nothing"),
    ("# only a comment\n", "sets nothing"),
    (TWO + '[[core]]\narch = "npu32"\nkind = "simd"\ncount = 2\n', "has 2 simd cores"),  # the second sat idle
])
def test_a_hostile_arch_file_is_refused_with_one_line(tmp_path, capsys, text, needle) -> None:
    arch = tmp_path / "a.toml"
    arch.write_text(text)
    out = tmp_path / "out"
    refused(["sim", "--arch", str(arch), "--workload", GEMM, "--out", str(out)], capsys, needle)
    assert not out.exists()


@pytest.mark.parametrize("table", ["[interconnect]\nbandwidth_bytes_per_cycle = 1e-300\n",
                                   "[dram]\nbandwidth_bytes_per_cycle = 1e-300\n"])
def test_a_schedule_whose_result_overflows_is_an_error_not_inf(tmp_path, capsys, table) -> None:
    """A link or port of 1e-300 bytes per cycle would give cycles near 1e300 and an EDP of inf: refused, naming it,
    from the API and the CLI alike (it used to write a ledger with Infinity in it; since 2026-12-07 it is refused as
    the arch loads, a rate below 1 / (2^63 - 1))."""
    arch = tmp_path / "a.toml"
    arch.write_text(TWO + table)
    with pytest.raises(ConfigError, match="bandwidth_bytes_per_cycle' = 1e-300 is too small"):
        load_multicore_arch(arch)
    out = tmp_path / "out"
    refused(["sim", "--arch", str(arch), "--workload", GEMM, "--out", str(out)], capsys, "is too small")
    assert not out.exists()


def test_schedule_is_refused_on_a_single_core_arch(tmp_path, capsys) -> None:
    """--schedule, like --layer-cores, is for multi-core archs; on one core it was ignored, even when invalid."""
    for flag in (["--schedule", "bogus"], ["--schedule", "chain/split"]):
        out = tmp_path / "out"
        refused(["sim", "--arch", "npu128", "--workload", GEMM, "--out", str(out), *flag], capsys,
                "is for multi-core archs")
        assert not out.exists()


def test_a_core_file_linked_from_outside_the_chip_folder_is_refused(tmp_path, capsys) -> None:
    """A symbolic link inside the chip's folder to a core YAML outside it: the folder rule holds for where the
    file is, not only for how the chip file names it."""
    d = tmp_path / "hw"
    shutil.copytree(HW, d)
    outside = tmp_path / "elsewhere" / "tpu_like.yaml"
    outside.parent.mkdir()
    shutil.move(d / "cores" / "tpu_like.yaml", outside)
    os.symlink(outside, d / "cores" / "tpu_like.yaml")
    out = tmp_path / "out"
    refused(["sim", "--arch", f"stream:{d / 'tpu_like_quad_core.yaml'}", "--workload", GEMM, "--out", str(out)],
            capsys, "leads outside the chip file's folder")
    assert not out.exists()


def test_a_name_the_font_lacks_does_not_hang_the_cli(tmp_path) -> None:
    """Matplotlib warns once per missing glyph; the CLI showed the warnings it recorded while still recording
    them, so each shown warning was recorded again and the loop never ended (memory grew by 150 MB/s). The run
    must finish, write its files and exit 0."""
    arch = tmp_path / "a.toml"
    arch.write_text(TWO.replace('name = "x"', 'name = "芯片"'))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "npukit.cli", "sim", "--arch", str(arch), "--workload", GEMM,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(out.iterdir())) >= 3
    assert "Glyph" not in proc.stderr  # the boxes are drawn; no warning per missing glyph


def test_control_characters_in_names_are_escaped_on_the_terminal(tmp_path, capsys) -> None:
    """An arch name with an ANSI escape is printed escaped, not sent to the terminal raw."""
    from npukit.cli import main

    arch = tmp_path / "a.toml"
    arch.write_text(TWO.replace('name = "x"', 'name = "a\\u001b[31mred"'))
    assert main(["sim", "--arch", str(arch), "--workload", GEMM, "--out", str(tmp_path / "out"), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "a\\x1b[31mred" in text


@pytest.mark.slow
def test_a_long_arch_name_runs_and_its_ledger_reports(tmp_path) -> None:
    """A 5,000-character arch name: the run writes all four files (the timeline of a fresh result is not put through
    the ledger check, which once refused it after three files were written), and its ledger reports."""
    from npukit.cli import main

    arch = tmp_path / "a.toml"
    arch.write_text(TWO.replace('name = "x"', 'name = "' + "n" * 5000 + '"'))
    out = tmp_path / "out"
    assert main(["sim", "--arch", str(arch), "--workload", GEMM, "--out", str(out), "--quiet"]) == 0
    assert len(list(out.iterdir())) == 4
    ledger = next(out.glob("*.ledger.json"))
    assert main(["report", str(ledger), "--out", str(tmp_path / "report")]) == 0
