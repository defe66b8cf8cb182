"""``npukit report`` and :func:`npukit.sim.report.write_report`: files, embedded figures, numbers from
the ledgers (32-bit vs 8-bit psums on ResNet-18) and bad input (exit 2, one line, nothing written)."""

from __future__ import annotations

import base64
import contextlib
import io
import re
from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import Ledger, load_arch, resnet18, simulate
from npukit.sim.errors import ConfigError
from npukit.sim.report import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two simulated ResNet-18 runs (psum 32 and 8 bits), saved as ledger files."""
    d = tmp_path_factory.mktemp("ledgers")
    arch = load_arch("npu128")
    r32 = simulate(resnet18(), arch)
    r8 = simulate(resnet18(), arch.with_(**{"bits.psum_buffer": 8}))
    a, b = d / "psum32.json", d / "psum8.json"
    r32.ledger.save(a)
    r8.ledger.save(b)
    return {"a": a, "b": b, "r32": r32, "r8": r8, "dir": d}


@pytest.fixture(scope="module")
def report(sims: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run the CLI once on both ledgers; later tests inspect what it wrote."""
    out = tmp_path_factory.mktemp("report") / "out"
    capture: dict = {}
    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        capture["rc"] = main(["report", str(sims["a"]), str(sims["b"]), "--out", str(out)])
    capture.update(out=out, stdout=buf_out.getvalue(), stderr=buf_err.getvalue())
    capture["md"] = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    capture["html"] = (out / "report.html").read_text() if (out / "report.html").exists() else ""
    return capture


def _md_table_after(md: str, heading_start: str) -> list[list[str]]:
    """Rows (cells) of the first Markdown table after the heading line starting with ``heading_start``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_start))
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert len(rows) >= 2, f"no table after {heading_start!r}"
    return rows[2:]  # drop header and alignment rows


def _md_records_after(md: str, heading_start: str) -> list[dict[str, str]]:
    """The table after a heading as one dict per row, keyed by the header cells."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_start))
    header = next(line for line in lines[start + 1:] if line.startswith("|"))
    keys = [c.strip() for c in header.strip().strip("|").split("|")]
    return [dict(zip(keys, r, strict=True)) for r in _md_table_after(md, heading_start)]


