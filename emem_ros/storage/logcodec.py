"""Encodings of one operation-log record (a list of SQL statements with parameters).

Two formats, chosen per segment by its magic (see ``oplog``):

- **v1** (``EMEMLOG1``): JSON of ``[sql, params, many]`` with bytes as base64,
  zlib level 1. Still read, never written any more.
- **v2** (``EMEMLOG2``): a small binary format that is both smaller and
  cheaper to write (figures in bench/bench_oplog.py):

  * ``executemany`` rows are stored **by column**: all-float columns as
    packed doubles and all-int columns as packed int64 deltas, both
    byte-shuffled (the bytes of equal significance side by side, which zlib
    compresses well: stamps, ids and repeated values shrink to almost
    nothing); other columns as JSON lists;
  * single-statement parameters are JSON (the C encoder is fast), a few
    values tagged binary;
  * the SQL the memory writes most often is stored as an index into a
    fixed table (``KNOWN_SQL``), other SQL as text;
  * bytes (embedding vectors) are stored raw, shuffled in 4-byte lanes
    (float32), never base64;
  * the record is zlib-compressed only when it is large enough to gain
    (starting a zlib stream costs more than a small record's whole write).

Every value round-trips exactly: int stays int, float stays float (bit for
bit, NaN and -0.0 included), bytes stay bytes, so a replay writes the same
rows.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any, Optional, Sequence

import numpy as np

Statement = tuple[str, Any, bool]  # (sql, params or rows, many)


class CodecError(ValueError):
    """A record's payload cannot be decoded (damaged or not written by us)."""


# ---------------------------------------------------------------------- v1 (read; kept for tests)
def _v1_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"cannot log a value of type {type(value).__name__}")


def _v1_hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$b" in obj:
        return base64.b64decode(obj["$b"])
    return obj


def encode_v1(statements: list[Statement]) -> bytes:
    body = json.dumps([[sql, params, int(many)] for sql, params, many in statements],
                      separators=(",", ":"), default=_v1_default)
    return zlib.compress(body.encode("utf-8"), 1)


def decode_v1(payload: bytes) -> list[Statement]:
    try:
        items = json.loads(zlib.decompress(payload).decode("utf-8"), object_hook=_v1_hook)
        return [(sql, params, bool(many)) for sql, params, many in items]
    except (ValueError, TypeError, zlib.error) as exc:
        raise CodecError(str(exc)) from exc


# ---------------------------------------------------------------------- v2
COMPRESS_ABOVE = 1024
"""Bytes of encoded record above which zlib pays for its start-up cost."""
ZLIB_LEVEL = 1
"""The fast level: on our column-shuffled records it compresses nearly as well as 6 at a fraction of the
cost (bench/bench_oplog.py). The level is not part of the format: any zlib stream decodes."""
ZLIB_LEVEL_LARGE = 1
"""For records that are mostly vectors, which hardly compress."""

_FLAG_RAW, _FLAG_ZLIB = 0, 1
# Statement kinds.
_ONE, _MANY_LIST, _MANY_COLUMNS = 0, 1, 2
# Parameter encodings.
_P_JSON, _P_VALUES = b"J", b"V"
# Column encodings.
_C_NONE, _C_FLOAT, _C_INT, _C_JSON, _C_VALUES = b"N", b"D", b"I", b"J", b"V"
# Value tags (the generic path, used where bytes occur).
_T_NONE, _T_FALSE, _T_TRUE, _T_INT, _T_BIGINT, _T_FLOAT, _T_STR, _T_BYTES, _T_BYTES4, _T_LIST, _T_DICT = (
    b"n", b"f", b"t", b"i", b"I", b"d", b"s", b"b", b"4", b"l", b"m")

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_SQL_CACHE: dict[str, bytes] = {}

