"""Writing result files: output folders, atomic writes, names that stay inside the folder, tables.

Every file npukit writes goes through here (the CLI verbs, the experiments, the reports, the
ledger), so that three rules hold everywhere:

* **Atomic.** A file is written to a hidden temporary beside it (``.NAME.<random>.<host>-<pid>.tmp``)
  and renamed into place; a failed or killed write leaves nothing at ``NAME``. Temporaries of this
  naming that a killed run left behind are removed by :func:`clean_stale_temps` on the next write
  into the folder: at once when their process (on this host) is gone, else after an hour.
* **Inside the output folder.** :func:`safe_filename` turns a name taken from an input file (an arch
  ``name``, a SCALE-Sim ``run_name``, a layer name) into one path component, and
  :func:`path_inside` refuses any path that would resolve outside its folder.
* **Checked before work.** :func:`prepare_out_dir` creates the folder (or says why it cannot) before
  any computation starts.

Stdlib only (a matplotlib figure is passed in, never imported here).
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError

_TMP_SUFFIX = ".tmp"
STALE_TEMP_S = 3600.0  # a temporary of ours older than this (seconds) belongs to a killed run
_HOST = f"{zlib.crc32(os.uname().nodename.encode()):08x}"  # os.uname: no socket import at start-up
# mkstemp's name: prefix + 8 characters of [a-z0-9_] + suffix; the host-pid part is absent in
# temporaries written before it was added (those are removed by age only)
_OUR_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}(?:\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+))?\.tmp$")


MAX_NAME_BYTES = 255  # one path component (NAME_MAX of Linux file systems)
MAX_PATH_BYTES = 4095  # a whole path (PATH_MAX - 1)


def path_length_problem(p: Path) -> str | None:
    """Why ``p`` is longer than the OS allows (a component over :data:`MAX_NAME_BYTES` or the whole path
    over :data:`MAX_PATH_BYTES`, in bytes), or None; checked before any ``stat`` (which would raise)."""
    full = os.fsencode(str(p.absolute()))
    if len(full) > MAX_PATH_BYTES:
        return f"the path is {len(full):,} bytes long, more than the OS allows ({MAX_PATH_BYTES:,})"
    longest = max((len(os.fsencode(part)) for part in p.parts), default=0)
    if longest > MAX_NAME_BYTES:
        return f"a folder or file name in it is {longest:,} bytes long, more than the OS allows ({MAX_NAME_BYTES})"
    return None


def _folder_problem(out: Path) -> str | None:
    """Why ``out`` cannot be (or become) a writable folder, or None when it can."""
    too_long = path_length_problem(out)
    if too_long:
        return too_long
    if out.exists():
        if not out.is_dir():
            return f"'{out}' exists and is not a folder"
        probe = out
    else:
        probe = out.absolute().parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            return f"'{probe}' is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK) or not _can_create_in(probe):
        return f"'{probe}' denies writes"
    return None


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Check, creating nothing, that ``path`` is or can become a writable folder; :class:`ConfigError`
    otherwise. An empty string is refused (it would silently mean the current folder)."""
    if str(path).strip() == "":
        raise ConfigError(f"{flag} is empty; pass a folder, e.g. {flag} out/run")
    out = Path(path)
    if ".." in out.parts:  # 'a/x/../b' names a/b: writing through it would create a/x on the way
        out = out.resolve()
    why = _folder_problem(out)
    if why is not None:
        raise ConfigError(f"{flag} '{out}' cannot be used as an output folder ({why}); pass a writable folder")
    return out


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (a probe file, removed at once): ``os.access`` says
    yes to root everywhere, also in /proc or on a read-only mount."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".npukit-probe.", suffix=_TMP_SUFFIX)
    except OSError:
        return False
    os.close(fd)
    os.unlink(tmp)
    return True


