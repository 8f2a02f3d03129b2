"""Read a robot's operation-log records as changes to the fleet store.

A log record is one SQLite write transaction: its statements and their
parameters (``storage/oplog.py``). This module turns each statement into a
fleet operation: rows to insert, an UPDATE in PostgreSQL's words, or nothing
(the robot's own bookkeeping: ``meta``, ``places``, full-text tables, text
reference counts, and the deletions archival makes in the hot tables — the
fleet keeps the raw text; it has its own retention by partitions).

Statements are recognised by their shape (verb, table, columns, a SET list
and a WHERE made of simple conditions), not by exact SQL text, so small
rewordings keep working. A statement of any other shape stops the sync at its
record with a message naming it: nothing after it is applied, nothing is
guessed.

Ids: observations carry their id in the INSERT; texts, episodes, gists and
entities get theirs from SQLite's AUTOINCREMENT, which hands out the table's
last id + 1 on each insert, so the translator counts them (``last_ids``,
stored with the fleet's cursor). The full-text rows written beside texts and
gists name the ids SQLite chose and are checked against the count.
Experiences are immutable, so their rows (and their robot-local number ``n``)
are read from the robot's file by id.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from emem_ros.fleet.errors import FleetError

AUTOINCREMENT_TABLES = ("texts", "episodes", "gists", "entities")

LOCAL_COLUMNS: dict[str, frozenset[str]] = {
    "texts": frozenset({"text", "embedding"}),
    "observations": frozenset({"id", "text_id", "stamp", "layer", "source_type", "x", "y", "z", "frame_id",
                               "confidence", "episode_id", "gist_id", "tier", "tier_since", "value", "metadata"}),
    "episodes": frozenset({"id", "name", "start", "end", "status", "parent_id", "previous_id", "summary", "goal",
                           "action", "result", "reflection", "success", "consolidated", "metadata", "embedding"}),
    "gists": frozenset({"id", "text", "cx", "cy", "cz", "radius", "time_start", "time_end", "source_count",
                        "layers", "episode_id", "created_at", "metadata", "embedding"}),
    "entities": frozenset({"id", "name", "entity_type", "x", "y", "z", "spread", "first_seen", "last_seen",
                           "sightings", "confidence", "layer", "metadata", "embedding"}),
    "experiences": frozenset({"id", "goal", "action", "result", "reflection", "success", "tags", "metadata",
                              "stamp", "episode_id", "x", "y", "z", "supersedes", "embedding"}),
    "edges": frozenset({"kind", "src", "dst", "weight", "updated"}),
}
POSITION_COLUMNS = {"observations": ("x", "y", "z"), "entities": ("x", "y", "z"), "experiences": ("x", "y", "z"),
                    "gists": ("cx", "cy", "cz")}
FLEET_POSITION = {"observations": "position", "entities": "position", "experiences": "position", "gists": "center"}
IGNORED_TABLES = frozenset({"places", "texts_fts", "gists_fts", "experiences_fts",
                            # the forget audit trail: erasure is the robot's own record
                            "forget_log", "redactions",
                            # MemFS (an agent's own notes) stays on the robot: export/import moves it.
                            "fs_nodes", "fs_nodes_fts", "fs_blobs", "fs_chunks", "fs_chunks_fts", "fs_ops",
                            "fs_versions"})
"""Derived or robot-local tables: FTS mirrors, places, the forget audit trail, MemFS."""
ARCHIVAL_NULLS = {"observations": frozenset({"text_id", "metadata"})}
"""Columns the robot empties when it archives raw text; the fleet keeps its copy."""


class UnsupportedStatement(FleetError):
    """A log statement of a shape the fleet sync does not know; the sync stops before it."""


# ---------------------------------------------------------------------------- operations
@dataclass
class InsertRows:
    """Rows for one fleet table in the robot's column names (AUTOINCREMENT ids added as column ``id``)."""

    table: str
    columns: tuple[str, ...]
    rows: Sequence[Sequence[Any]]
    edge_mode: str = ""
    """For edges: 'add' (weights accumulate), 'max' (keep the larger) or 'new'."""


