"""Peer tools (SCALE-Sim, ZigZag) in their own virtualenvs, never npukit dependencies: find or create one."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path


def newer_python(major: int, minor: int) -> str | None:
    """An interpreter of Python ``major.minor`` or newer that runs on this machine (pyenv's versions, then
    ``python3.N`` on PATH), the oldest such minor version first; None when there is none."""
    for n in range(minor, 20):
        cands = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{major}.{n}.*/bin/python")))
        cands += [exe for exe in [shutil.which(f"python{major}.{n}")] if exe]
        for exe in cands:
            if subprocess.run([exe, "--version"], capture_output=True).returncode == 0:
                return exe
    return None


def peer_python(explicit: str | None, env_var: str, venv: Path, pin: tuple[str, ...], probe: str,
                install: bool, base: str | None = None) -> str | None:
    """The python of the peer's virtualenv: ``explicit``, else ``$env_var``, else ``venv`` (created with ``pin``
    on ``base``, default this interpreter, when ``install``); None when it is absent, cannot be installed or cannot
    be run at all (a folder, a file without execute permission: one line says why each time) or cannot run
    ``probe`` (an import statement)."""
    exe = explicit or os.environ.get(env_var) or str(venv / "bin" / "python")
    if install and not Path(exe).exists():
        print(f"installing {' '.join(pin)} into {venv}")
        try:
            subprocess.run([base or sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *pin], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except subprocess.CalledProcessError as e:
            err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
            why = next((ln for ln in err if ln.startswith("ERROR")), err[-1] if err else "")
            print(f"could not install {' '.join(pin)} into {venv}: {why}")
            shutil.rmtree(venv, ignore_errors=True)
            return None
        exe = str(venv / "bin" / "python")
    if not Path(exe).exists():
        return None
    try:
        ok = subprocess.run([exe, "-c", probe], capture_output=True).returncode == 0
    except OSError as e:  # a folder or a file this user cannot run: absent, as far as the caller goes
        print(f"cannot run {exe!r}: {e.strerror or e}")
        return None
    return exe if ok else None
