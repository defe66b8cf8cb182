"""Report documents -> Markdown and self-contained HTML (every figure a base64 ``data:`` PNG).

A document is a list of blocks rendered to both formats:
``("h1"|"h2"|"h3"|"p", text) | ("list", [text]) | ("table", headers, rows) | ("figure", png_name, caption)``.
A text is a plain string or a list of pieces: plain strings and ``("b", s)`` / ``("code", s)`` for bold
and code. Plain strings (labels, workload, layer, arch and file names: anything from the user) are
escaped by each renderer, so no name can inject Markdown or HTML; the markup is only the pieces'.
The HTML has no script, no stylesheet or image by reference and no link: one file, nothing external.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path
from typing import Any

from .output import check_targets, markdown_table, md_cell, md_line_start, write_files_atomically

Block = tuple[Any, ...]
Text = str | list[Any]
PJ_PER_UJ = 1e6
MANIFEST = "report.manifest.json"  # the files a report wrote (name -> SHA-256), so --overwrite can drop the stale ones
MANIFEST_FORMAT = "npukit-report-files/1"
_MANIFEST_LIMIT = 1 << 20  # bytes of a manifest read back (a report writes a few hundred)
_REPORT_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\.(?:png|csv|md|html)")  # names a report writes


def no_surrogates(text: str) -> str:
    """``text`` with every unpaired surrogate written as ``\\udcNN``: a byte of a non-UTF-8 file name, argument or
    path (how Python decodes it) becomes the escape a terminal shows (:func:`npukit.sim.terminal.tolerant_streams`),
    text that UTF-8 files and matplotlib accept; other text is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def bold(s: Any) -> tuple[str, str]:
    return ("b", str(s))


def code(s: Any) -> tuple[str, str]:
    return ("code", str(s))


def fmt_uj(pj: float) -> str:
    """pJ as uJ text."""
    uj = pj / PJ_PER_UJ
    return f"{uj:.4g}" if 0 < abs(uj) < 1 else f"{uj:,.3f}"


def fmt_delta_uj(pj: float) -> str:
    """A signed pJ difference as uJ text."""
    uj = pj / PJ_PER_UJ
    return f"{uj:+.4g}" if 0 < abs(uj) < 1 else f"{uj:+,.3f}"


def fmt_cycles(c: float) -> str:
    return f"{c:,.0f}" if float(c).is_integer() else f"{c:,.2f}"


def fmt_us(us: float | None) -> str:
    return "n/a" if us is None else f"{us:,.3f}"