def _num(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%"))


def test_cli_writes_md_html_and_pngs(report: dict) -> None:
    assert report["rc"] == 0, report["stderr"]
    lines = report["stdout"].splitlines()
    assert lines and all(ln.startswith("wrote ") for ln in lines)  # every verb prints 'wrote PATH'
    printed = [Path(ln.removeprefix("wrote ")) for ln in lines]
    out = report["out"]
    assert out / "report.md" in printed and out / "report.html" in printed
    pngs = [p for p in printed if p.suffix == ".png"]
    # energy, latency, utilization per ledger (2 ledgers), roofline, components, per-layer differences
    assert sorted(p.name for p in pngs) == sorted([
        "energy_per_layer_1.png", "latency_per_layer_1.png", "utilization_per_layer_1.png",
        "energy_per_layer_2.png", "latency_per_layer_2.png", "utilization_per_layer_2.png",
        "roofline.png", "compare_components.png", "layer_delta_2.png"])
    for p in printed:
        assert p.is_file() and p.stat().st_size > 0
    for p in pngs:
        assert p.read_bytes().startswith(PNG_MAGIC)
        assert f"]({p.name})" in report["md"]  # the Markdown links each PNG beside it
    assert not list(out.glob(".*.tmp")), "temp files left behind"


def test_html_is_self_contained(report: dict) -> None:
    html = report["html"]
    blobs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(blobs) == 9
    for blob in blobs:
        assert base64.b64decode(blob).startswith(PNG_MAGIC)
    # nothing external: every src is a data URI, no stylesheets or scripts by reference
    assert all(s.startswith("data:") for s in re.findall(r'src="([^"]*)"', html))
    assert "<link" not in html and "href=" not in html


def test_comparison_percent_matches_ledgers(report: dict, sims: dict) -> None:
    e32 = Ledger.load(sims["a"]).energy_by("horowitz45", "component")
    e8 = Ledger.load(sims["b"]).energy_by("horowitz45", "component")
    rows = {r[0]: r for r in _md_table_after(report["md"], "## Comparison")}
    for comp in ("psum_buffer", "dram", "pe_array"):
        expected = 100.0 * (e8[comp] - e32[comp]) / e32[comp]
        row = rows[f"{comp} energy (uJ)"]
        assert _num(row[1]) == pytest.approx(e32[comp] / 1e6, abs=5e-4)
        assert _num(row[2]) == pytest.approx(e8[comp] / 1e6, abs=5e-4)
        assert _num(row[3]) == pytest.approx(expected, abs=0.005)
    # the psum-buffer saving is printed the same way in the HTML
    pct = rows["psum_buffer energy (uJ)"][3]
    assert re.search(r"<td>psum_buffer energy \(uJ\)</td>.*?" + re.escape(pct), report["html"])
    tot32, tot8 = sum(e32.values()), sum(e8.values())
    assert _num(rows["total energy (uJ)"][3]) == pytest.approx(100.0 * (tot8 - tot32) / tot32, abs=0.005)
    on32, on8 = tot32 - e32["dram"], tot8 - e8["dram"]
    assert _num(rows["on-chip energy (uJ)"][3]) == pytest.approx(100.0 * (on8 - on32) / on32, abs=0.005)


def test_totals_and_per_layer_tables_match_simulation(report: dict, sims: dict) -> None:
    r32, r8 = sims["r32"], sims["r8"]
    totals = {r[0]: r for r in _md_table_after(report["md"], "## Totals")}
    for label, res in (("psum32", r32), ("psum8", r8)):
        row = totals[label]
        assert _num(row[1]) == pytest.approx(res.energy_pj / 1e6, abs=5e-4)
        assert _num(row[2]) == pytest.approx(res.energy_onchip_pj / 1e6, abs=5e-4)  # all but DRAM
        assert _num(row[3]) == res.cycles
        assert _num(row[-2]) == pytest.approx(res.latency_s * 1e6, abs=5e-4)  # microseconds
        layer_rows = _md_records_after(report["md"], f"## Per layer: {label}")
        names = [layer.name for layer in resnet18().layers]  # scopes resnet18/<layer>, the workload said once
        assert len(names) == 21
        assert [r["layer"] for r in layer_rows] == names
        arch = res.arch
        for row, lr in zip(layer_rows, res.layers, strict=True):
            assert _num(row["total_cycles"]) == lr.cycles
            assert _num(row["stall_cycles"]) == lr.stall_cycles
            assert _num(row["energy (uJ)"]) == pytest.approx(sum(lr.energy_pj.values()) / 1e6, abs=5e-4)
            # the simulator's own per-layer figures, read back from the ledger
            assert _num(row["utilization"]) == pytest.approx(100 * lr.utilization, abs=0.05)
            assert _num(row["mapping efficiency"]) == pytest.approx(100 * lr.mapping_efficiency, abs=0.05)
            assert row["mapping"] == lr.mapping
            ai = 2 * lr.macs / lr.dram_bytes
            assert _num(row["ops/byte"]) == pytest.approx(ai, abs=0.05)
            ridge = 2 * arch.rows * arch.cols / arch.dram_bandwidth_bytes_per_cycle
            assert row["bound"] == ("compute" if ai >= ridge else "memory")
            onchip = {k: v for k, v in lr.energy_pj.items() if k != "dram" and v}
            top = max(onchip, key=onchip.get)
            assert row["top on-chip (share of on-chip)"].startswith(f"{top} (")
        assert "latency (us)" not in layer_rows[0]  # cycles at a fixed clock: said once in the totals
        assert {r["bound"] for r in layer_rows} == {"compute", "memory"}  # ResNet-18 on npu128 has both


def test_component_delta_table_and_constant_columns(report: dict, sims: dict) -> None:
    e32 = Ledger.load(sims["a"]).energy_by("horowitz45", "component")
    e8 = Ledger.load(sims["b"]).energy_by("horowitz45", "component")
    rows = _md_records_after(report["md"], "### Component by component: psum8 minus psum32")
    assert rows[0]["component"] == "psum_buffer"  # the largest change first
    total = sum(e8.values()) - sum(e32.values())
    for row in rows:
        c = row["component"]
        d = e8.get(c, 0.0) - e32.get(c, 0.0)
        assert _num(row["delta (uJ)"]) == pytest.approx(d / 1e6, abs=5e-4)
        assert _num(row["share of total delta"]) == pytest.approx(100 * d / total, abs=0.05)
    # a column equal in every layer is dropped and said once: no layer has a 'top component' of dram
    md = report["md"]
    assert "top component (share)" not in md


def test_captions_name_arch_and_table(report: dict) -> None:
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", report["html"])
    assert len(captions) == 9
    for cap in captions:
        assert "npu128 (128x128 PEs, WS dataflow, psum" in cap and "energy table horowitz45" in cap
    assert any("psum buffer 8 bits" in c for c in captions) and any("psum buffer 32 bits" in c for c in captions)


def test_api_single_ledger_unknown_arch_and_depth(tmp_path: Path) -> None:
    led = Ledger()  # not from the simulator: no arch, no energy table in meta
    with led.scope("net"):
        with led.scope("a"):
            led.record("pe_array", "mac", (8, 8, 32), 1000)
            led.add_cycles(40)
        with led.scope("b"):
            led.record("pe_array", "mac", (8, 8, 32), 3000)
            led.add_cycles(60, "stall")
    paths = write_report([led], tmp_path / "r", depth=1, labels=["mine"])
    # no arch: no roofline, no utilization; no layer facts: mapping efficiency n/a
    assert set(paths) == {"md", "html", "energy_per_layer_1.png", "latency_per_layer_1.png", "per_layer_1.csv"}
    md = paths["md"].read_text()
    assert "arch: unknown" in md and "Comparison" not in md and "Roofline" not in md
    (row,) = _md_records_after(md, "## Per layer: mine")
    assert row["layer"] == "net" and _num(row["total_cycles"]) == 100 and _num(row["stall_cycles"]) == 60
    assert row["mapping efficiency"] == "n/a" and row["utilization"] == "n/a"
    assert _num(row["energy (uJ)"]) == pytest.approx(led.energy("horowitz45") / 1e6, rel=1e-3)


def test_api_rejects_bad_labels_before_writing(sims: dict, tmp_path: Path) -> None:
    led = Ledger.load(sims["a"])
    with pytest.raises(ConfigError, match="labels"):
        write_report([led, led], tmp_path / "r", labels=["same", "same"])
    assert not (tmp_path / "r").exists()


def test_failed_write_leaves_nothing(sims: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    import npukit.sim.output as rep

    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(PNG_MAGIC))  # drawing is tested above

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rep.os, "replace", broken_replace)
    out = tmp_path / "r"
    with pytest.raises(ConfigError, match="No space left"):
        write_report([Ledger.load(sims["a"])], out)
    assert not out.exists() or not any(out.iterdir())


