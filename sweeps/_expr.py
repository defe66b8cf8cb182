"""Derived sweep parameters: ``[derived]`` keys computed from other keys by a small, bounded expression
language (never Python ``eval``).

A sweep spec may hold::

    [grid]
    rows = [32, 64, 128]
    "sram_kib.ifmap" = [256, 1024]
    [derived]
    cols = "rows"                                   # square arrays
    "sram_kib.filter" = "sram_kib.ifmap"            # one value for several SRAMs
    "sram_kib.psum" = "sram_kib.ifmap / 2"
    dram_bandwidth_bytes_per_cycle = "max(16, rows / 2)"

An expression is numbers, names of grid or derived keys (dotted, as in the grid; or with ``_`` for
``.``), ``+ - * / // % **``, unary ``-``, parentheses, and ``min``, ``max``, ``round``, ``floor``,
``ceil``, ``log2``, ``sqrt``; or a quoted string constant. At most 200 characters, 64 nodes, exponents
up to 64, results finite. Derived keys may use earlier derived keys (in file order).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from ..sim.errors import ConfigError

MAX_CHARS = 200
MAX_NODES = 64
MAX_EXPONENT = 64
_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "round": round, "floor": math.floor, "ceil": math.ceil, "log2": math.log2, "sqrt": math.sqrt,
}
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}


def _name(node: ast.AST) -> str | None:
    """``a.b`` or ``a`` as a dotted name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def compile_expr(text: Any, where: str) -> ast.Expression:
    """Parse and check ``text`` (ConfigError naming ``where`` for anything outside the language)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where} must be an expression string such as \"rows\" or \"rows * 2\", got {text!r}")
    if len(text) > MAX_CHARS:
        raise ConfigError(f"{where} is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ConfigError(f"{where} = {text!r} is not a valid expression") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ConfigError(f"{where} = {text!r} has more than {MAX_NODES} parts; simplify it")
    for n in nodes:
        ok = isinstance(n, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Call | ast.Load | ast.operator | ast.unaryop
                        | ast.Name | ast.Attribute)
        if isinstance(n, ast.Constant):
            ok = isinstance(n.value, int | float | str) and not isinstance(n.value, bool)
        if isinstance(n, ast.Call):
            ok = isinstance(n.func, ast.Name) and n.func.id in _FUNCS and not n.keywords and 1 <= len(n.args) <= 8
        if isinstance(n, ast.UnaryOp):
            ok = isinstance(n.op, ast.USub | ast.UAdd)
        if isinstance(n, ast.BinOp):
            ok = type(n.op) in _BINOPS or isinstance(n.op, ast.Pow)
        if isinstance(n, ast.Attribute) and _name(n) is None:
            ok = False
        if not ok:
            raise ConfigError(f"{where} = {text!r}: '{type(n).__name__}' is not allowed (numbers, keys, + - * / // % **, "
                              f"{', '.join(_FUNCS)})")
    return tree


def evaluate(tree: ast.Expression, env: dict[str, Any], where: str) -> Any:
    """The value of a checked expression over ``env`` (key -> value; dotted keys)."""

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name | ast.Attribute):
            key = _name(n)
            if key in env:
                return env[key]
            for k, v in env.items():  # sram_kib_ifmap: the column name of sram_kib.ifmap
                if k.replace(".", "_") == key:
                    return v
            raise ConfigError(f"{where}: unknown key '{key}' (use an arch key such as rows, cols, sram_kib.ifmap)")
        if isinstance(n, ast.UnaryOp):
            v = _num(ev(n.operand), where)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = _num(ev(n.left), where), _num(ev(n.right), where)
            if isinstance(n.op, ast.Pow):
                if abs(b) > MAX_EXPONENT or abs(a) > 1e12:
                    raise ConfigError(f"{where}: power {a!r} ** {b!r} is out of range (exponent at most {MAX_EXPONENT})")
                return a ** b
            return _BINOPS[type(n.op)](a, b)
        if isinstance(n, ast.Call):
            return _FUNCS[n.func.id](*(_num(ev(x), where) for x in n.args))  # type: ignore[attr-defined]
        raise ConfigError(f"{where}: cannot evaluate {type(n).__name__}")

    try:
        v = ev(tree)
    except ZeroDivisionError:
        raise ConfigError(f"{where}: division by zero") from None
    except (ValueError, OverflowError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ConfigError(f"{where}: the result {v!r} is not finite")
        if v.is_integer():
            v = int(v)
    if isinstance(v, complex):
        raise ConfigError(f"{where}: the result is not a real number")
    return v


def _num(v: Any, where: str) -> int | float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ConfigError(f"{where}: {v!r} is not a number")
    return v


def parse_derived(raw: Any, known: list[str], grid: dict[str, Any], origin: str) -> dict[str, ast.Expression]:
    """Validate a ``[derived]`` table: key -> compiled expression, each key a known arch key not in the
    grid; unquoted dotted keys (``[derived.sram_kib]``) are flattened."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: 'derived' must be a table [derived] of key = \"expression\"")
    flat: dict[str, Any] = {}
    for key, val in raw.items():
        if isinstance(val, dict):
            for sub, v in val.items():
                flat[f"{key}.{sub}"] = v
        else:
            flat[key] = val
    out: dict[str, ast.Expression] = {}
    for key, text in flat.items():
        if key not in known:
            raise ConfigError(f"{origin}: unknown derived key '{key}' (known: {', '.join(known)})")
        if key in grid:
            raise ConfigError(f"{origin}: '{key}' is both in [grid] and in [derived]; keep it in one")
        out[key] = compile_expr(text, f"{origin}: derived '{key}'")
    return out


def apply_derived(derived: dict[str, ast.Expression], overrides: dict[str, Any], base: dict[str, Any],
                  origin: str) -> dict[str, Any]:
    """``overrides`` plus every derived key's value, evaluated in order over the base arch's values
    (``base``: dotted key -> value), the grid point's and the earlier derived ones."""
    env = dict(base) | overrides
    out = dict(overrides)
    for key, tree in derived.items():
        out[key] = env[key] = evaluate(tree, env, f"{origin}: derived '{key}'")
    return out
