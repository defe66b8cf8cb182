"""Every report.html (ledgers and sweeps) is one self-contained file: parsed, it holds only the report's own
tags, every image is an embedded PNG data URI, nothing refers to anything outside it, and names taken
from the inputs (labels, workload names, config values) arrive as text, never as markup."""

from __future__ import annotations

import base64
import csv
from html.parser import HTMLParser
from pathlib import Path

import pytest

from npukit.sim import load_arch, simulate
from npukit.sim.report import write_report
from npukit.sweeps.report import write_sweep_report
from npukit.workloads import load_workload

PNG = b"\x89PNG\r\n\x1a\n"
EVIL = '<img src="http://evil.example/x.png" onerror=alert(1)><script>alert(2)</script>&amp;'
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "ul", "li", "table", "thead",
        "tbody", "tr", "th", "td", "figure", "img", "figcaption", "strong", "code"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data
        self.text.append(data)


def _check_self_contained(html_path: Path, pngs: list[Path]) -> _Page:
    page = _Page()
    page.feed(html_path.read_text())
    assert {t for t, _ in page.tags} <= TAGS  # no script, link, iframe, object, anchor, form
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) == len(pngs) > 0  # every figure embedded once
    for attrs in imgs:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(PNG)
    for tag, attrs in page.tags:
        for name in attrs:
            # no event handler, inline style or reference: only data URIs, alt text, class, charset and lang
            assert name in {"src", "alt", "charset", "lang", "class"}, (tag, name)
    assert "url(" not in page.style and "@import" not in page.style
    return page


@pytest.fixture(autouse=True)
def _fast_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    # the figures' drawing is covered by test_report.py and test_report_sweep.py; here the page matters
    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(PNG + b"fake"))


def test_ledger_report_html_is_self_contained(tmp_path: Path) -> None:
    arch, w = load_arch("npu32"), load_workload("gemm:M=256,N=128,K=512")
    a, b = simulate(w, arch).ledger, simulate(w, arch.with_(**{"bits.psum_buffer": 8})).ledger
    paths = write_report([a, b], tmp_path / "r", labels=[EVIL, "plain"], title=EVIL)
    pngs = [p for k, p in paths.items() if k.endswith(".png")]
    page = _check_self_contained(paths["html"], pngs)
    assert any(EVIL in t for t in page.text)  # the hostile label is there, as text


def test_sweep_report_html_is_self_contained(tmp_path: Path) -> None:
    rows = []
    for r in (16, 32):
        for df in ("ws", EVIL):
            rows.append({"key": f"k{r}{len(df)}", "workload": EVIL, "rows": r, "cols": 32, "dataflow": df,
                         "bits_input": 8, "bits_weight": 8, "bits_pe_psum": 32, "sram_kib_ifmap": 64,
                         "sram_kib_filter": 64, "sram_kib_psum": 32, "sram_kib_ofmap": 32,
                         "energy_total_pj": 1e6 * r * (2 if df == "ws" else 1), "latency_s": 1e-3 / r})
    path = tmp_path / "sweep.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    paths = write_sweep_report(path, tmp_path / "r")
    pngs = [p for k, p in paths.items() if k.endswith(".png")]
    page = _check_self_contained(paths["html"], pngs)
    text = "".join(page.text)
    assert f"Workload {EVIL}" in text and f"dataflow={EVIL}" in text
