"""Fixes of hunt I (multi-core ``npukit sim`` and ``npukit report`` as a user sees them): non-UTF-8 names escaped
everywhere (sim and report, one core or several), ``meta.ppa`` and ``core_busy_cycles`` checked, ``report --out``
refusing another run's files and ``--overwrite`` dropping the earlier report's own, ``--depth 3`` keeping a
multi-core layer's cycles and energy in one row, and sim refusing a run whose ledger report would call malformed."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, Ledger, LedgerError
from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_meta import check_multicore_meta
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.workload import Layer, Workload

BAD = os.fsdecode(b"caf\xe9")  # 'caf\udce9': a name that is not UTF-8, as Python decodes it
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A small multi-core ledger (two GEMMs, each split over the 4 cores of quad128) as JSON."""
    wl = Workload("w", [Layer("up", 64, 128, 64), Layer("down", 64, 64, 128)])
    return json.loads(simulate_multicore(wl, load_multicore_arch("quad128")).ledger.to_json())


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def _tiny(workload: str = "w", layers: int = 2) -> dict:
    """A hand-made single-core ledger without an arch (two figures per report: quick to report)."""
    led = Ledger(meta={"workload": workload})
    for i in range(layers):
        with led.scope(workload), led.scope(f"l{i}"):
            led.record("pe_array", "mac", (8, 8, 32), 1000 * (i + 1))
            led.add_cycles(40 + i)
    return led.to_dict()


def _gemm_csv(path: Path) -> Path:
    path.write_text("Layer, M, N, K,\nup, 64, 128, 64,\ndown, 64, 64, 128,\n")
    return path


# -- 1: multi-core sim on a workload file whose name is not UTF-8 -----------------------------------------------------


def test_timeline_draws_a_non_utf8_workload_name() -> None:
    from npukit.sim.multicore_report import timeline_from_meta
    from npukit.sim.report_figures import png

    meta = {"core_names": ["c0"], "core_kinds": ["mac"], "arch_name": "chip", "schedule": "none/split",
            "timeline": [(0, 0.0, 10.0, f"layer {BAD}")]}
    assert png(timeline_from_meta(meta, BAD, 10.0)).startswith(PNG_MAGIC)  # a TypeError inside matplotlib before


@pytest.mark.parametrize("arch", ["quad128", "npu128"])
def test_sim_runs_on_a_non_utf8_workload_file_multi_and_single_core(arch: str, tmp_path: Path, capsys) -> None:
    topo = _gemm_csv(tmp_path / f"{BAD}.csv")
    out = tmp_path / "out"
    assert main(["sim", "--arch", arch, "--workload", str(topo), "--out", str(out), "--quiet"]) == 0
    written = [Path(ln.removeprefix("wrote ")) for ln in capsys.readouterr().out.splitlines() if ln.startswith("wrote ")]
    assert written and all(p.is_file() and p.name.isascii() for p in written)
    led = Ledger.load(next(p for p in written if p.name.endswith(".ledger.json")))
    assert led.meta["workload"] == BAD  # kept as it was; a report escapes it (below)


# -- 2: report with non-UTF-8 title, labels, file names and ledger text ------------------------------------------------


def test_report_escapes_non_utf8_title_paths_and_workload(tmp_path: Path, capsys) -> None:
    folder = tmp_path / BAD  # a ledger npukit sim wrote into a folder of that name, from caf\xe9.onnx
    folder.mkdir()
    led = _write(folder / f"{BAD}.ledger.json", _tiny(BAD))  # its file name is the default label (figure titles)
    out = tmp_path / "r"
    assert main(["report", str(led), "--title", f"t {BAD}", "--out", str(out)]) == 0, capsys.readouterr().err
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.startswith("# t caf\\udce9") and "workload caf\\udce9" in md and f"{tmp_path}/caf\\udce9/" in md
    assert "caf\\udce9" in (out / "report.html").read_text(encoding="utf-8")
    assert (out / "energy_per_layer_1.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.slow
def test_report_escapes_non_utf8_labels_on_a_multicore_ledger(tmp_path: Path, multi: dict, capsys) -> None:
    data = copy.deepcopy(multi)
    data["meta"]["workload"] = BAD
    led = _write(tmp_path / "x.ledger.json", data)
    out = tmp_path / "r"
    assert main(["report", str(led), "--labels", BAD, "--out", str(out)]) == 0, capsys.readouterr().err
    assert "## Per layer: caf\\udce9" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "timeline_1.png").read_bytes().startswith(PNG_MAGIC)


