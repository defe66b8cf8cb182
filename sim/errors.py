"""Typed exceptions of npukit. The CLI turns any :class:`NpukitError` into one line and exit code 2."""


class NpukitError(Exception):
    """Base class of every user-facing npukit error; its message is one line naming problem and fix."""


class ConfigError(NpukitError):
    """A malformed or impossible architecture, sweep or workload configuration."""


class EnergyTableError(NpukitError):
    """An energy table with an unknown key, a missing or a negative energy."""


class WorkloadError(ConfigError):
    """An unknown workload, an impossible layer shape or a malformed topology file."""


class LedgerError(NpukitError):
    """A malformed ledger file or an inconsistent ledger operation."""
