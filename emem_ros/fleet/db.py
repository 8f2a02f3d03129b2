"""Connections to the fleet store: the psycopg import and plain-words errors in one place."""

from __future__ import annotations

import re
from typing import Any

from emem_ros.fleet.errors import FleetError, FleetUnavailableError

CONNECT_TIMEOUT = 5
"""Seconds to wait for PostgreSQL before calling it unreachable (a sync then retries later)."""
_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]*@")


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return _PASSWORD.sub(r"\1***@", url)


def psycopg_module() -> Any:
    try:
        import psycopg
    except ImportError:
        raise FleetError("the fleet store needs the PostgreSQL driver psycopg: "
                         "pip install 'emem_ros[fleet]' (or 'psycopg[binary]')") from None
    return psycopg


def connect(url: str, autocommit: bool = False) -> Any:
    """A psycopg connection, or FleetUnavailableError saying where nothing answered."""
    psycopg = psycopg_module()
    if not url.startswith(("postgresql://", "postgres://")) and "=" not in url:
        raise FleetError(f"not a PostgreSQL URL: {redact(url)!r} (expected postgresql://user@host:port/dbname)")
    try:
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.OperationalError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FleetUnavailableError(f"cannot reach the fleet store at {redact(url)}: {detail}") from exc


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` means the server went away (retry later), not that our SQL was wrong."""
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
