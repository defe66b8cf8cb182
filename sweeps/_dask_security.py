"""TLS for npukit's Dask clusters.

A Dask worker runs whatever code its scheduler sends, as the user who started it; a scheduler without TLS on
127.0.0.1 lets any local user submit code. So:

* every cluster npukit starts (``--dask-local N``) uses TLS with a certificate made for that run
  (:func:`local_security`: ``distributed.security.Security.temporary()``, a fresh self-signed CA and key held in
  this process's memory), and mutual TLS is required: a client without that run's key is refused;
* an existing cluster (``--scheduler ADDR``) is driven with the security the user gives: ``--tls-ca-file``,
  ``--tls-cert`` and ``--tls-key`` (:func:`security_from_files`), else Dask's own configuration
  (``distributed.comm.tls.*`` in ``~/.config/dask/*.yaml`` or ``DASK_DISTRIBUTED__COMM__TLS__*``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sim.errors import ConfigError


def local_security() -> Any:
    """A ``distributed.security.Security`` made for one run: TLS required, a temporary self-signed CA/key."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:  # Security.temporary needs the 'cryptography' package
        raise ConfigError(f"a TLS-protected --dask-local cluster needs the cryptography package ({exc}); "
                          "pip install cryptography") from None


def security_from_files(ca_file: str | None, cert: str | None, key: str | None) -> Any:
    """A ``Security`` from PEM files for ``--scheduler`` (all three, or none: then None, Dask's config applies)."""
    given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
    if not any(given.values()):
        return None
    missing = [k for k, v in given.items() if not v]
    if missing:
        raise ConfigError(f"TLS to a Dask scheduler needs --tls-ca-file, --tls-cert and --tls-key together; "
                          f"missing {', '.join(missing)}")
    for flag, v in given.items():
        if not Path(str(v)).is_file():
            raise ConfigError(f"{flag} '{v}' is not a file; pass the PEM file of the cluster's TLS setup")
    from distributed.security import Security

    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
