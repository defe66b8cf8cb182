"""No tracked text file holds an unresolved merge conflict (a line starting with 7 '<', '=' or '>' and a space
or line end, as git writes them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        p = ROOT / name
        if name and p.is_file() and p.suffix in {".py", ".md", ".toml", ".cfg", ".yaml", ".yml", ".txt", ".v", ".sv", ".json",
                                                 ".csv", ".ini", ""}:
            files.append(p)
    return files


def test_no_conflict_markers() -> None:
    bad = []
    for p in tracked_text_files():
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        m = MARKER.search(text)
        if m:
            bad.append(f"{p.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}")
    assert not bad, "unresolved merge conflict markers: " + ", ".join(bad)
