"""Text that reaches a terminal: control characters escaped, any encoding survived, a closed pipe ended quietly.

* :func:`escape_controls`: ESC, BEL, CR, DEL and every other C0/C1 control except the newline become
  ``\\xNN``, so a name from a config or a model (an arch, a layer) cannot move the cursor, ring the bell,
  overwrite a line or inject terminal escape sequences.
* :func:`tolerant_streams`: stdout/stderr write what their encoding cannot hold as ``\\uNNNN`` escapes
  (``LANG=C``: an ASCII terminal, non-ASCII layer names) instead of raising ``UnicodeEncodeError``.
* :func:`quiet_broken_pipe`: after ``BrokenPipeError`` (``npukit sim ... | head -1``), stdout is pointed at
  ``/dev/null`` so Python's exit flush does not print a second traceback.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe


def escape_controls(text: Any) -> str:
    """``str(text)`` with every control character but ``\\n`` written as ``\\xNN``."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def tolerant_streams() -> None:
    """Make ``sys.stdout``/``sys.stderr`` escape characters their encoding cannot write (never raise)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a detached or closed stream
                pass


def quiet_broken_pipe() -> int:
    """Silence stdout after its reader went away; returns :data:`EXIT_BROKEN_PIPE`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a captured stream)
        pass
    return EXIT_BROKEN_PIPE
