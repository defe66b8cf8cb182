"""Peer tools (SCALE-Sim, ZigZag) in their own virtualenvs, never npukit dependencies: find or create one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def peer_python(explicit: str | None, env_var: str, venv: Path, pin: tuple[str, ...], probe: str,
                install: bool) -> str | None:
    """The python of the peer's virtualenv: ``explicit``, else ``$env_var``, else ``venv`` (created with ``pin``
    when ``install``); None when it is absent or cannot run ``probe`` (an import statement)."""
    exe = explicit or os.environ.get(env_var) or str(venv / "bin" / "python")
    if install and not Path(exe).exists():
        print(f"installing {' '.join(pin)} into {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *pin], check=True)
        exe = str(venv / "bin" / "python")
    if not Path(exe).exists():
        return None
    ok = subprocess.run([exe, "-c", probe], capture_output=True).returncode == 0
    return exe if ok else None