@dataclass
class TextEmbedding:
    """``UPDATE texts SET embedding=? WHERE id=?``: a vector arrives after its text (an embedder outage)."""

    pairs: list[tuple[bytes, int]]
    only_if_missing: bool


@dataclass
class UpdateSQL:
    """An UPDATE ready for PostgreSQL: ``sql`` with %s placeholders, one parameter tuple per execution."""

    sql: str
    params: list[tuple[Any, ...]]


@dataclass
class ExperiencesByID:
    """Experiences inserted by id; the rows come from the robot's file (they are immutable)."""

    ids: list[str]


Operation = Any  # InsertRows | TextEmbedding | UpdateSQL | ExperiencesByID


# ---------------------------------------------------------------------------- parsing
_WS = re.compile(r"\s+")
_INSERT = re.compile(
    r"^INSERT(?:\s+OR\s+(?P<or>\w+))?\s+INTO\s+(?P<table>\w+)\s*\((?P<cols>[^)]*)\)\s*"
    r"(?:VALUES\s*\((?P<values>[^)]*)\)\s*(?P<rest>.*)|(?P<select>SELECT\b.*))$",
    re.IGNORECASE | re.DOTALL)
_UPDATE = re.compile(r"^UPDATE\s+(?P<table>\w+)\s+SET\s+(?P<set>.*?)(?:\s+WHERE\s+(?P<where>.*))?$",
                     re.IGNORECASE | re.DOTALL)
_DELETE = re.compile(r"^DELETE\s+FROM\s+(?P<table>\w+)\b", re.IGNORECASE)
_TABLE = re.compile(r"^(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+(\w+)",
                    re.IGNORECASE)
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_LITERAL = re.compile(r"^(?:NULL|-?\d+(?:\.\d+)?|'(?:[^']|'')*')$", re.IGNORECASE)
_COALESCE = re.compile(r"^COALESCE\(\s*\?\s*,\s*(\w+)\s*\)$", re.IGNORECASE)
_COND = re.compile(r"^(?P<col>\w+)\s*(?P<op>=|!=|<>|<=|>=|<|>)\s*(?P<rhs>\?|NULL|-?\d+(?:\.\d+)?|'(?:[^']|'')*')$",
                   re.IGNORECASE)
_IN = re.compile(r"^(?P<col>\w+)\s+IN\s*\((?P<items>[^)]*)\)$", re.IGNORECASE)
_IS = re.compile(r"^(?P<col>\w+)\s+IS\s+(?P<not>NOT\s+)?NULL$", re.IGNORECASE)


def _split_top(text: str, separator: str) -> list[str]:
    """Split on ``separator`` outside parentheses and quotes (``separator`` matched case-insensitively)."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    upper, sep = text.upper(), separator.upper()
    while i < len(text):
        ch = text[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and upper.startswith(sep, i):
            parts.append(text[start:i].strip())
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:].strip())
    return parts


def _quote(column: str) -> str:
    return f'"{column}"'


def statement_table(sql: str) -> str:
    match = _TABLE.match(sql.lstrip())
    return match.group(1).lower() if match else ""


# ---------------------------------------------------------------------------- plans (one per SQL text)
class _Plan:
    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        raise NotImplementedError


class _Ignore(_Plan):
    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        return []


@dataclass
class _FtsCheck(_Plan):
    """``INSERT INTO texts_fts/gists_fts(rowid, text)``: SQLite's ids, checked against the count."""

    table: str

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        for rowid, text in params if many else [params]:
            expected = state.assigned[self.table].get(text)
            if expected is not None and expected != rowid:
                raise LogGapInRecord(
                    f"{self.table} id {rowid} in the log where counting gave {expected}: the log does not "
                    "hold this memory's whole history (was it written with log_enabled off for a while?)")
        return []


