"""``npukit report SWEEP.sqlite`` (and the CSV of ``npukit sweep export``): energy and latency vs each swept
parameter, Pareto fronts labelled by config, a heat map; ``--x``/``--y``/``--color``; bad names exit 2."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sweeps import read_rows

SPEC = """[sweep]
name = "tiny"
arch = "npu32"
workloads = ["gemm:M=256,N=256,K=256"]
[grid]
rows = [16, 32]
dataflow = ["ws", "os"]
"bits.psum_buffer" = [8, 32]
"""


def _run(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("sweep")
    (d / "spec.toml").write_text(SPEC)
    rc, _ = _run(["sweep", str(d / "spec.toml"), "--out", str(d / "s"), "--workers", "1", "--no-progress"])
    assert rc == 0
    db = d / "s" / "sweep.sqlite"
    rc, out = _run(["report", str(db), "--out", str(d / "r")])
    assert rc == 0
    return {"dir": d, "db": db, "csv": d / "s" / "sweep.csv", "out": out, "md": (d / "r" / "report.md").read_text()}


def _front(points: list[tuple[float, float, str]]) -> list[str]:
    """Brute force: configs no other point dominates (both values at most as large, one smaller)."""
    return [c for x, y, c in points
            if not any(x2 <= x and y2 <= y and (x2 < x or y2 < y) for x2, y2, _ in points)]


def _table_after(md: str, heading: str) -> list[list[str]]:
    lines = md.splitlines()
    i = lines.index(heading)
    rows = []
    for line in lines[i + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return rows[2:]


def test_report_draws_every_view(sweep: dict) -> None:
    printed = [Path(ln.removeprefix("wrote ")) for ln in sweep["out"].splitlines()]
    names = {p.name for p in printed}
    assert names == {"report.md", "report.html", "sweep_1_vs_parameters.png", "sweep_1_pareto_latency.png",
                     "sweep_1_pareto_area.png", "sweep_1_heatmap.png", "report.manifest.json"}
    for p in printed:
        assert p.is_file() and p.stat().st_size > 0
    md = sweep["md"]
    assert "swept parameters: rows, dataflow, bits_psum_buffer" in md
    assert "### Heat map: rows x dataflow" in md  # the first two swept parameters by default


def test_pareto_fronts_are_the_non_dominated_points(sweep: dict) -> None:
    rows = read_rows(sweep["db"])
    assert len(rows) == 8

    def cfg(r: dict) -> str:
        return f"rows={r['rows']} dataflow={r['dataflow']} psum_buffer={r['bits_psum_buffer']}"

    want = _front([(r["latency_s"], r["energy_total_pj"], cfg(r)) for r in rows])
    got = _table_after(sweep["md"], "### Pareto front: energy vs latency")
    assert sorted(c for r in got for c in _expand(r[0])) == sorted(want)
    for r in got:
        row = next(x for x in rows if cfg(x) == _expand(r[0])[0])
        assert float(r[1].replace(",", "")) == pytest.approx(row["latency_s"] * 1e6, abs=5e-4)
        assert float(r[2].replace(",", "")) == pytest.approx(row["energy_total_pj"] / 1e6, abs=5e-4)
    # area (mm^2) of npukit.sim.area, one row per distinct (area, energy)
    area = {cfg(r): r["area_mm2"] for r in rows}
    want_a = _front([(area[cfg(r)], r["energy_total_pj"], cfg(r)) for r in rows])
    got_a = _table_after(sweep["md"], "### Pareto front: energy vs area")
    assert len({(r[1], r[2]) for r in got_a}) == len(got_a)  # equal points are one row
    merged = {c: r for r in got_a for c in _expand(r[0])}
    assert sorted(merged) == sorted(want_a)
    for c, r in merged.items():
        assert float(r[1].replace(",", "")) == pytest.approx(area[c], abs=5e-4)


def _expand(label: str) -> list[str]:
    """'rows=32 dataflow=os psum=8|32' -> every config it stands for."""
    import itertools

    parts = [(k, v.split("|")) for k, v in (p.split("=", 1) for p in label.split())]
    return [" ".join(f"{k}={v}" for (k, _), v in zip(parts, combo, strict=True))
            for combo in itertools.product(*(vs for _, vs in parts))]


def test_csv_export_gives_the_same_report_and_overrides_apply(sweep: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    # the figures are drawn by the fixture; here only the tables matter (drawing takes a second)
    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(b"\x89PNG\r\n\x1a\n"))
    out = sweep["dir"] / "rc"
    rc, _ = _run(["report", str(sweep["csv"]), "--out", str(out), "--x", "bits.psum_buffer", "--y", "rows",
                  "--color", "dataflow"])
    assert rc == 0
    md = (out / "report.md").read_text()
    assert "### Heat map: bits_psum_buffer x rows" in md
    tables = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert tables == [ln for ln in sweep["md"].splitlines() if ln.startswith("|")]  # the database's numbers


@pytest.mark.parametrize("extra,needle", [
    (["--x", "nosuch"], "--x 'nosuch' is not a swept parameter of this sweep; choose one of: rows, dataflow, bits_psum_buffer"),
    (["--color", "cols"], "--color 'cols' is not a swept parameter"),
    (["--x", "rows", "--y", "rows"], "--x and --y are both 'rows'"),
    (["--labels", "a"], "--labels applies to ledger reports"),
])
def test_bad_sweep_options_exit_2_one_line(sweep: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           extra: list[str], needle: str) -> None:
    refused(["report", str(sweep["db"]), "--out", str(tmp_path / "o"), *extra], capsys, needle)
    assert not (tmp_path / "o").exists()


def test_sweep_options_refused_for_ledgers_and_mixed_inputs(sweep: dict, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    led = tmp_path / "a.ledger.json"
    assert main(["sim", "--workload", "gemm:M=8,N=8,K=8", "--out", str(tmp_path / "s"), "--quiet"]) == 0
    led = next((tmp_path / "s").glob("*.ledger.json"))
    capsys.readouterr()
    refused(["report", str(led), "--x", "rows", "--out", str(tmp_path / "o")], capsys, "--x applies to a sweep report")
    refused(["report", str(led), str(sweep["db"]), "--out", str(tmp_path / "o")], capsys, "one sweep database")
    assert not (tmp_path / "o").exists()


def test_pareto_front_lists_equal_points_once() -> None:
    from npukit.sweeps.report import Point, pareto, unique_front

    def pt(rows: int, bits: int, e: float, t: float) -> Point:
        return Point({"rows": rows, "bits": bits}, e, t, None, {})

    pts = [pt(64, 8, 10.0, 2.0), pt(64, 16, 10.0, 2.0), pt(128, 8, 5.0, 3.0), pt(32, 8, 20.0, 2.5)]
    def key(p: Point) -> tuple[float, float]:
        return (p.latency_s, p.energy_pj)

    front = pareto(pts, key)
    assert len(front) == 3  # both equal points are on the front; the dominated one is not
    rows = unique_front(front, key, ["rows", "bits"])
    assert len(rows) == 2 and rows[0][0].endswith("=8|16")  # one row for the two equal configs


@pytest.mark.slow
def test_a_sweep_report_refuses_another_runs_file_and_overwrites_only_its_own(sweep: dict, tmp_path) -> None:
    """A sweep report checks every file it would write, as a ledger report does: without --overwrite one of them
    already there (another run's) is refused and kept; with it, the earlier report's own files that the new one does
    not write (another --x, another heat map) are removed by its manifest, and a file it never wrote stays."""
    out = tmp_path / "r"
    out.mkdir()
    (out / "sweep_1_heatmap.png").write_bytes(b"another run's")
    rc, _ = _run(["report", str(sweep["db"]), "--out", str(out)])
    assert rc == 2 and (out / "sweep_1_heatmap.png").read_bytes() == b"another run's"
    (out / "sweep_1_heatmap.png").unlink()
    (out / "notes.txt").write_text("mine")
    assert _run(["report", str(sweep["db"]), "--out", str(out)])[0] == 0
    manifest = json.loads((out / "report.manifest.json").read_text())
    assert {"report.md", "report.html", "sweep_1_heatmap.png"} <= set(manifest["files"])
    # an earlier report of this run that wrote a figure this one does not: listed in its manifest with its hash
    old = out / "sweep_2_heatmap.png"
    old.write_bytes(b"an earlier report's figure")
    manifest["files"][old.name] = hashlib.sha256(old.read_bytes()).hexdigest()
    (out / "report.manifest.json").write_text(json.dumps(manifest))
    rc, printed = _run(["report", str(sweep["db"]), "--out", str(out), "--overwrite"])
    assert rc == 0 and "report.manifest.json" in printed
    assert not old.exists() and (out / "sweep_1_heatmap.png").is_file()
    assert (out / "notes.txt").read_text() == "mine"  # never written by a report: kept
