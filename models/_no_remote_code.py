"""Never run code from a model config: transformers and diffusers can import Python files named by a config
(``auto_map``, ``custom_pipeline``) after asking on standard input. npukit builds models from configs on the
meta device only, so a config asking for custom code is refused with one line before either library sees it,
and every ``from_config``/``from_pretrained`` call passes :data:`NO_REMOTE_CODE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sim import NpukitError, check_size, load_json

# keyword arguments for every transformers/diffusers call that builds or loads a model or config
NO_REMOTE_CODE: dict[str, Any] = {"trust_remote_code": False}
# config keys through which transformers or diffusers load Python code from beside (or outside) the config
REMOTE_CODE_KEYS = ("auto_map", "custom_pipeline", "custom_pipelines", "custom_revision", "trust_remote_code")


def refuse_remote_code(cfg: dict[str, Any], what: str, error: type[NpukitError]) -> None:
    """Raise ``error`` (one line) when the config dict ``cfg`` names custom code (see :data:`REMOTE_CODE_KEYS`)."""
    found = [k for k in REMOTE_CODE_KEYS if k in cfg]
    if found:
        raise error(f"{what} asks for custom model code ('{found[0]}'); npukit never runs code from a config: "
                    "remove that key and use a model class transformers/diffusers ship")


def config_dict(path: Path, error: type[NpukitError]) -> dict[str, Any]:
    """The JSON object in the config file ``path``, read with npukit's size and depth limits."""
    check_size(path, "config file", error)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read config file '{path}' ({exc})") from None
    cfg = load_json(text, f"config file '{path}'", error)
    if not isinstance(cfg, dict):
        raise error(f"config file '{path}' must hold a JSON object")
    return cfg


def auto_kwargs(cls: Any) -> dict[str, Any]:
    """:data:`NO_REMOTE_CODE` for transformers' Auto classes (which take it), nothing for a concrete class."""
    return NO_REMOTE_CODE if getattr(cls, "__module__", "").startswith("transformers.models.auto") else {}