class LogGapInRecord(FleetError):
    """The log's ids disagree with the count: it does not start at the memory's beginning."""


@dataclass
class _Meta(_Plan):
    """Meta rows are the robot's bookkeeping; only a change of embedding model matters to the fleet."""

    columns: Optional[tuple[str, ...]]

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        if self.columns != ("key", "value"):
            return []
        for key, value in params if many else [params]:
            state.check_model_key(str(key), value)
        return []


@dataclass
class _Insert(_Plan):
    table: str
    columns: tuple[str, ...]
    edge_mode: str = ""

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        rows = params if many else [params]
        if self.table in AUTOINCREMENT_TABLES:
            return [InsertRows(self.table, *state.assign_ids(self.table, self.columns, rows))]
        return [InsertRows(self.table, self.columns, rows, self.edge_mode)]


class _ExperienceJson(_Plan):
    """The ledger's insert: ``[id, canonical JSON]`` mapped to columns by SQLite's json_extract."""

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        return [ExperiencesByID([str(row[0]) for row in (params if many else [params])])]


class _ExperienceValues(_Plan):
    """An experience inserted with plain VALUES (an import): also read back from the robot's file."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.id_at = columns.index("id")

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        return [ExperiencesByID([str(row[self.id_at]) for row in (params if many else [params])])]


@dataclass
class _TextEmbedding(_Plan):
    only_if_missing: bool

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        return [TextEmbedding([(blob, int(text_id)) for blob, text_id in (params if many else [params])],
                              self.only_if_missing)]


@dataclass
class _Update(_Plan):
    """An UPDATE rewritten for the fleet table: robot_id added, positions placed, IN lists as arrays."""

    sql: str
    recipe: list[tuple[str, Any]]
    """How to build each PostgreSQL parameter from the statement's: ('param', i), ('list', (i, j)),
    ('position', (ix, iy, iz)), ('vector', i) or ('robot', None)."""

    def run(self, params: Any, many: bool, state: "TranslatorState") -> list[Operation]:
        out = []
        for row in params if many else [params]:
            values: list[Any] = []
            for kind, where in self.recipe:
                if kind == "robot":
                    values.append(state.robot_id)
                elif kind == "param":
                    values.append(row[where])
                elif kind == "list":
                    values.append(list(row[where[0]:where[1]]))
                elif kind == "vector":
                    values.append(state.vector(row[where]))
                else:  # position: three parameters -> the fleet frame
                    x, y, z = (row[i] for i in where)
                    values.extend(state.place(x, y, z))
            out.append(tuple(values))
        return [UpdateSQL(self.sql, out)]


# ---------------------------------------------------------------------------- the translator
@dataclass
class TranslatorState:
    """What translation needs across records: the robot, its transform and the AUTOINCREMENT counts."""

    robot_id: str
    place: Callable[[Any, Any, Any], tuple[Any, ...]]
    """(x, y, z) in the robot frame -> (x, y, z) in the fleet frame; three Nones for no position
    (ST_MakePoint is strict: a NULL coordinate makes a NULL point)."""
    vector: Callable[[Any], Any]
    """An embedding BLOB -> the value written to a vector column."""
    last_ids: dict[str, int] = field(default_factory=dict)
    fleet_model: str = ""
    fleet_dim: int = 0
    assigned: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per record: text (or gist text) -> the id counted for it, for the full-text check."""

    def begin_record(self) -> None:
        self.assigned = {"texts_fts": {}, "gists_fts": {}}

    def assign_ids(self, table: str, columns: tuple[str, ...], rows: Sequence[Sequence[Any]]
                   ) -> tuple[tuple[str, ...], list[list[Any]]]:
        """The rows with the ids SQLite gave them (AUTOINCREMENT: the table's last id + 1 each)."""
        last = self.last_ids.get(table, 0)
        check = self.assigned.get(f"{table}_fts")
        id_at = columns.index("id") if "id" in columns else None
        text_at = columns.index("text") if "text" in columns else None
        out_columns = columns if id_at is not None else columns + ("id",)
        out: list[list[Any]] = []
        for row in rows:
            row = list(row)
            if id_at is not None and row[id_at] is not None:
                last = max(last, int(row[id_at]))
            else:
                last += 1
                if id_at is None:
                    row.append(last)
                else:
                    row[id_at] = last
            if check is not None and text_at is not None and isinstance(row[text_at], str):
                check[row[text_at]] = last if id_at is None else int(row[id_at])
            out.append(row)
        self.last_ids[table] = last
        return out_columns, out

    def check_model_key(self, key: str, value: Any) -> None:
        if key == "reembed_target":
            try:
                target = json.loads(value)
                model, dim = str(target.get("model", "")), int(target.get("dim", 0))
            except (ValueError, TypeError, AttributeError):
                return
        elif key == "embedding_model":
            model, dim = str(value), 0
        elif key == "embedding_dim":
            model, dim = "", int(value) if str(value).isdigit() else 0
        else:
            return
        if dim and self.fleet_dim and dim != self.fleet_dim:
            raise ModelChangeInLog(f"robot {self.robot_id} switches to {dim}-dimensional embeddings in its log; "
                                   f"the fleet store holds {self.fleet_dim}-dimensional ones")
        if model and self.fleet_model and model != self.fleet_model:
            raise ModelChangeInLog(f"robot {self.robot_id} re-embeds its memory with model {model!r} in its log; "
                                   f"the fleet store's model is {self.fleet_model!r}")


