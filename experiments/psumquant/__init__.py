"""PsumQuant experiments (issue 4)."""