# SQL the memory writes most often, stored in a record as its index in this
# table instead of its text (a small record would otherwise be mostly SQL).
# Part of the v2 format: entries may be appended, never changed or removed.
# SQL that is not here (or no longer matches byte for byte) is stored as text.
KNOWN_SQL: tuple[str, ...] = (
    'INSERT INTO texts(text, embedding) VALUES(?, ?)',
    'INSERT INTO texts_fts(rowid, text) VALUES(?, ?)',
    'INSERT INTO observations(id, text_id, stamp, layer, source_type, x, y, z, frame_id, confidence, episode_id, tier, tier_since, value, metadata) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)',
    'UPDATE texts SET refs = refs + ? WHERE id = ?',
    'INSERT INTO places(text_id, layer, cx, cy, cz, count, sx, sy, sz, first_stamp, last_stamp, last_obs_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(text_id, layer, cx, cy, cz) DO UPDATE SET count = count + excluded.count, sx = sx + excluded.sx, sy = sy + excluded.sy, sz = sz + excluded.sz, first_stamp = MIN(first_stamp, excluded.first_stamp), last_obs_id = CASE WHEN excluded.last_stamp >= last_stamp   THEN excluded.last_obs_id ELSE last_obs_id END, last_stamp = MAX(last_stamp, excluded.last_stamp)',
    'INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)',
    "INSERT INTO experiences(id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z, supersedes) SELECT ?1, json_extract(c, '$.goal'), json_extract(c, '$.action'), json_extract(c, '$.result'), json_extract(c, '$.reflection'), json_extract(c, '$.success'), json_extract(c, '$.tags'), NULLIF(json_extract(c, '$.metadata'), '{}'), json_extract(c, '$.stamp'), CAST(substr(json_extract(c, '$.episode'), 4) AS INTEGER), json_extract(c, '$.position[0]'), json_extract(c, '$.position[1]'), json_extract(c, '$.position[2]'), json_extract(c, '$.supersedes') FROM (SELECT ?2 AS c) WHERE true ON CONFLICT(id) DO NOTHING",
    'INSERT INTO experiences_fts(rowid, goal, action, result, reflection, tags) SELECT n, goal, action, result, reflection, tags FROM experiences WHERE id=? AND changes() = 1',
    'UPDATE experiences SET embedding=? WHERE n=?',
    'INSERT INTO episodes(name, start, status, parent_id, previous_id, goal, metadata) VALUES(?,?,?,?,?,?,?)',
    'UPDATE episodes SET end=?, status=?, result=COALESCE(?, result), reflection=COALESCE(?, reflection), success=COALESCE(?, success), action=COALESCE(?, action) WHERE id=?',
    'UPDATE episodes SET summary=?, embedding=?, consolidated=1 WHERE id=?',
    'INSERT INTO gists(text, cx, cy, cz, radius, time_start, time_end, source_count, layers, episode_id, created_at, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)',
    'INSERT INTO gists_fts(rowid, text) VALUES(?, ?)',
    'INSERT INTO entities(name, entity_type, x, y, z, spread, first_seen, last_seen, sightings, confidence, layer, metadata, embedding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)',
    'INSERT INTO edges(kind, src, dst, weight, updated) VALUES(?,?,?,?,?) ON CONFLICT(kind, src, dst) DO UPDATE SET weight = weight + excluded.weight, updated = excluded.updated',
    'UPDATE texts SET refs = refs - ? WHERE id = ?',
    # The experiences insert again, with plain "?" placeholders: Python 3.12 deprecates (3.14 refuses)
    # numbered ones bound from a list. Logs written before keep the entry above; see LEGACY_SQL.
    "INSERT INTO experiences(id, goal, action, result, reflection, success, tags, metadata, stamp, episode_id, x, y, z, supersedes) SELECT ?, json_extract(c, '$.goal'), json_extract(c, '$.action'), json_extract(c, '$.result'), json_extract(c, '$.reflection'), json_extract(c, '$.success'), json_extract(c, '$.tags'), NULLIF(json_extract(c, '$.metadata'), '{}'), json_extract(c, '$.stamp'), CAST(substr(json_extract(c, '$.episode'), 4) AS INTEGER), json_extract(c, '$.position[0]'), json_extract(c, '$.position[1]'), json_extract(c, '$.position[2]'), json_extract(c, '$.supersedes') FROM (SELECT ? AS c) WHERE true ON CONFLICT(id) DO NOTHING",
)
LEGACY_SQL: dict[str, str] = {KNOWN_SQL[6]: KNOWN_SQL[-1]}
"""Statements older logs hold, and what replaying them runs instead (same effect, same parameters)."""
_KNOWN_INDEX = {sql: n for n, sql in enumerate(KNOWN_SQL)}
_SMALL_LIST_HEAD = [bytes([_ONE]) + _P_VALUES + _T_LIST + _U32.pack(n) for n in range(4)]
_KNOWN_FLAG = 0x80000000


