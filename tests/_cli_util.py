"""Helpers shared by the tests of bad command lines."""

from __future__ import annotations

import pytest

from npukit.cli import main


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run ``npukit argv`` and check it exits 2 with one stderr line holding every needle; returns the line."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err
