"""The audit trail of forgetting (``forget_log`` table; ``emem forget-log DB``).

One row per forget or retention run: when, who, why, the selector with its
free text withheld, the counts, and the ids removed. Never content: the
trail must be readable by anyone who may know *that* something was
forgotten, without telling them *what*. It is a SQLite table written in an
ordinary logged transaction, so it survives ``emem rebuild`` and export.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ForgetEntry:
    id: int
    at: float
    who: str
    reason: str
    kind: str
    selector: dict[str, Any]
    counts: dict[str, Any]
    ids: list[str]


def record(conn: Any, *, at: float, who: str, reason: str, kind: str, selector: dict[str, Any],
           counts: dict[str, Any], ids: list[str]) -> int:
    cursor = conn.execute(
        "INSERT INTO forget_log(at, who, reason, kind, selector, counts, ids) VALUES(?,?,?,?,?,?,?)",
        (at, who, reason, kind, json.dumps(selector, sort_keys=True), json.dumps(counts, sort_keys=True),
         json.dumps(ids)))
    return int(cursor.lastrowid or 0)


def entries(conn: sqlite3.Connection, limit: int = 0) -> list[ForgetEntry]:
    sql = "SELECT id, at, who, reason, kind, selector, counts, ids FROM forget_log ORDER BY id"
    if limit > 0:
        sql = f"SELECT * FROM ({sql} DESC LIMIT {int(limit)}) ORDER BY id"
    return [ForgetEntry(i, at, who, reason, kind, json.loads(sel), json.loads(counts), json.loads(ids))
            for i, at, who, reason, kind, sel, counts, ids in conn.execute(sql)]