def encode_v2(statements: list[Statement]) -> bytes:
    small = _encode_small(statements)
    if small is not None:
        return small
    out = bytearray(b"\x00")  # the flag byte, set below
    blobs = [0]
    out += _U32.pack(len(statements))
    for sql, params, many in statements:
        head = _SQL_CACHE.get(sql)
        if head is None:
            head = _sql_head(sql)
        out += head
        if not many:
            if type(params) is list and len(params) <= 3:  # a few values: tagging beats a JSON call
                out += _SMALL_LIST_HEAD[len(params)]
                for value in params:
                    if type(value) is str:
                        raw = value.encode("utf-8")
                        out += _T_STR
                        out += _U32.pack(len(raw))
                        out += raw
                    else:
                        _put_value(out, value, blobs)
            else:
                out.append(_ONE)
                _put_params(out, params, blobs)
        elif params and all(type(r) is list or type(r) is tuple for r in params) and len(set(map(len, params))) == 1:
            out.append(_MANY_COLUMNS)
            _put_columns(out, params, blobs)
        else:
            out.append(_MANY_LIST)
            _put_value(out, list(params), blobs)
    if len(out) > COMPRESS_ABOVE:
        level = ZLIB_LEVEL_LARGE if blobs[0] * 2 > len(out) else ZLIB_LEVEL
        return b"\x01" + zlib.compress(memoryview(out)[1:], level)
    return bytes(out)


def _encode_small(statements: list[Statement]) -> Optional[bytes]:
    """The same bytes as the general path, for a few statements with a few text parameters.

    Such records (an experience, a note) are written on the caller's path, so
    they skip the general machinery; anything else returns None.
    """
    parts = [b"\x00", _U32.pack(len(statements))]
    size = 0
    for sql, params, many in statements:
        if many or type(params) is not list or len(params) > 3:
            return None
        head = _SQL_CACHE.get(sql)
        if head is None:
            head = _sql_head(sql)
        parts.append(head)
        parts.append(_SMALL_LIST_HEAD[len(params)])
        for value in params:
            if type(value) is not str:
                return None
            raw = value.encode("utf-8")
            parts.append(_T_STR)
            parts.append(_U32.pack(len(raw)))
            parts.append(raw)
            size += len(raw)
    if size > COMPRESS_ABOVE // 2:
        return None  # may be large enough to compress: the general path decides
    body = b"".join(parts)
    return body if len(body) <= COMPRESS_ABOVE + 1 else None


def _sql_head(sql: str) -> bytes:
    known = _KNOWN_INDEX.get(sql)
    if known is not None:
        head = _U32.pack(_KNOWN_FLAG | known)
    else:
        raw = sql.encode("utf-8")
        head = _U32.pack(len(raw)) + raw
    if len(_SQL_CACHE) < 4096:  # our SQL is a small fixed set; never grow without bound
        _SQL_CACHE[sql] = head
    return head


def decode_v2(payload: bytes) -> list[Statement]:
    try:
        if not payload:
            raise CodecError("empty record")
        flag, body = payload[0], payload[1:]
        if flag == _FLAG_ZLIB:
            body = zlib.decompress(body)
        elif flag != _FLAG_RAW:
            raise CodecError(f"unknown record flag {flag}")
        reader = _Reader(memoryview(body))
        statements: list[Statement] = []
        for _ in range(reader.u32()):
            sql = reader.sql()
            kind = reader.byte()
            if kind == _ONE:
                statements.append((sql, _get_params(reader), False))
            elif kind == _MANY_COLUMNS:
                statements.append((sql, _get_columns(reader), True))
            elif kind == _MANY_LIST:
                statements.append((sql, reader.value(), True))
            else:
                raise CodecError(f"unknown statement kind {kind}")
        if reader.pos != len(body):
            raise CodecError(f"{len(body) - reader.pos} unexpected bytes after the last statement")
        return statements
    except CodecError:
        raise
    except (ValueError, TypeError, IndexError, struct.error, zlib.error, UnicodeDecodeError) as exc:
        raise CodecError(f"{type(exc).__name__}: {exc}") from exc