def test_report_csv_and_figures_escape_a_non_utf8_scope(tmp_path: Path) -> None:
    from npukit.sim.report import write_report

    led = Ledger(meta={"workload": BAD})
    with led.scope(BAD), led.scope(f"conv_{BAD}"):
        led.record("pe_array", "mac", (8, 8, 32), 1000)
        led.add_cycles(40)
    paths = write_report([led], tmp_path / "r", labels=[BAD], title=BAD)
    assert "conv_caf\\udce9" in paths["per_layer_1.csv"].read_text(encoding="utf-8")


# -- 3: meta.ppa holding a non-number ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["491", None, -1.0, float("inf"), True])
def test_report_refuses_a_ppa_field_that_is_not_a_number(value: object, tmp_path: Path, multi: dict, capsys) -> None:
    data = copy.deepcopy(multi)
    assert isinstance(data["meta"].get("ppa"), dict)
    data["meta"]["ppa"]["area_mm2"] = value
    led = _write(tmp_path / "x.ledger.json", data)
    out = tmp_path / "out"
    refused(["report", str(led), "--out", str(out)], capsys, "meta.ppa.area_mm2 must be a finite number")
    assert not out.exists()


# -- 4: report --out holding another run's files ------------------------------------------------------------------------


def test_report_refuses_to_replace_another_runs_file_unless_overwrite(tmp_path: Path, capsys) -> None:
    led = _write(tmp_path / "x.ledger.json", _tiny())
    out = tmp_path / "out"
    out.mkdir()
    theirs = out / "per_layer_1.csv"  # e.g. npukit sim's CSV of a run whose stem is per_layer_1
    theirs.write_text("name,kind\n")
    refused(["report", str(led), "--out", str(out)], capsys, "refusing to overwrite", "per_layer_1.csv", "--overwrite")
    assert theirs.read_text() == "name,kind\n" and sorted(p.name for p in out.iterdir()) == ["per_layer_1.csv"]
    assert main(["report", str(led), "--out", str(out), "--overwrite"]) == 0
    assert theirs.read_text().startswith("layer,")
    printed = capsys.readouterr().out.splitlines()
    assert f"wrote {out / 'report.manifest.json'}" in printed and all(ln.startswith("wrote ") for ln in printed)


# -- 5: report --overwrite and the earlier report's files ---------------------------------------------------------------