def _bad_cases(sims: dict, tmp: Path) -> dict[str, list[str]]:
    bad_json = tmp / "bad.json"
    bad_json.write_text("{not json")
    not_ledger = tmp / "other.json"
    not_ledger.write_text('{"hello": 1}')
    a_file = tmp / "plain.txt"
    a_file.write_text("x")
    a, b = str(sims["a"]), str(sims["b"])
    return {
        "missing": [str(tmp / "missing.json")],
        "bad_json": [str(bad_json)],
        "not_ledger": [a, str(not_ledger)],
        "labels": [a, b, "--labels", "only-one"],
        "table": [a, "--table", "nosuch"],
        "depth": [a, "--depth", "0"],
        "out_under_file": [a, b, "--out", str(a_file / "sub")],
    }


@pytest.mark.parametrize("case", ["missing", "bad_json", "not_ledger", "labels", "table", "depth", "out_under_file"])
def test_bad_input_exit_2_one_line_nothing_written(
    case: str, sims: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _bad_cases(sims, tmp_path)[case]
    out = tmp_path / "out"
    if "--out" not in argv:
        argv = [*argv, "--out", str(out)]
    rc = main(["report", *argv])
    cap = capsys.readouterr()
    assert rc == 2
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npukit report: error:"), cap.err
    assert cap.out == ""
    assert not out.exists() or not any(out.iterdir())
    assert (tmp_path / "plain.txt").read_text() == "x"


def test_ledgers_without_layer_facts_still_report(sims: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(PNG_MAGIC))  # the tables matter here

    data = json.loads(Path(sims["a"]).read_text())
    assert data["layers"]["resnet18/conv1"]["mapping_efficiency"] == sims["r32"].layers[0].mapping_efficiency
    assert Ledger.from_dict(data) == Ledger.load(sims["a"])  # the facts round-trip
    del data["layers"]  # a ledger written before per-layer facts existed
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    paths = write_report([Ledger.load(old)], tmp_path / "r", sources=[old])
    md = paths["md"].read_text()
    rows = _md_records_after(md, "## Per layer: old")
    assert "mapping efficiency" not in rows[0]  # n/a in every row: stated once instead
    assert re.search(r"Same in every layer: layers 1; kind -; mapping -; mapping efficiency n/a", md)
    assert all(r["utilization"].endswith("%") for r in rows)  # still from MACs, cycles and the arch


def test_malformed_layer_facts_exit_2(sims: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from _cli_util import refused

    data = json.loads(Path(sims["a"]).read_text())
    data["layers"] = {"resnet18/conv1": [1, 2]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    refused(["report", str(bad), "--out", str(tmp_path / "o")], capsys, "malformed ledger", "layer 'resnet18/conv1'")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_example_sweep_then_report_draws_the_pareto_plot(tmp_path: Path) -> None:
    """The README's path: npukit sweep examples/sweep.toml, then npukit report on its database."""
    spec = Path(__file__).resolve().parents[1] / "examples" / "sweep.toml"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["sweep", str(spec), "--out", str(tmp_path / "s"), "--workers", "1", "--no-progress"]) == 0
        assert main(["report", str(tmp_path / "s" / "sweep.sqlite"), "--out", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "swept parameters: rows, cols, dataflow, bits_psum_buffer" in md
    for i in (1, 2):  # resnet18 and the GEMM
        assert (tmp_path / "r" / f"sweep_{i}_pareto_latency.png").read_bytes().startswith(PNG_MAGIC)
    assert md.count("### Pareto front: energy vs latency") == 2
