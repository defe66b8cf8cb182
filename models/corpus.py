"""The offline English corpus: the reStructuredText sources of the Python documentation shipped by
Debian's ``python3-doc`` (``/usr/share/doc/python3.X/html/_sources``), stripped of markup.

The one corpus reader of the project: the byte-level LM (:mod:`npukit.models.byte_llama`) trains
on :func:`text`, the MiniLM evaluation embeds :func:`sentences`. Stdlib only."""

from __future__ import annotations

import glob
import re
from pathlib import Path

from npukit.sim.errors import ConfigError

# Prose-heavy sections first; the order is fixed so the corpus is the same on every run.
_SECTIONS = ("tutorial", "howto", "faq", "reference", "library")
_ROLE = re.compile(r":[a-zA-Z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]*?)(?:\s*<[^>]*>)?`_+")
_WORD = re.compile(r"^[A-Za-z][A-Za-z'\-,;()]*[.,;:]?$")


def docs_root() -> Path:
    """The ``_sources`` folder of the installed python3-doc; raises ConfigError when missing."""
    for cand in sorted(glob.glob("/usr/share/doc/python3*/html/_sources"), reverse=True):
        if Path(cand, "tutorial").is_dir():
            return Path(cand)
    raise ConfigError("the python3-doc corpus is missing (/usr/share/doc/python3.X/html/_sources); "
                      "install it with 'apt-get install python3-doc'")


def _clean_line(line: str) -> str | None:
    s = line.strip()
    if not s or s.startswith(("..", ":", "|", "+", "=", "-", "*", "#", ">>>", "...", "$")) or line.startswith((" ", "\t")):
        return None  # directives, tables, headings, lists, code blocks
    s = _ROLE.sub(r"\1", s)
    s = _LINK.sub(r"\1", s)
    s = s.replace("``", "").replace("**", "").replace("*", "")
    return s


def paragraphs(max_bytes: int | None = None) -> list[str]:
    """Prose paragraphs (markup stripped) of the corpus, in a fixed order, up to ``max_bytes`` bytes."""
    root = docs_root()
    out: list[str] = []
    total = 0
    for sec in _SECTIONS:
        for path in sorted((root / sec).rglob("*.rst.txt")):
            cur: list[str] = []
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines() + [""]:
                c = _clean_line(line)
                if c is None:
                    if cur:
                        para = " ".join(cur)
                        out.append(para)
                        total += len(para) + 1
                        cur = []
                        if max_bytes is not None and total >= max_bytes:
                            return out
                else:
                    cur.append(c)
    return out


def text(max_bytes: int) -> str:
    """Up to ``max_bytes`` of corpus prose, one paragraph per line (ASCII only)."""
    body = "\n".join(paragraphs(max_bytes))
    return body.encode("ascii", "ignore").decode("ascii")[:max_bytes]


def sentences(n: int, skip: int = 0, min_words: int = 6, max_words: int = 28) -> list[str]:
    """``n`` distinct English sentences from the corpus (6-28 plain words, no code), after skipping
    the first ``skip`` qualifying ones; raises ConfigError when the corpus has too few."""
    seen: set[str] = set()
    out: list[str] = []
    k = 0
    for para in paragraphs():
        for sent in re.split(r"(?<=[.!?])\s+", para):
            words = sent.split()
            if not (min_words <= len(words) <= max_words) or not sent.endswith(".") or not sent[0].isupper():
                continue
            if sum(bool(_WORD.match(w)) for w in words) < len(words) or sent in seen:
                continue
            seen.add(sent)
            k += 1
            if k > skip:
                out.append(sent)
                if len(out) == n:
                    return out
    raise ConfigError(f"the python3-doc corpus has only {len(out)} usable sentences after {skip}; ask for fewer")
