"""Malformed ZigZag hardware and mapping YAMLs: one ConfigError naming the field (exit 2 from the CLI, nothing
written), never a traceback; the bundled files still load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from npukit.sim.errors import ConfigError
from npukit.sim.zigzag_io import load_zigzag_hardware, load_zigzag_mapping

ROOT = Path(__file__).resolve().parents[1]
TPU = (ROOT / "examples" / "zigzag" / "hardware" / "tpu_like.yaml").read_text()


def _hw(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hw.yaml"
    p.write_text(text)
    return p


def _oa(extra: str) -> str:
    """tpu_like.yaml with ``extra`` lines added at the top of its operational_array."""
    assert TPU.count("operational_array:") == 1
    return TPU.replace("operational_array:", "operational_array:\n" + extra, 1)


HARDWARE = {
    "operational_array is a number": (re.sub(r"operational_array:.*", "operational_array: 5\n", TPU, flags=re.S),
                                      "operational_array must be a mapping"),
    "memories is a list": (TPU.replace("memories:", "memories: [1]\nold_memories:", 1), "memories must be a mapping"),
    "an in-memory-computing array": (_oa("  is_imc: True\n  imc_type: analog"), "in-memory-computing"),
    "a zero-bit input precision": (_oa("  input_precision: [0, 8]"), "input_precision[0]"),
    "one input precision": (_oa("  input_precision: 8"), "input_precision must be a list"),
    "a fractional array size": (TPU.replace("sizes: [32, 32]", "sizes: [32.5, 32]", 1), "must be an integer"),
    "a dimension named twice": (TPU.replace("\n  dimensions: [D1, D2]", "\n  dimensions: [D1, D1]", 1), "twice"),
    "an unknown operand": (TPU.replace("operands: [I2]", "operands: [I9]", 1), "unknown operand 'I9'"),
    "operands as a string": (TPU.replace("operands: [I2]", "operands: I2", 1), "operands must be a list"),
    "an unknown systolic dimension": (TPU.replace("systolic_dimensions: [D1, D2]", "systolic_dimensions: [D1, D7]", 1),
                                      "systolic dimension 'D7'"),
    "an allocation that is a number": (TPU.replace("- I2, tl", "- 7", 1), "an allocation is 'OPERAND, direction'"),
    "ports as a mapping": (TPU.replace("ports:", "ports: {}\n    old_ports:", 1), "ports must be a list"),
}


@pytest.mark.parametrize("case", sorted(HARDWARE))
def test_a_malformed_hardware_file_is_refused_naming_the_field(case: str, tmp_path: Path) -> None:
    text, needle = HARDWARE[case]
    assert text != TPU
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_zigzag_hardware(_hw(tmp_path, text))


MAPPING = {
    "a zero factor": ("- name: default\n  spatial_mapping:\n    D1:\n      - K, 0\n", "must be an integer >= 1"),
    "a negative factor": ("- name: default\n  spatial_mapping:\n    D1:\n      - K, -4\n", "must be an integer >= 1"),
    "a fractional factor": ("- name: default\n  spatial_mapping:\n    D1:\n      - K, 4.5\n", "must be an integer >= 1"),
    "a huge factor": ("- name: default\n  spatial_mapping:\n    D1:\n      - K, " + "9" * 30 + "\n", "out of range"),
    "an unrolling as a list": ("- name: default\n  spatial_mapping:\n    D1:\n      - [K, 4]\n", "'LOOP, FACTOR'"),
    "spatial_mapping as a list": ("- name: default\n  spatial_mapping: [1, 2]\n", "spatial_mapping must be a mapping"),
    "an entry that is a number": ("- 5\n", "must be a mapping"),
    "a dimension that is a number": ("- name: default\n  spatial_mapping:\n    D1: 5\n", "D1 must be a list"),
}


@pytest.mark.parametrize("case", sorted(MAPPING))
def test_a_malformed_mapping_file_is_refused_naming_the_field(case: str, tmp_path: Path) -> None:
    text, needle = MAPPING[case]
    p = tmp_path / "map.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_zigzag_mapping(p)


def test_the_cli_refuses_them_in_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from _cli_util import refused

    hw = _hw(tmp_path, HARDWARE["operational_array is a number"][0])
    refused(["sim", "--arch", f"zigzag:{hw}", "--workload", "gemm:M=8,N=8,K=8", "--out", str(tmp_path / "o")],
            capsys, "operational_array must be a mapping")
    good = _hw(tmp_path, TPU)
    bad_map = tmp_path / "map.yaml"
    bad_map.write_text(MAPPING["a zero factor"][0])
    refused(["sim", "--arch", f"zigzag:{good},{bad_map}", "--workload", "gemm:M=8,N=8,K=8", "--out",
             str(tmp_path / "o")], capsys, "the factor of K must be an integer >= 1")
    assert not (tmp_path / "o").exists()


def test_a_key_written_twice_warns_and_the_last_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hw = load_zigzag_hardware(_hw(tmp_path, _oa("  unit_energy: 9")))
    assert hw.array.unit_energy_pj == pytest.approx(0.04)  # the file's later unit_energy, as ZigZag's parser keeps
    err = capsys.readouterr().err
    assert "'unit_energy' is written twice" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples" / "zigzag" / "hardware").glob("*.yaml")))
def test_the_bundled_files_still_load(name: str) -> None:
    hw = load_zigzag_hardware(ROOT / "examples" / "zigzag" / "hardware" / name)
    assert hw.array.units > 0 and hw.memories
    mapping = ROOT / "examples" / "zigzag" / "mapping" / name
    if mapping.exists():
        assert load_zigzag_mapping(mapping)


def test_a_stream_core_files_warnings_are_returned_not_printed(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from npukit.sim.stream_io import load_stream_hardware

    src = ROOT / "tests" / "data" / "stream_hw"
    shutil.copytree(src / "cores", tmp_path / "cores")
    shutil.copy(src / "eyeriss_like_dual_core.yaml", tmp_path)
    core = tmp_path / "cores" / "eyeriss_like.yaml"
    text = core.read_text()
    assert "operational_array:" in text
    core.write_text(text.replace("operational_array:", "operational_array:\n  leakage: 3", 1))
    lines: list[str] = []
    load_stream_hardware(tmp_path / "eyeriss_like_dual_core.yaml", warnings=lines)
    assert capsys.readouterr().err == ""
    assert "warning: eyeriss_like.yaml: operational_array.leakage is not modelled by npukit (ignored)" in lines
