"""Bounded parsing of untrusted text and numbers: every reader of a user file (arch TOML, energy tables,
Accelergy ERT YAML, sweep specs, ledgers, ``hf:``/``diffusers:`` configs, trace-cache entries) goes through here.

* **Size**: a file over :data:`MAX_TEXT_BYTES` is refused before it is read (:func:`check_size`).
* **Depth**: nesting of ``[``/``{`` deeper than :data:`MAX_DEPTH` is refused by a linear scan *before* the
  recursive parsers (``json``, ``tomllib``, PyYAML's composer) see the text (:func:`check_depth`), so
  100,000 nested brackets give one line, not ``RecursionError``.
* **YAML aliases** (``*name``) are refused: a 400-byte "billion laughs" document expands to 10^9 nodes.
* **Numbers**: :func:`check_number` refuses booleans, NaN/inf and integers beyond :data:`MAX_INT` before
  anything converts them to float (``float(10**400)`` raises ``OverflowError``); :func:`check_finite`
  refuses a computed result that overflowed to inf or became NaN, naming the component.
"""

from __future__ import annotations

import json
import math
import re
import stat
from pathlib import Path
from typing import Any

from .errors import NpukitError

MAX_DEPTH = 64  # nesting of arrays/tables/objects in any input file
MAX_TEXT_BYTES = 64 * 1024 * 1024  # 64 MiB: any input text file
MAX_INT = 2**63 - 1  # largest integer accepted in a numeric field (|v|); converts to a finite float exactly enough
#: The smallest rate (a bandwidth in bytes per cycle, a clock in GHz) a field may give: 1 / MAX_INT, so that a rate's
#: reciprocal is bounded as every other number is and cycles (bytes / bandwidth) stay finite (1e-300 gave 1e304 stall
#: cycles, refused only after the simulation as a ledger too large).
MIN_RATE = 1.0 / MAX_INT

# strings (TOML multi-line, basic, literal; JSON basic) and TOML comments, whose brackets do not nest
_SKIP = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')
_BRACKETS = re.compile(r"[^\[\]{}]+")


def check_size(path: str | Path, what: str, error: type[NpukitError], limit: int = MAX_TEXT_BYTES) -> None:
    """Raise ``error`` if the file at ``path`` holds more than ``limit`` bytes (checked with ``stat``) or is not a
    regular file: a pipe or a device (also through a link) has no size to check, and reading one may never end (a
    FIFO) or never stop growing (``/dev/zero``)."""
    try:
        st = Path(path).stat()
    except OSError:
        return  # the read that follows reports it
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):  # a folder: the read reports it
        raise error(f"{what} '{path}' is not a regular file (a pipe or a device); give a file")
    size = st.st_size
    if size > limit:
        raise error(f"{what} '{path}' is {size:,} bytes, more than the limit of {limit:,}")


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in ``text`` outside strings and comments (a linear scan, no recursion)."""
    depth = deepest = 0
    for ch in _BRACKETS.sub("", _SKIP.sub("", text)):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def check_depth(text: str, what: str, error: type[NpukitError], limit: int = MAX_DEPTH) -> str:
    """``text`` if its nesting is at most ``limit`` deep, else ``error`` (one line); call before parsing."""
    d = nesting_depth(text)
    if d > limit:
        raise error(f"{what} nests {d:,} levels deep, more than the limit of {limit}")
    return text


def load_json(text: str, what: str, error: type[NpukitError]) -> Any:
    """``json.loads(text)`` after the depth check; any syntax error or overflow becomes one ``error`` line."""
    check_depth(text, what, error)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{what} is not valid JSON ({msg})") from None


_ALIAS = re.compile(r"(?:^|[\s\[{,:-])\*[^\s\[\]{},]+", re.M)


def _indent_levels(text: str) -> int:
    """The deepest indentation of ``text``'s lines, in steps of two spaces (a YAML block's nesting)."""
    return max((len(line) - len(line.lstrip(" ")) for line in text.splitlines()), default=0) // 2


def load_yaml(text: str, what: str, error: type[NpukitError], fast: bool = False) -> Any:
    """``yaml.safe_load(text)`` with the depth check and every alias (``*name``) refused. ``fast``: parse with
    libyaml's loader where PyYAML has it (several times faster, same safe constructors); its composer cannot be
    watched node by node and crashes the process on deep nesting, so the text is checked first: flow brackets and
    block indentation together at most :data:`MAX_DEPTH` levels, and no alias outside quotes and comments."""
    import yaml

    check_depth(text, what, error)
    loader = getattr(yaml, "CSafeLoader", None) if fast else None
    if loader is not None:
        bare = _SKIP.sub("", text)
        if nesting_depth(text) + _indent_levels(text) > MAX_DEPTH:
            raise error(f"{what} nests more than the limit of {MAX_DEPTH} levels")
        if (m := _ALIAS.search(bare)) is not None:
            raise error(f"{what} uses a YAML alias ({m.group().strip()}); aliases are not accepted, write the value out")
        try:
            return yaml.load(text, Loader=loader)  # noqa: S506 (libyaml's safe loader)
        except yaml.YAMLError as exc:
            raise error(f"{what} is not valid YAML: {' '.join(str(exc).split())}") from None

    class _Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise error(f"{what} uses a YAML alias (*{self.peek_event().anchor}); aliases are not accepted, "
                            "write the value out")
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise error(f"{what} nests more than the limit of {MAX_DEPTH} levels")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        msg = " ".join(str(exc).split())
        raise error(f"{what} is not valid YAML: {msg}") from None
    except RecursionError:
        raise error(f"{what} nests too deep") from None


def duplicate_key(text: str) -> str | None:
    """The first key written twice in one mapping of a YAML ``text`` already bounded and parsed by :func:`load_yaml`
    (composed, not constructed; the parser keeps only the last of two equal keys, silently), None if none."""
    import yaml

    stack = [yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            keys = [_key_value(k) for k, _ in node.value]
            dup = next((i for i, k in enumerate(keys) if k in keys[:i]), None)
            if dup is not None:
                return str(node.value[dup][0].value)
            stack += [v for _, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return None


def _key_value(node: Any) -> tuple[str, Any]:
    """A mapping key as the parser will read it: ``00`` and ``0`` are the same integer key (the parser keeps the last
    of them silently), ``"0"`` (a string) is another."""
    import yaml

    if isinstance(node, yaml.ScalarNode) and node.tag.endswith((":int", ":float", ":bool", ":null")) and \
            len(node.value) <= 64:
        try:
            return "value", yaml.safe_load(node.value)
        except yaml.YAMLError:
            pass
    return "text", node.value


def check_number(v: Any, what: str, error: type[NpukitError]) -> float:
    """``v`` as a float if it is a finite real number (not a bool) whose magnitude is at most :data:`MAX_INT`."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise error(f"{what} must be a number, got {short(v)}")
    if isinstance(v, int) and abs(v) > MAX_INT:
        raise error(f"{what} = {short(v)} is out of range (at most {MAX_INT:,} in magnitude)")
    if not math.isfinite(v) or abs(v) > MAX_INT:
        raise error(f"{what} = {short(v)} is out of range (finite, at most {MAX_INT:,} in magnitude)")
    return float(v)