class ModelChangeInLog(FleetError):
    """The robot changed its embedding model; its vectors no longer fit the fleet's."""


class Translator:
    """Statements -> fleet operations; plans are compiled once per SQL text."""

    def __init__(self) -> None:
        self._plans: dict[str, _Plan] = {}

    def translate(self, statements: Sequence[tuple[str, Any, bool]], state: TranslatorState) -> list[Operation]:
        state.begin_record()
        ops: list[Operation] = []
        for sql, params, many in statements:
            plan = self._plans.get(sql)
            if plan is None:
                plan = self._compile(sql)
                if len(self._plans) < 4096:
                    self._plans[sql] = plan
            ops.extend(plan.run(params, many, state))
        return ops

    # -- compiling ---------------------------------------------------------
    def _compile(self, sql: str) -> _Plan:
        text = _WS.sub(" ", sql.strip())
        table = statement_table(text)
        if table in IGNORED_TABLES:
            if table in ("texts_fts", "gists_fts"):
                match = _INSERT.match(text)
                if match and match.group("values") and _columns(match.group("cols")) == ("rowid", "text"):
                    return _FtsCheck(table)
            return _Ignore()
        verb = text.split(" ", 1)[0].upper()
        if table == "meta":
            match = _INSERT.match(text)
            if match is None or not match.group("values"):
                return _Meta(None)
            columns = _columns(match.group("cols"))
            return _Meta(columns if _all_placeholders(match.group("values"), len(columns)) else None)
        if table not in LOCAL_COLUMNS:
            raise self._unsupported(text, f"table {table or '?'} is not one the fleet store mirrors")
        if verb == "INSERT" or verb == "REPLACE":
            return self._compile_insert(text, table)
        if verb == "UPDATE":
            return self._compile_update(text, table)
        if verb == "DELETE":
            if table == "texts":
                return _Ignore()  # archival drops texts nobody points at; the fleet keeps them
            raise self._unsupported(text, f"rows of {table} deleted on the robot (a forget or retention run): the "
                                          "sync waits for the base copy the forget writes when it ends, then "
                                          "deletes them from the fleet by id")
        raise self._unsupported(text, "unknown statement")

    def _compile_insert(self, text: str, table: str) -> _Plan:
        match = _INSERT.match(text)
        if not match:
            raise self._unsupported(text, "unrecognised INSERT")
        columns = _columns(match.group("cols"))
        unknown = set(columns) - LOCAL_COLUMNS[table]
        if unknown:
            raise self._unsupported(text, f"unknown column(s) {', '.join(sorted(unknown))} of {table}")
        if match.group("select") is not None:
            if table == "experiences" and "json_extract(c" in text and columns[0] == "id":
                return _ExperienceJson()
            raise self._unsupported(text, "INSERT ... SELECT")
        if not _all_placeholders(match.group("values"), len(columns)):
            raise self._unsupported(text, "VALUES other than one ? per column")
        rest = (match.group("rest") or "").strip().upper()
        if match.group("or") and table != "edges":
            raise self._unsupported(text, f"INSERT OR {match.group('or')}")
        if table == "experiences":
            if rest and not (rest.startswith("ON CONFLICT") and rest.endswith("DO NOTHING")):
                raise self._unsupported(text, "conflict clause")
            return _ExperienceValues(columns)
        if table == "edges":
            compact = rest.replace(" ", "")
            if not rest:
                mode = "new"
            elif "WEIGHT=WEIGHT+EXCLUDED.WEIGHT" in compact:
                mode = "add"
            elif "WEIGHT=MAX(WEIGHT,EXCLUDED.WEIGHT)" in compact:
                mode = "max"
            else:
                raise self._unsupported(text, "conflict clause on edges")
            return _Insert(table, columns, mode)
        if rest:
            raise self._unsupported(text, "conflict clause")
        if table == "texts" and columns != ("text", "embedding"):
            raise self._unsupported(text, "texts are inserted as (text, embedding)")
        return _Insert(table, columns)

    def _compile_update(self, text: str, table: str) -> _Plan:
        match = _UPDATE.match(text)
        if not match:
            raise self._unsupported(text, "unrecognised UPDATE")
        raw_assignments = _split_top(match.group("set"), ",")
        if table == "texts" and [a.split("=", 1)[0].strip().lower() for a in raw_assignments] == ["refs"]:
            return _Ignore()  # the robot's reference count of its own texts
        assignments = [_split_assignment(a) for a in raw_assignments]
        if any(a is None for a in assignments):
            raise self._unsupported(text, "SET clause")
        where = match.group("where")
        conditions = _split_top(where, " AND ") if where else []
        if table == "texts":
            return self._compile_text_update(text, assignments, conditions)
        fleet_table = "fleet." + table
        set_sql: list[str] = []
        recipe: list[tuple[str, Any]] = []
        param_index = 0
        position_params: dict[str, int] = {}
        allowed = LOCAL_COLUMNS[table] - {"id"}
        for column, kind, value in assignments:  # type: ignore[misc]  # no None left: checked above
            if column not in allowed:
                raise self._unsupported(text, f"SET of column {column}")
            if kind == "literal" and value.upper() == "NULL" and column in ARCHIVAL_NULLS.get(table, ()):
                continue
            if column in POSITION_COLUMNS.get(table, ()):
                if kind != "param":
                    raise self._unsupported(text, "a position set to anything but parameters")
                position_params[column] = param_index
                param_index += 1
                continue
            if kind == "param":
                set_sql.append(f"{_quote(column)} = %s")
                recipe.append(("vector" if column == "embedding" else "param", param_index))
                param_index += 1
            elif kind == "coalesce":
                set_sql.append(f"{_quote(column)} = COALESCE(%s, {_quote(value)})")
                recipe.append(("param", param_index))
                param_index += 1
            else:
                set_sql.append(f"{_quote(column)} = {value}")
        if position_params:
            names = POSITION_COLUMNS[table]
            if set(position_params) != set(names):
                raise self._unsupported(text, "a position is set only in part")
            set_sql.append(f"{FLEET_POSITION[table]} = ST_MakePoint(%s::float8, %s::float8, %s::float8)")
            recipe.append(("position", tuple(position_params[n] for n in names)))
        if not set_sql:
            return _Ignore()
        where_sql = ["robot_id = %s"]
        where_recipe: list[tuple[str, Any]] = [("robot", None)]
        for condition in conditions:
            compiled = _compile_condition(condition, table, param_index)
            if compiled is None:
                raise self._unsupported(text, f"WHERE condition {condition!r}")
            sql_part, item, param_index = compiled
            where_sql.append(sql_part)
            if item is not None:
                where_recipe.append(item)
        sql = f"UPDATE {fleet_table} SET {', '.join(set_sql)} WHERE {' AND '.join(where_sql)}"
        return _Update(sql, recipe + where_recipe)

    def _compile_text_update(self, text: str, assignments: list[Any], conditions: list[str]) -> _Plan:
        columns = [a[0] for a in assignments]
        cond = [c.replace(" ", "").lower() for c in conditions]
        if columns == ["embedding"] and assignments[0][1] == "param" and cond[:1] == ["id=?"]:
            if cond[1:] in ([], ["embeddingisnull"]):
                return _TextEmbedding(only_if_missing=bool(cond[1:]))
        raise self._unsupported(text, "an update of texts other than its embedding or reference count")

    @staticmethod
    def _unsupported(text: str, why: str) -> UnsupportedStatement:
        shown = text if len(text) <= 160 else text[:157] + "..."
        return UnsupportedStatement(f"{why}: {shown!r}")


