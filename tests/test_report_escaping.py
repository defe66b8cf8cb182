"""Names from the user cannot change a report's structure: Markdown, HTML and the figures.

Labels, workload, layer and arch names, the title and source file names are all user strings. The
properties, over random strings of Markdown and HTML syntax characters:

* a table cell (``md_cell``) stays one cell and reads back as the string (newlines as spaces);
* an inline line (``md_line_start(md_cell(s))``) is one paragraph of plain text, no emphasis,
  code, link, HTML, heading, list or strikethrough;
* a whole report with hostile names has the same Markdown token structure and the same HTML tag
  sequence as the same report with plain names;
* the figures render names as text (a malformed ``$...$`` is not parsed as mathtext).

Markdown is parsed with markdown-it-py (CommonMark + GFM tables and strikethrough).
"""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from npukit.sim import Arch, Layer, Workload, simulate
from npukit.sim.output import md_cell, md_line_start
from npukit.sim.report import write_report

markdown_it = pytest.importorskip("markdown_it")

SYNTAX = "|`#*_[]()<>&!~\\-+=.1 \n\r\t>$:;'\"/ax_y"
HOSTILE = [
    "# h1 | x `y` <b>z</b>\n- item *em* _u_ [l](http://e) $\\frac$",
    "1. two | $a$ ~~s~~ ### ",
    "    indented <!-- c --> &amp; &lt;x&gt; \\| **b**",
    "- [x] task\r\n> quote\n```\nfence\n```",
    "---",
    "=== _a_b_ __c__ `` ` `` ![i](j)",
]


def _md():
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _plain(s: str) -> str:
    """What a cell or a line should read back as: line breaks as spaces, outer white space stripped."""
    return re.sub(r"\r\n?|\n", " ", s).strip()


def _inline_text(tok) -> tuple[str, set[str]]:
    kinds = {c.type for c in tok.children}
    return "".join(c.content for c in tok.children if c.type in ("text", "text_special")), kinds


def _random_strings(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = [*HOSTILE, ""]
    for _ in range(n):
        out.append("".join(rng.choice(SYNTAX) for _ in range(rng.randint(1, 24))))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_table_cell_is_one_cell_and_reads_back(seed: int) -> None:
    md = _md()
    for s in _random_strings(300, seed):
        doc = f"| a | b |\n|---|---|\n| {md_cell(s)} | end |\n"
        toks = md.parse(doc)
        cells = [t for t in toks if t.type == "inline"]
        assert len(cells) == 4, (s, doc)  # a, b, the cell, end: the row was not split or ended
        text, kinds = _inline_text(cells[2])
        assert kinds <= {"text", "text_special"}, (s, kinds)
        assert text == _plain(s).strip(), (s, text)
        assert _inline_text(cells[3])[0] == "end"


@pytest.mark.parametrize("seed", [0, 1])
def test_inline_line_is_one_plain_paragraph(seed: int) -> None:
    md = _md()
    for s in _random_strings(300, seed):
        if not _plain(s):
            continue
        line = md_line_start(md_cell(s))
        for doc in (line, f"- {line}", f"## {line}"):
            toks = md.parse(doc + "\n")
            blocks = [t.type for t in toks if t.type != "inline"]
            assert blocks in (["paragraph_open", "paragraph_close"],
                              ["bullet_list_open", "list_item_open", "paragraph_open", "paragraph_close",
                               "list_item_close", "bullet_list_close"],
                              ["heading_open", "heading_close"]), (s, doc, blocks)
            (inline,) = [t for t in toks if t.type == "inline"]
            text, kinds = _inline_text(inline)
            assert kinds <= {"text", "text_special"}, (s, doc, kinds)
            assert re.sub(r"\s+", " ", text) == re.sub(r"\s+", " ", _plain(s)), (s, doc, text)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)

    def handle_endtag(self, tag) -> None:
        self.tags.append("/" + tag)


def _report(tmp_path: Path, names: list[str], arch_name: str, title: str) -> dict[str, str]:
    ledgers = []
    for i, n in enumerate(names):
        w = Workload(n, [Layer(f"{n}.conv{i}", 16, 8, 8), Layer(f"$x$ {n}", 8, 8, 16)], {})
        ledgers.append(simulate(w, Arch(name=arch_name, rows=8, cols=8)).ledger)
    out = tmp_path / "r"
    write_report(ledgers, out, labels=names, title=title, sources=[f"{n}.json" for n in names])
    return {"md": (out / "report.md").read_text(), "html": (out / "report.html").read_text()}


def _structure(md_text: str) -> list[str]:
    out = []
    for t in _md().parse(md_text):
        out.append(t.type)
        if t.type == "inline":
            out += [c.type for c in t.children if c.type not in ("text", "text_special", "softbreak")]
    return out


def test_dollar_signs_in_names_are_drawn_as_text(tmp_path: Path) -> None:
    """matplotlib would parse "$...$" as mathtext and fail on a malformed one when drawing."""
    _report(tmp_path, ["$\\frac{ $x$ \r\n $"], "$a$", "$")
    assert (tmp_path / "r" / "energy_per_layer_1.png").read_bytes().startswith(b"\x89PNG")


def test_hostile_names_keep_the_report_structure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    # figures are drawn by the test above; here only the documents matter (drawing takes seconds)
    monkeypatch.setattr(Figure, "savefig", lambda self, buf, **kw: buf.write(b"\x89PNG\r\n\x1a\n"))
    plain = _report(tmp_path / "plain", ["alpha", "beta"], "archname", "A title")
    # "/" separates ledger scopes (workload/layer), so it would regroup layers: the one character left out
    evil_names = [h.replace("/", "") for h in (HOSTILE[0], HOSTILE[1] + "$\\frac{" + HOSTILE[3])]
    evil = _report(tmp_path / "evil", evil_names, HOSTILE[2], HOSTILE[4] + " " + HOSTILE[5])
    assert _structure(evil["md"]) == _structure(plain["md"])
    tp, te = _Tags(), _Tags()
    tp.feed(plain["html"])
    te.feed(evil["html"])
    assert te.tags == tp.tags
    # and the names are there, readable: the per-layer heading of each ledger
    headings = [t for t in _md().parse(evil["md"]) if t.type == "inline"]
    texts = {_inline_text(t)[0] for t in headings}
    for n in evil_names:
        assert f"Per layer: {_plain(n)}" in texts, n