def check_finite(v: float, what: str, error: type[NpukitError]) -> float:
    """``v`` if it is finite, else ``error`` naming ``what`` (a result that overflowed or became NaN)."""
    if not math.isfinite(v):
        raise error(f"{what} is {v} (overflow: an input number is too large); check that component's inputs")
    return v


def short(v: Any, limit: int = 40) -> str:
    """``repr(v)`` cut to ``limit`` characters (a 401-digit integer is not printed whole)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**limit:
        return f"<{int(abs(v).bit_length() * 0.30103) + 1}-digit integer>"
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


MAX_SHAPE_DIMS = 8  # axes of an --input-shape
MAX_SHAPE_ELEMENTS = 2**28  # elements of an example input tensor built from --input-shape (1 GiB in float32)


def parse_dim(text: str, what: str, error: type[NpukitError]) -> int:
    """A positive decimal integer of at most 12 ASCII digits (checked before ``int()``, so 10^400 is one line, and a
    superscript or full-width digit, which ``str.isdigit`` accepts and ``int()`` refuses or reads, is refused)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t) > 12 or int(t) <= 0:
        raise error(f"{what}: {short(t)} must be a positive integer of at most 12 digits")
    return int(t)


def check_shape(dims: tuple[int, ...] | list[int], what: str, error: type[NpukitError],
                max_elements: int = MAX_SHAPE_ELEMENTS) -> None:
    """Refuse a shape with more than :data:`MAX_SHAPE_DIMS` axes or more than ``max_elements`` elements."""
    if len(dims) > MAX_SHAPE_DIMS:
        raise error(f"{what} has {len(dims)} axes, more than the limit of {MAX_SHAPE_DIMS}")
    n = 1
    for d in dims:
        n *= d
    if n > max_elements:
        raise error(f"{what} has {short(n)} elements, more than the limit of {max_elements:,}")


def check_integers(obj: Any, what: str, error: type[NpukitError]) -> None:
    """Refuse any integer beyond :data:`MAX_INT` anywhere in a parsed JSON/YAML/TOML value (an explicit stack,
    no recursion; depth is already bounded by the loaders)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
            raise error(f"{what} holds the integer {short(v)}, out of range (at most {MAX_INT:,} in magnitude)")