def _columns(text: str) -> tuple[str, ...]:
    return tuple(c.strip().strip('"').lower() for c in text.split(","))


def _all_placeholders(values: Optional[str], count: int) -> bool:
    if values is None:
        return False
    items = [v.strip() for v in values.split(",")]
    return len(items) == count and all(v == "?" for v in items)


def _split_assignment(text: str) -> Optional[tuple[str, str, str]]:
    """``col = ?`` -> (col, 'param', ''); ``col = COALESCE(?, col)`` -> (col, 'coalesce', col);
    ``col = <literal>`` -> (col, 'literal', literal). None for anything else."""
    if "=" not in text:
        return None
    column, expr = (part.strip() for part in text.split("=", 1))
    column = column.strip('"').lower()
    if not _IDENT.match(column):
        return None
    if expr == "?":
        return column, "param", ""
    coalesce = _COALESCE.match(expr)
    if coalesce and coalesce.group(1).lower() == column:
        return column, "coalesce", column
    if _LITERAL.match(expr):
        return column, "literal", expr
    return None


def _compile_condition(condition: str, table: str, param_index: int
                       ) -> Optional[tuple[str, Optional[tuple[str, Any]], int]]:
    """(PostgreSQL condition, parameter recipe item or None, next parameter index)."""
    allowed = LOCAL_COLUMNS[table] | ({"n"} if table == "experiences" else set())
    condition = condition.strip()
    if condition.startswith("(") and condition.endswith(")"):
        condition = condition[1:-1].strip()
    match = _COND.match(condition)
    if match:
        column, op, rhs = match.group("col").lower(), match.group("op"), match.group("rhs")
        if column not in allowed or column in POSITION_COLUMNS.get(table, ()):
            return None
        op = "<>" if op == "!=" else op
        if rhs == "?":
            return f"{_quote(column)} {op} %s", ("param", param_index), param_index + 1
        return f"{_quote(column)} {op} {rhs}", None, param_index
    match = _IN.match(condition)
    if match:
        column = match.group("col").lower()
        if column not in allowed or column in POSITION_COLUMNS.get(table, ()):
            return None
        items = [item.strip() for item in match.group("items").split(",")]
        if all(item == "?" for item in items):
            return (f"{_quote(column)} = ANY(%s)", ("list", (param_index, param_index + len(items))),
                    param_index + len(items))
        if all(_LITERAL.match(item) for item in items):
            return f"{_quote(column)} IN ({', '.join(items)})", None, param_index
        return None
    match = _IS.match(condition)
    if match:
        column = match.group("col").lower()
        if column not in allowed or column in POSITION_COLUMNS.get(table, ()):
            return None
        return f"{_quote(column)} IS {'NOT ' if match.group('not') else ''}NULL", None, param_index
    return None