def fmt_pct(frac: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (``n/a`` when unknown)."""
    return "n/a" if frac is None else f"{100.0 * frac:.{digits}f}%"


def pct(new: float, base: float) -> str:
    """Difference in percent relative to ``base``: ``100 * (new - base) / base``."""
    if base == 0:
        return "+0.00%" if new == 0 else "n/a (baseline 0)"
    return f"{100.0 * (new - base) / base:+.2f}%"


def drop_constant_columns(
    headers: list[str], rows: list[list[Any]], keep: int = 1
) -> tuple[list[str], list[list[Any]], list[str]]:
    """Drop the columns (after the first ``keep``) whose cell is the same in every one of two or more
    rows; returns (headers, rows, ``'header value'`` notes for the dropped ones)."""
    if len(rows) < 2:
        return headers, rows, []
    const = [i >= keep and len({str(r[i]) for r in rows}) == 1 for i in range(len(headers))]
    notes = [f"{h} {rows[0][i]}" for i, h in enumerate(headers) if const[i]]
    return ([h for i, h in enumerate(headers) if not const[i]],
            [[c for i, c in enumerate(r) if not const[i]] for r in rows], notes)


def _md_code(s: str) -> str:
    """A Markdown code span of ``s`` (newlines as spaces): a backtick fence longer than any run of
    backticks inside, padded with spaces when ``s`` starts or ends with one."""
    s = s.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _md_inline(text: Text) -> str:
    """Markdown of a text (see Block): plain pieces escaped, markup only from ("b", s) / ("code", s)."""
    pieces = [text] if isinstance(text, str) else text
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            kind, s = piece
            out.append(f"**{md_cell(s)}**" if kind == "b" else _md_code(s))
        else:
            out.append(md_cell(piece))
    return md_line_start("".join(out))


def to_markdown(doc: list[Block]) -> str:
    out: list[str] = []
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out += [f"{'#' * int(kind[1])} {_md_inline(block[1])}", ""]
        elif kind == "p":
            out += [_md_inline(block[1]), ""]
        elif kind == "list":
            out += [f"- {_md_inline(item)}" for item in block[1]] + [""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            out += [markdown_table(headers, rows, numeric_columns(headers, rows)), ""]
        elif kind == "figure":
            out += [f"![{block[1]}]({block[1]})", "", f"*Figure ({block[1]}): {md_cell(block[2])}*", ""]
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1300px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.85em;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ccc;padding:0.2em 0.45em}th{background:#f2f2f2}td.n{text-align:right;
font-variant-numeric:tabular-nums}
figure{margin:1.2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:0.9em;color:#444}code{background:#f5f5f5;padding:0 0.2em}
"""
_NUMERIC = re.compile(r"^[+-]?[\d,]*\.?\d+(e[+-]?\d+)?%?$|^n/a")


def numeric_columns(headers: list[str], rows: list[list[Any]]) -> list[bool]:
    """Columns whose every cell is a number or ``-`` (not applicable), at least one a number (right-aligned)."""
    return [bool(rows) and all(str(r[i]) == "-" or _NUMERIC.match(str(r[i])) for r in rows)
            and any(str(r[i]) != "-" for r in rows) for i in range(len(headers))]


def _inline_html(text: Text) -> str:
    """HTML of a text (see Block): plain pieces escaped, ("b", s) as <strong>, ("code", s) as <code>."""
    pieces = [text] if isinstance(text, str) else text
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            tag = "strong" if piece[0] == "b" else "code"
            out.append(f"<{tag}>{html.escape(piece[1])}</{tag}>")
        else:
            out.append(html.escape(str(piece)))
    return "".join(out)


def to_html(doc: list[Block], figures: dict[str, tuple[bytes, str]]) -> str:
    title = next((b[1] for b in doc if b[0] == "h1"), "npukit report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{_inline_html(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline_html(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "table":
            headers, rows = block[1], block[2]
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>")
            numeric = numeric_columns(headers, rows)
            for row in rows:
                cells = "".join(
                    f'<td class="n">{html.escape(str(c))}</td>' if numeric[i] else f"<td>{html.escape(str(c))}</td>"
                    for i, c in enumerate(row)
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        elif kind == "figure":
            name, caption = block[1], block[2]
            data = base64.b64encode(figures[name][0]).decode("ascii")
            out.append(
                f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_document(out: Path, doc: list[Block], figures: dict[str, tuple[bytes, str]],
                   extra: dict[str, bytes] | None = None, *, overwrite: bool = True,
                   manifest: bool = False) -> dict[str, Path]:
    """Write ``doc`` as ``out/report.md`` and ``out/report.html``, every figure as ``out/NAME`` (PNG) and each
    ``extra`` file (name -> bytes), all or none (:func:`~npukit.sim.output.write_files_atomically`); returns
    {'md', 'html', figure or extra name: path}. Text that is not UTF-8 (unpaired surrogates from non-UTF-8 names) is
    written as ``\\udcNN`` escapes. Every target is checked first (:func:`~npukit.sim.output.check_targets`).

    ``overwrite``: False refuses (:class:`ConfigError`, nothing written) a target that exists, as ``npukit sim``
    refuses another run's files. ``manifest``: also write :data:`MANIFEST` (each file's name and SHA-256, not in
    the returned dict) and, after the files, remove those an earlier report's manifest listed and this one does not
    write, each only while it still holds the bytes that report wrote: no file another run wrote is deleted."""
    files: dict[str, tuple[Path, bytes]] = {
        "md": (out / "report.md", to_markdown(doc).encode("utf-8", "backslashreplace")),
        "html": (out / "report.html", to_html(doc, figures).encode("utf-8", "backslashreplace")),
    }
    for name, (data, _) in figures.items():
        files[name] = (out / name, data)
    for name, data in (extra or {}).items():
        files[name] = (out / name, data)
    written = {key: path for key, (path, _) in files.items()}
    listing = {path.name: hashlib.sha256(data).hexdigest() for path, data in files.values()}
    if manifest:
        text = json.dumps({"format": MANIFEST_FORMAT, "files": listing}, indent=1) + "\n"
        files[MANIFEST] = (out / MANIFEST, text.encode())
    targets = check_targets(out, [path.name for path, _ in files.values()])  # links, folders, length: before a byte
    if not overwrite:
        from .run_name import refuse_existing

        refuse_existing(targets, overwrite)
    earlier = _earlier_files(out) if manifest else {}
    write_files_atomically(list(files.values()))
    _remove_stale(out, {n: h for n, h in earlier.items() if n not in listing})
    return written


def _earlier_files(out: Path) -> dict[str, str]:
    """The files (name -> SHA-256) the manifest in ``out`` lists, if it is one a report wrote; {} otherwise (none,
    unreadable or not a manifest: then nothing is removed)."""
    path = out / MANIFEST
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MANIFEST_LIMIT:
            return {}
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT else None
    if not isinstance(files, dict):
        return {}
    return {n: h for n, h in files.items() if isinstance(n, str) and _REPORT_FILE.fullmatch(n) and n != MANIFEST
            and isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h)}


def _remove_stale(out: Path, stale: dict[str, str]) -> None:
    """Remove each ``out/name`` that is a regular file (not a link) still holding the bytes of SHA-256 ``digest``;
    one that changed since (another run wrote it) or cannot be read is kept."""
    for name, digest in stale.items():
        path = out / name
        try:
            if path.is_symlink() or not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                continue
            path.unlink()
        except OSError:
            continue


def fmt_rel(new: float, base: float) -> str:
    """Difference relative to ``base`` for a figure label: ``+12.3%``, with the ratio from 10x on
    (``+15,135% (152x)``) and ``n/a (baseline 0)``."""
    if base == 0:
        return "+0%" if new == 0 else "n/a (baseline 0)"
    rel = 100.0 * (new - base) / base
    text = f"{rel:+,.1f}%" if abs(rel) < 1000 else f"{rel:+,.0f}%"
    return text + (f" ({new / base:,.0f}x)" if base > 0 and new / base >= 10 else "")