def test_write_document_drops_the_earlier_reports_files_it_does_not_write_again(tmp_path: Path) -> None:
    from npukit.sim.report_render import write_document

    doc = [("h1", "r")]
    first = write_document(tmp_path, doc, {}, {"per_layer_1.csv": b"1", "per_layer_2.csv": b"2", "x_2.png": b"x"},
                           manifest=True)
    (tmp_path / "x_2.png").write_bytes(b"another run")  # rewritten since: kept
    (tmp_path / "mine.csv").write_bytes(b"m")  # never listed: kept
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        write_document(tmp_path, doc, {}, {"per_layer_1.csv": b"1"}, overwrite=False, manifest=True)
    assert first["per_layer_2.csv"].exists()
    write_document(tmp_path, doc, {}, {"per_layer_1.csv": b"1"}, overwrite=True, manifest=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mine.csv", "per_layer_1.csv", "report.html", "report.manifest.json", "report.md", "x_2.png"]


@pytest.mark.slow
def test_overwrite_removes_only_the_earlier_reports_own_unchanged_files(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a.ledger.json", _tiny(layers=1))
    b = _write(tmp_path / "b.ledger.json", _tiny(layers=1))
    out = tmp_path / "out"
    assert main(["report", str(a), str(b), "--out", str(out)]) == 0
    first = {p.name for p in out.iterdir()}
    assert {"per_layer_2.csv", "layer_delta_2.png", "compare_components.png"} <= first
    (out / "notes.png").write_bytes(b"mine")  # a file the user put there
    (out / "energy_per_layer_2.png").write_bytes(b"changed since")  # listed, but another run rewrote it
    capsys.readouterr()
    assert main(["report", str(a), "--out", str(out), "--overwrite"]) == 0
    printed = {Path(ln.removeprefix("wrote ")).name for ln in capsys.readouterr().out.splitlines()}
    assert {p.name for p in out.iterdir()} == printed | {"notes.png", "energy_per_layer_2.png"}
    assert (out / "notes.png").read_bytes() == b"mine"
    assert "per_layer_2.csv" not in printed and not (out / "per_layer_2.csv").exists()


def test_a_hostile_manifest_deletes_nothing_outside_the_report_names(tmp_path: Path) -> None:
    import hashlib

    led = _write(tmp_path / "x.ledger.json", _tiny(layers=1))
    out = tmp_path / "out"
    out.mkdir()
    keep = {"data.json": b"{}", "script.py": b"x", ".hidden.png": b"h"}
    for name, data in keep.items():
        (out / name).write_bytes(data)
    (tmp_path / "outside.png").write_bytes(b"o")
    listing = {n: hashlib.sha256(d).hexdigest() for n, d in keep.items()}
    listing["../outside.png"] = hashlib.sha256(b"o").hexdigest()
    (out / "report.manifest.json").write_text(json.dumps({"format": "npukit-report-files/1", "files": listing}))
    assert main(["report", str(led), "--out", str(out), "--overwrite"]) == 0
    assert all((out / n).read_bytes() == d for n, d in keep.items()) and (tmp_path / "outside.png").exists()


# -- 6: --depth 3 on a multi-core ledger ---------------------------------------------------------------------------------


def test_depth3_keeps_a_multicore_layers_cycles_and_energy_in_one_row(multi: dict) -> None:
    from npukit.sim.energy import load_table
    from npukit.sim.report_model import summarise

    led = Ledger.from_dict(multi)
    assert any(sc.endswith("/core1") for sc, *_ in led.counts)  # the simulator records per-core counts
    for depth in (2, 3):
        run = summarise(led, "x", "", load_table("horowitz45"), depth)
        assert [v.scope for v in run.layers] == ["w/up", "w/down"]
        for v in run.layers:
            assert v.total_cycles > 0 and v.total_energy_pj > 0 and v.dram_bytes > 0 and v.macs > 0
        assert run.energy_pj == pytest.approx(led.energy("horowitz45"))


# -- 7: sim refuses a run whose ledger report would refuse ---------------------------------------------------------------


@pytest.mark.parametrize(("arch", "n"), [("npu128", 2**21), ("quad128", 2**22)])
def test_sim_refuses_counts_beyond_the_ledger_limit(arch: str, n: int, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    refused(["sim", "--arch", arch, "--workload", f"gemm:M={n},N={n},K={n}", "--out", str(out)], capsys,
            "too large for a ledger", "pe_array.mac")
    assert not out.exists()


def test_check_amounts_names_the_first_count_or_cycle_out_of_range() -> None:
    led = Ledger()
    led.record("pe_array", "mac", 8, 2**63 - 1, scope="w/a")
    led.add_cycles(2**63 - 1, scope="w/a")
    led.check_amounts()  # the largest a ledger file holds
    led.record("pe_array", "mac", 8, 1, scope="w/a")
    with pytest.raises(LedgerError, match="pe_array.mac in 'w/a'"):
        led.check_amounts()
    led = Ledger()
    led.add_cycles(1e19, "stall", scope="w/b")
    with pytest.raises(LedgerError, match="stall cycles of 'w/b'"):
        led.check_amounts()


# -- 9 (and a pipelined bar's rounding): core_busy_cycles against the run's cycles ----------------------------------------


def test_busy_cycles_above_the_total_are_refused_within_rounding(multi: dict) -> None:
    meta = multi["meta"]["multicore"]
    total = Ledger.from_dict(multi).total_cycles()
    ok = copy.deepcopy(meta)
    ok["core_busy_cycles"][0] = total * (1 + 1e-12)
    assert check_multicore_meta(ok, total, "x")["core_busy_cycles"][0] == ok["core_busy_cycles"][0]
    bad = copy.deepcopy(meta)
    bad["core_busy_cycles"] = [1e15] + bad["core_busy_cycles"][1:]
    with pytest.raises(LedgerError, match=r"core_busy_cycles\[0\] is 1e\+15 cycles, more than the run's"):
        check_multicore_meta(bad, total, "x")


def test_a_bar_starting_a_rounding_error_below_zero_is_read_as_zero(multi: dict) -> None:
    meta = copy.deepcopy(multi["meta"]["multicore"])
    total = Ledger.from_dict(multi).total_cycles()
    meta["timeline"][0][1] = -3.637978807091713e-12  # hetero4, minilm-l6, chain/pipeline wrote this
    assert check_multicore_meta(meta, total, "x")["timeline"][0][1] == 0.0
    meta["timeline"][0][1] = -1.0
    with pytest.raises(LedgerError, match="start must be a finite number"):
        check_multicore_meta(meta, total, "x")