# -- writing helpers ------------------------------------------------------
def _put_params(out: bytearray, params: Any, blobs: list[int]) -> None:
    try:
        text = _JSON.encode(params).encode("utf-8")
    except TypeError:  # bytes inside: the tagged binary path
        out += _P_VALUES
        _put_value(out, params, blobs)
        return
    out += _P_JSON
    out += _U32.pack(len(text))
    out += text


def _put_columns(out: bytearray, rows: list[list[Any]], blobs: list[int]) -> None:
    n_rows, n_cols = len(rows), len(rows[0])
    out += _U32.pack(n_rows)
    out += _U32.pack(n_cols)
    for column in zip(*rows):
        _put_column(out, column, n_rows, blobs)


def _put_column(out: bytearray, column: tuple[Any, ...], n_rows: int, blobs: list[int]) -> None:
    types = set(map(type, column))
    if types == {type(None)}:
        out += _C_NONE
        return
    numeric = types - {type(None)}
    if numeric == {float} or numeric == {int}:
        values: Sequence[Any]
        if len(numeric) == len(types):  # no NULL: the common case, without a pass per value
            present = None
            values = column
        else:
            present = np.fromiter((v is not None for v in column), dtype=bool, count=n_rows)
            values = [v for v in column if v is not None]
        if numeric == {float}:
            packed = np.array(values, dtype="<f8")
            tag = _C_FLOAT
        elif min(values) >= _INT64_MIN and max(values) <= _INT64_MAX:
            ints = np.array(values, dtype="<i8")
            packed = np.diff(ints, prepend=np.int64(0))  # wraps like int64; undone by cumsum
            tag = _C_INT
        else:
            packed = None
            tag = b""
        if packed is not None:
            out += tag
            if present is None or present.all():
                out.append(0)
            else:
                out.append(1)
                out += np.packbits(present).tobytes()
            out += _U32.pack(len(values))
            out += _shuffle(packed.tobytes(), 8)
            return
    if bytes in types or bytearray in types or memoryview in types:
        out += _C_VALUES
        for value in column:
            _put_value(out, value, blobs)
        return
    try:
        text = _JSON.encode(list(column)).encode("utf-8")
    except TypeError:
        out += _C_VALUES
        for value in column:
            _put_value(out, value, blobs)
        return
    out += _C_JSON
    out += _U32.pack(len(text))
    out += text