def prepare_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """:func:`check_out_dir`, then create the folder; :class:`ConfigError` when that fails."""
    out = check_out_dir(path, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder '{out}' ({exc.strerror}); pass a writable {flag}") from None
    return out


def check_writable_file(path: str | Path, flag: str) -> Path:
    """Check, before any work and creating nothing, that ``path`` can be written as a file: not
    empty, not a folder, and its folder exists (or can be created) and is writable."""
    if str(path).strip() == "":
        raise ConfigError(f"{flag} is empty; pass a file path")
    p = Path(path)
    too_long = path_length_problem(p)
    if too_long:
        raise ConfigError(f"cannot write {flag} '{p}' ({too_long}); pass a shorter path")
    if p.is_dir():
        raise ConfigError(f"{flag} '{p}' is a folder; pass a file path (a file inside it, or a new name)")
    why = _folder_problem(p.absolute().parent)
    if why is not None:
        raise ConfigError(f"cannot write {flag} '{p}' ({why}); pass a writable file path")
    return p


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_filename(name: Any, fallback: str = "run") -> str:
    """One safe path component from ``name``: letters, digits, ``._+-``; anything else (slashes,
    ``..``, NUL, spaces) becomes ``_``; a leading dot is dropped; at most 100 characters."""
    s = _UNSAFE.sub("_", str(name)).strip("._")
    s = re.sub(r"_+", "_", s)[:100]
    return s or fallback


def check_targets(folder: str | Path, names: Sequence[str]) -> list[Path]:
    """Each ``folder / name`` checked before the first byte of output: inside ``folder`` (a planted symlink
    pointing out of it is refused), not a folder or another non-file, not too long; :class:`ConfigError`
    naming the first bad one. Returns the paths in order."""
    out = []
    for name in names:
        p = path_inside(folder, name)
        too_long = path_length_problem(p)
        if too_long:
            raise ConfigError(f"cannot write '{p}' ({too_long}); pass a shorter --out")
        if p.is_symlink():
            raise ConfigError(f"refusing to write '{p}': it is a symbolic link; remove it or pass another --out")
        if p.exists() and not p.is_file():
            raise ConfigError(f"refusing to write '{p}': it exists and is not a file")
        out.append(p)
    return out


def path_inside(folder: str | Path, *parts: str) -> Path:
    """``folder / parts`` after checking it resolves inside ``folder``; :class:`ConfigError` if not."""
    base = Path(folder).resolve()
    p = Path(folder).joinpath(*parts)
    target = p.resolve()
    if target != base and base not in target.parents:
        raise ConfigError(f"refusing to write '{p}': it resolves outside the output folder '{folder}'")
    return p


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _process_gone(host: str | None, pid: str | None) -> bool:
    """True when the temporary's writer ran on this host and no process of that id exists now."""
    if host != _HOST or pid is None or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive under another user / not a pid
        return False
    return False


def clean_stale_temps(folder: str | Path, max_age_s: float = STALE_TEMP_S) -> int:
    """Remove temporaries of this module's naming (``.NAME.<random>[.<host>-<pid>].tmp``) from
    ``folder`` that a killed run left behind: those whose writer on this host no longer runs, and any
    older than ``max_age_s`` seconds. Other hidden files are never touched. Returns how many were removed."""
    n = 0
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for e in entries:
        m = _OUR_TEMP.match(e.name)
        if m is None or not e.is_file(follow_symlinks=False):
            continue
        try:
            if _process_gone(m["host"], m["pid"]) or now - e.stat(follow_symlinks=False).st_mtime > max_age_s:
                os.unlink(e.path)
                n += 1
        except OSError:
            pass
    return n


def temp_path(path: Path) -> Path:
    """A new hidden temporary file beside ``path`` (created empty, usual file mode), named after
    ``path``, this host and this process so that :func:`clean_stale_temps` can tell when it is stale."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".{_HOST}-{os.getpid()}{_TMP_SUFFIX}")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would surprise users
    return Path(tmp)


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write (e.g. ``torch.save(obj, tmp)``): renamed onto ``path`` when
    the block ends, removed if it raises, so ``path`` is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(path.parent)
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary beside it and an atomic rename; returns ``path``."""
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """UTF-8 text through :func:`atomic_write_bytes`; returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


write_text = atomic_write_text


def write_files_atomically(files: Sequence[tuple[Path, bytes]]) -> None:
    """Write several files so that either all appear or none: every one goes to a temporary first,
    then all are renamed. An OSError becomes :class:`ConfigError` naming the folder."""
    temps: list[tuple[Path, Path]] = []
    try:
        for folder in dict.fromkeys(path.parent for path, _ in files):
            folder.mkdir(parents=True, exist_ok=True)
            clean_stale_temps(folder)
        for path, data in files:
            tmp = temp_path(path)
            temps.append((tmp, path))
            tmp.write_bytes(data)
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as exc:
        where = files[0][0].parent if files else "."
        raise ConfigError(f"cannot write into '{where}' ({exc.strerror}); pass a writable --out") from None
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)


def write_figure(path: str | Path, fig: Any, **savefig_kw: Any) -> Path:
    """Atomic write of a matplotlib figure (``fig.savefig(tmp, **savefig_kw)``, then rename).

    A failed save leaves nothing at ``path`` and no temporary file. The caller closes the figure.
    """
    path = Path(path)
    buf = io.BytesIO()
    savefig_kw.setdefault("format", (path.suffix.lstrip(".") or "png"))
    fig.savefig(buf, **savefig_kw)
    return atomic_write_bytes(path, buf.getvalue())


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text of dict rows (columns: ``columns`` or the first row's keys; missing cells empty)."""
    buf = io.StringIO()
    if rows or columns:
        w = csv.DictWriter(buf, fieldnames=list(columns or rows[0]), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def write_csv(path: str | Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> Path:
    """Atomic CSV write of dict rows; returns ``path``."""
    return atomic_write_text(path, csv_text(rows, columns))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned text table for a terminal (numbers right-aligned)."""
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def md_cell(text: Any) -> str:
    """One Markdown table cell: ``|``, backslashes, newlines, ``&``/``<``/``>``, emphasis and link
    characters (``*`` ``_`` ``~`` `````` ``[`` ``]``) and ``#`` escaped, so a name read from an input file
    can neither break the table nor inject markup (an underscore between letters or digits, as in
    ``psum_buffer``, is left as it is: it is not emphasis in GFM)."""
    s = re.sub(r"\r\n?|\n", " ", str(text).replace("\\", "\\\\").replace("|", "\\|"))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = re.sub(r"([*`\[\]#~])", r"\\\1", s)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)  # intraword _ is not emphasis


_BLOCK_START = re.compile(r"[-+=]|\d+(?=[.)])")


def md_line_start(escaped: str) -> str:
    """An already escaped line of inline Markdown that cannot start a block: leading white space
    (an indented code block) dropped, a leading ``-``/``+``/``=`` (a list, an underline) or the
    ``1.`` of an ordered list escaped."""
    s = escaped.lstrip()
    m = _BLOCK_START.match(s)
    if m is None:
        return s
    return s[: m.end()] + "\\" + s[m.end():] if s[0].isdigit() else "\\" + s


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], numeric: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table; every cell escaped with :func:`md_cell`; ``numeric``
    columns right-aligned (default: none)."""
    num = list(numeric) if numeric is not None else [False] * len(headers)
    out = ["| " + " | ".join(md_cell(h) for h in headers) + " |"]
    out.append("|" + "|".join("---:" if n else ":---" for n in num) + "|")
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