def _put_value(out: bytearray, value: Any, blobs: Optional[list[int]] = None) -> None:
    """Append one tagged value; ``blobs[0]`` counts the raw bytes of bytes values."""
    kind = type(value)
    if kind is str:  # the common case first
        raw = value.encode("utf-8")
        out += _T_STR
        out += _U32.pack(len(raw))
        out += raw
    elif value is None:
        out += _T_NONE
    elif kind is bool:
        out += _T_TRUE if value else _T_FALSE
    elif kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            out += _T_INT
            out += _I64.pack(value)
        else:
            out += _T_BIGINT
            _put_text(out, str(value))
    elif kind is float:
        out += _T_FLOAT
        out += _F64.pack(value)
    elif kind is str:
        out += _T_STR
        _put_text(out, value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if blobs is not None:
            blobs[0] += len(raw)
        if len(raw) % 4 == 0 and len(raw) >= 64:
            out += _T_BYTES4
            raw = _shuffle(raw, 4)
        else:
            out += _T_BYTES
        out += _U32.pack(len(raw))
        out += raw
    elif isinstance(value, (list, tuple)):
        out += _T_LIST
        out += _U32.pack(len(value))
        for item in value:
            _put_value(out, item, blobs)
    elif isinstance(value, dict):
        out += _T_DICT
        out += _U32.pack(len(value))
        for key, item in value.items():
            _put_text(out, str(key))
            _put_value(out, item, blobs)
    elif isinstance(value, int):  # int subclasses (numpy ints arrive converted by sqlite3 anyway)
        _put_value(out, int(value), blobs)
    elif isinstance(value, float):
        _put_value(out, float(value), blobs)
    else:
        raise TypeError(f"cannot log a value of type {kind.__name__}")


def _put_text(out: bytearray, text: str) -> None:
    raw = text.encode("utf-8")
    out += _U32.pack(len(raw))
    out += raw


def _shuffle(raw: bytes, lane: int) -> bytes:
    """Byte ``k`` of every item together, for k = 0..lane-1 (lossless; compresses better)."""
    return bytes(np.frombuffer(raw, dtype=np.uint8).reshape(-1, lane).T.tobytes())


def _unshuffle(raw: bytes, lane: int) -> bytes:
    return bytes(np.frombuffer(raw, dtype=np.uint8).reshape(lane, -1).T.tobytes())


# -- reading helpers ------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise CodecError("record ends early")
        chunk = bytes(self.buf[self.pos:end])
        self.pos = end
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def text(self) -> str:
        return self.take(self.u32()).decode("utf-8")

    def sql(self) -> str:
        head = self.u32()
        if head & _KNOWN_FLAG:
            index = head & ~_KNOWN_FLAG
            if index >= len(KNOWN_SQL):
                raise CodecError(f"unknown SQL table entry {index} (a log from a newer version?)")
            return KNOWN_SQL[index]
        return self.take(head).decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.take(self.u32()).decode("utf-8"))

    def value(self) -> Any:
        tag = self.take(1)
        if tag == _T_NONE:
            return None
        if tag == _T_TRUE:
            return True
        if tag == _T_FALSE:
            return False
        if tag == _T_INT:
            return _I64.unpack(self.take(8))[0]
        if tag == _T_BIGINT:
            return int(self.text())
        if tag == _T_FLOAT:
            return _F64.unpack(self.take(8))[0]
        if tag == _T_STR:
            return self.text()
        if tag == _T_BYTES:
            return self.take(self.u32())
        if tag == _T_BYTES4:
            return _unshuffle(self.take(self.u32()), 4)
        if tag == _T_LIST:
            return [self.value() for _ in range(self.u32())]
        if tag == _T_DICT:
            return {self.text(): self.value() for _ in range(self.u32())}
        raise CodecError(f"unknown value tag {tag!r}")


def _get_params(reader: _Reader) -> Any:
    kind = reader.take(1)
    if kind == _P_JSON:
        return reader.json()
    if kind == _P_VALUES:
        return reader.value()
    raise CodecError(f"unknown parameter encoding {kind!r}")


def _get_columns(reader: _Reader) -> list[list[Any]]:
    n_rows, n_cols = reader.u32(), reader.u32()
    columns = [_get_column(reader, n_rows) for _ in range(n_cols)]
    return [list(row) for row in zip(*columns)] if n_cols else [[] for _ in range(n_rows)]


def _get_column(reader: _Reader, n_rows: int) -> list[Any]:
    kind = reader.take(1)
    if kind == _C_NONE:
        return [None] * n_rows
    if kind in (_C_FLOAT, _C_INT):
        has_nulls = reader.byte()
        present = None
        if has_nulls:
            bits = np.frombuffer(reader.take((n_rows + 7) // 8), dtype=np.uint8)
            present = np.unpackbits(bits, count=n_rows).astype(bool)
        count = reader.u32()
        raw = _unshuffle(reader.take(count * 8), 8)
        numbers: list[Any]
        if kind == _C_FLOAT:
            numbers = np.frombuffer(raw, dtype="<f8").tolist()
        else:
            numbers = np.cumsum(np.frombuffer(raw, dtype="<i8"), dtype=np.int64).tolist()
        values = numbers
        if present is None:
            if count != n_rows:
                raise CodecError("column length does not match its row count")
            return values
        if int(present.sum()) != count:
            raise CodecError("column null map does not match its values")
        it = iter(values)
        return [next(it) if p else None for p in present.tolist()]
    if kind == _C_JSON:
        values = reader.json()
    elif kind == _C_VALUES:
        values = [reader.value() for _ in range(n_rows)]
    else:
        raise CodecError(f"unknown column encoding {kind!r}")
    if not isinstance(values, list) or len(values) != n_rows:
        raise CodecError("column length does not match its row count")
    return values
