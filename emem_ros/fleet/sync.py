"""Ship a robot's operation log into the fleet store: ``emem sync DB --to URL --robot-id R``.

The log is the replication unit. The fleet store records per robot the last
applied log position (``fleet.robots.applied_seq``, with the checksum of that
record and the AUTOINCREMENT counts the translation needs); each batch of
records is applied and the position advanced in **one** PostgreSQL
transaction, under a row lock on the robot. So:

- a crash or an outage on either side leaves the position at the end of the
  last committed batch, and the next sync resumes exactly there;
- records at or before the position are never applied again (and the rows
  are keyed by content, ``(robot_id, id)`` and the text's SHA-256, so even a
  re-shipped snapshot adds no duplicate);
- two syncs of one robot at once (a node timer and a hand-run ``emem sync``)
  take turns on the lock and the second skips what the first applied.

Pruning: after each commit the sync writes its hold (``<db>.log/hold-...``);
the log keeps every record after it whatever ``log_keep_segments`` says. A
memory whose log was pruned before it ever synced (or whose hold was lost)
is shipped from its newest checkpoint copy (``base-<seq>.db``, which a
checkpoint always writes before it prunes), then from the log after it.

A sync never runs on the ingest or query path: the node calls it from a timer
of its maintenance group, and it only reads the robot's files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from emem_ros.fleet import db
from emem_ros.fleet.apply import EXPERIENCE_COLUMNS, FleetWriter, VectorCodec
from emem_ros.fleet.errors import FleetError, FleetUnavailableError, LogGapError
from emem_ros.fleet.local import BaseSnapshot, LocalMemory, LocalState, LogRecord
from emem_ros.fleet.robots import check_robot_id
from emem_ros.fleet.schema import FleetInfo, open_fleet
from emem_ros.fleet.transform import RigidTransform
from emem_ros.fleet.translate import AUTOINCREMENT_TABLES, ExperiencesByID, InsertRows, Translator, TranslatorState

log = logging.getLogger(__name__)

BATCH_RECORDS = 2000
"""Log records applied per PostgreSQL transaction at most."""
BATCH_ROWS = 50_000
"""Observation rows per transaction at most (a batch ends after the record that passes it)."""


@dataclass
class SyncReport:
    robot_id: str
    start_seq: int
    applied_seq: int
    target_seq: int
    """The robot's committed log position when the sync started."""
    records: int = 0
    batches: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    snapshot_seq: Optional[int] = None
    """Set when the robot was shipped from a checkpoint copy (its log was pruned)."""

    @property
    def caught_up(self) -> bool:
        return self.applied_seq >= self.target_seq

    def summary(self) -> str:
        if self.records == 0 and self.snapshot_seq is None:
            return f"robot {self.robot_id}: up to date at log seq {self.applied_seq}"
        parts = [f"{n} {name}" for name, n in self.counts.items() if n]
        head = (f"robot {self.robot_id}: log seq {self.start_seq} -> {self.applied_seq} "
                f"({self.records} records in {self.batches} transaction(s), {self.seconds:.2f} s)")
        if self.snapshot_seq is not None:
            head += f"; shipped from the checkpoint copy at seq {self.snapshot_seq} (the log before it was pruned)"
        if not self.caught_up:
            head += f"; {self.target_seq - self.applied_seq} record(s) still to ship"
        return head + ("\n  new rows: " + ", ".join(parts) if parts else "")


class FleetSync:
    """One robot's memory -> one fleet store. Reusable: the node keeps one and calls ``run()`` on a timer."""

    def __init__(self, db_path: str | Path, url: str, robot_id: str, *, batch_records: int = BATCH_RECORDS,
                 batch_rows: int = BATCH_ROWS) -> None:
        check_robot_id(robot_id)
        self.db_path = Path(db_path)
        self.url = url
        self.robot_id = robot_id
        self.batch_records = max(1, int(batch_records))
        self.batch_rows = max(1, int(batch_rows))
        self.local = LocalMemory(self.db_path)
        self.hold_name = self.local.hold_name(db.redact(url) + "#" + robot_id)
        self._conn: Any = None
        self._info: Optional[FleetInfo] = None
        self._vectors: Optional[VectorCodec] = None
        self._translator = Translator()
        self._records: Optional[Iterator[LogRecord]] = None
        self._next: Optional[LogRecord] = None
        self._after = -1
        self._upto = -1

    # -- connection -------------------------------------------------------
    def _connection(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn = db.connect(self.url)
        try:
            self._info = open_fleet(conn, db.redact(self.url))
            self._vectors = VectorCodec(conn, self._info.dim)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None

    def close(self) -> None:
        self._drop_connection()
        self.local.close()

    def hold_from_start(self) -> None:
        """Keep the whole log until the first sync (a fleet is configured, PostgreSQL may be down)."""
        if self.local.held(self.hold_name) is None:
            self.local.hold(self.hold_name, 0)

    # -- the run ----------------------------------------------------------
    def run(self, max_seconds: Optional[float] = None) -> SyncReport:
        """Ship what the fleet has not applied, batch by batch; stops early after ``max_seconds``."""
        started = time.perf_counter()
        state = self.local.state()
        try:
            conn = self._connection()
            report = self._run(conn, state, started, max_seconds)
        except FleetError:
            self._rollback()
            raise
        except Exception as exc:
            self._rollback()
            if db.is_connection_error(exc):
                self._drop_connection()
                raise FleetUnavailableError(f"lost the fleet store at {db.redact(self.url)} during the sync: "
                                            f"{_first_line(exc)}; the next sync resumes where it stopped") from exc
            raise FleetError(f"the fleet store refused robot {self.robot_id}'s records: {_first_line(exc)}") from exc
        report.seconds = time.perf_counter() - started
        return report

    def _rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except Exception:
                self._drop_connection()

    def _run(self, conn: Any, state: LocalState, started: float, max_seconds: Optional[float]) -> SyncReport:
        assert self._info is not None
        self._register(conn, state)
        row = self._lock_robot(conn)
        report = SyncReport(self.robot_id, row["applied_seq"], row["applied_seq"], state.log_seq)
        self._check_same_memory(row, state)
        conn.rollback()
        totals: dict[str, int] = {}
        while True:
            row = self._lock_robot(conn)
            applied = row["applied_seq"]
            if applied >= state.log_seq:
                conn.rollback()
                break
            first = self._peek(applied, state.log_seq)
            if first is None or first.seq != applied + 1:
                snapshot_seq = self._ship_snapshot(conn, row, first, state, totals)
                report.snapshot_seq = snapshot_seq
                report.applied_seq = snapshot_seq
                report.batches += 1
                continue
            records, new_seq, crc, last_ids = self._ship_batch(conn, row, state, totals)
            self._advance(conn, new_seq, crc, last_ids)
            conn.commit()
            self.local.hold(self.hold_name, new_seq)
            report.records += records
            report.batches += 1
            report.applied_seq = new_seq
            if max_seconds is not None and time.perf_counter() - started > max_seconds:
                break
        report.counts = totals
        return report

    def _register(self, conn: Any, state: LocalState) -> None:
        """Add the robot (identity transform) if new; check and adopt the embedding model."""
        info = self._info
        assert info is not None
        if state.dim and state.dim != info.dim:
            raise FleetError(f"robot {self.robot_id}'s memory holds {state.dim}-dimensional embeddings "
                             f"({state.model or 'unknown model'}); the fleet store holds {info.dim}-dimensional ones")
        if state.model and info.model and state.model != info.model:
            raise FleetError(f"robot {self.robot_id}'s memory was embedded with {state.model!r}; the fleet store's "
                             f"model is {info.model!r}: vectors of two models cannot be compared")
        added = conn.execute("INSERT INTO fleet.robots(robot_id, model) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                             (self.robot_id, state.model or None)).rowcount
        if state.model and not info.model:
            conn.execute("UPDATE fleet.meta SET value = %s WHERE key = 'embedding_model' AND value = ''",
                         (state.model,))
            info.model = conn.execute("SELECT value FROM fleet.meta WHERE key = 'embedding_model'").fetchone()[0]
            if info.model != state.model:
                conn.rollback()
                raise FleetError(f"the fleet store's model is {info.model!r}, robot {self.robot_id}'s is "
                                 f"{state.model!r}")
        conn.commit()
        if added:
            log.info("robot %s joined the fleet store with the identity transform (emem fleet add-robot places "
                     "it)", self.robot_id)

    def _lock_robot(self, conn: Any) -> dict[str, Any]:
        row = conn.execute(
            "SELECT applied_seq, applied_crc, last_ids, tx, ty, yaw FROM fleet.robots WHERE robot_id = %s "
            "FOR UPDATE", (self.robot_id,)).fetchone()
        if row is None:
            raise FleetError(f"robot {self.robot_id} was removed from the fleet store during the sync")
        last_ids = row[2] if isinstance(row[2], dict) else json.loads(row[2] or "{}")
        return {"applied_seq": int(row[0]), "applied_crc": row[1], "last_ids": last_ids,
                "transform": RigidTransform(float(row[3]), float(row[4]), float(row[5]))}

    def _check_same_memory(self, row: dict[str, Any], state: LocalState) -> None:
        applied = row["applied_seq"]
        if applied <= 0:
            return
        if applied > state.log_seq:
            raise FleetError(
                f"the fleet store has applied robot {self.robot_id}'s log up to seq {applied}, but its memory "
                f"{self.db_path} is at seq {state.log_seq}: another memory file, or one restored from a backup. "
                f"Remove the robot's rows with `emem fleet remove-robot URL {self.robot_id}` to ship it anew")
        crc = self.local.record_crc(applied)
        if crc is not None and row["applied_crc"] is not None and int(row["applied_crc"]) != crc:
            raise FleetError(
                f"record seq {applied} of {self.db_path} differs from the one the fleet store applied for robot "
                f"{self.robot_id}: this is another memory. Use another robot id, or remove the robot's rows with "
                f"`emem fleet remove-robot URL {self.robot_id}` to ship this memory instead")

    # -- reading the log --------------------------------------------------
    def _peek(self, applied: int, upto: int) -> Optional[LogRecord]:
        """The next record after ``applied``, never one past ``upto`` (the robot's committed position:
        a record after it may still be taken back and written anew). The open reader is reused while
        it stands at ``applied``."""
        if self._records is None or self._after != applied or self._upto != upto:
            self._records = self.local.records(applied, upto)
            self._next = None
            self._after, self._upto = applied, upto
        if self._next is None:
            self._next = next(self._records, None)
            if self._next is None:
                self._records = None  # at the end for now: read afresh next time (the log grows)
        return self._next

    def _take(self) -> LogRecord:
        record = self._next
        assert record is not None
        self._next = None
        self._after = record.seq
        return record

    # -- one batch --------------------------------------------------------
    def _translator_state(self, row: dict[str, Any], writer_place: Callable[[float, float, float], Any]
                          ) -> TranslatorState:
        info = self._info
        assert info is not None and self._vectors is not None
        return TranslatorState(self.robot_id, writer_place, self._vectors,
                               last_ids={k: int(v) for k, v in row["last_ids"].items()},
                               fleet_model=info.model, fleet_dim=info.dim)

    def _writer(self, conn: Any, row: dict[str, Any], experience_rows: Any, upsert: bool = False
                ) -> tuple[FleetWriter, TranslatorState]:
        assert self._info is not None and self._vectors is not None
        holder: list[FleetWriter] = []
        tstate = self._translator_state(row, lambda x, y, z: holder[0].place(x, y, z))
        writer = FleetWriter(conn, tstate, row["transform"], self._info, self._vectors,
                             lambda ids: experience_rows(ids, EXPERIENCE_COLUMNS), upsert=upsert)
        holder.append(writer)
        return writer, tstate

    def _ship_batch(self, conn: Any, row: dict[str, Any], state: LocalState, totals: dict[str, int]
                    ) -> tuple[int, int, int, dict[str, int]]:
        writer, tstate = self._writer(conn, row, self.local.experience_rows)
        records = rows = 0
        last_seq, crc = row["applied_seq"], row["applied_crc"]
        while records < self.batch_records and rows < self.batch_rows:
            record = self._peek(last_seq, state.log_seq)
            if record is None:
                break
            if record.seq != last_seq + 1:
                break  # a gap: the next batch sees it and falls back to the checkpoint copy
            self._take()
            try:
                operations = self._translator.translate(record.statements, tstate)
            except FleetError as exc:
                raise FleetError(f"robot {self.robot_id}, log record seq {record.seq}: {exc}; the sync stops "
                                 f"before it (the fleet has everything up to seq {record.seq - 1} once this batch "
                                 "is rolled back and retried)") from exc
            writer.apply(operations)
            rows += sum(len(op.rows) for op in operations if type(op) is InsertRows and op.table == "observations")
            records += 1
            last_seq, crc = record.seq, record.crc
        writer.flush()
        if last_seq == state.log_seq:
            self._check_counts(tstate.last_ids, state)
        for name, n in writer.counts.as_dict().items():
            totals[name] = totals.get(name, 0) + n
        return records, last_seq, crc, tstate.last_ids

    def _check_counts(self, last_ids: dict[str, int], state: LocalState) -> None:
        """At the robot's committed position the counted ids must be SQLite's own."""
        for table in AUTOINCREMENT_TABLES:
            counted, actual = last_ids.get(table, 0), state.last_ids.get(table, 0)
            if counted != actual:
                raise LogGapError(
                    f"robot {self.robot_id}: its log accounts for {counted} {table} ids but its memory has "
                    f"{actual}: the log does not hold the memory's whole history (written with log_enabled "
                    "off for a while?); nothing of this batch was applied")

    def _advance(self, conn: Any, seq: int, crc: Optional[int], last_ids: dict[str, int]) -> None:
        conn.execute("UPDATE fleet.robots SET applied_seq = %s, applied_crc = %s, last_ids = %s::jsonb, "
                     "synced_at = now() WHERE robot_id = %s",
                     (seq, crc, json.dumps(last_ids, sort_keys=True), self.robot_id))

    # -- the fallback: a checkpoint copy ------------------------------------
    def _ship_snapshot(self, conn: Any, row: dict[str, Any], first: Optional[LogRecord], state: LocalState,
                       totals: dict[str, int]) -> int:
        applied = row["applied_seq"]
        first_seq = first.seq if first is not None else self.local.first_seq()
        base = self.local.newest_base()
        if base is None or base[0] < applied or (first_seq is not None and base[0] < first_seq - 1):
            have = f"the log starts at seq {first_seq}" if first_seq else "the log holds no record"
            raise LogGapError(
                f"robot {self.robot_id}: the fleet store has applied up to seq {applied}, {have}, and no "
                f"checkpoint copy in {self.local.log_dir} covers the records up to its committed seq "
                f"{state.log_seq}: they are gone from this robot (pruned without a fleet hold) or unreadable "
                "(a damaged log). Remove the robot's rows with `emem fleet remove-robot` and sync again to ship "
                "what the memory holds now")
        base_seq, base_path = base
        snapshot = BaseSnapshot(base_path, base_seq)
        try:
            writer, tstate = self._writer(conn, row, snapshot.experience_rows, upsert=True)
            text_columns = ("id", "text", "embedding")
            for chunk in snapshot.rows("texts", text_columns):
                writer.apply([InsertRows("texts", text_columns, chunk)])
                writer.flush()
            for table in ("episodes", "gists", "entities"):
                columns = BaseSnapshot.TABLE_COLUMNS[table]
                for chunk in snapshot.rows(table, columns):
                    writer.apply([InsertRows(table, columns, chunk)])
                    writer.flush()
            for chunk in snapshot.rows("observations", BaseSnapshot.OBSERVATION_COLUMNS):
                writer.apply([InsertRows("observations", BaseSnapshot.OBSERVATION_COLUMNS, chunk)])
                writer.flush()
            for chunk in snapshot.rows("edges", BaseSnapshot.TABLE_COLUMNS["edges"]):
                writer.apply([InsertRows("edges", BaseSnapshot.TABLE_COLUMNS["edges"], chunk, "new")])
                writer.flush()
            ids = snapshot.experience_ids()
            if ids:
                writer.apply([ExperiencesByID(ids)])
            removed = writer.remove_missing(snapshot.keys())
            last_ids = snapshot.last_ids()
        finally:
            snapshot.close()
        self._advance(conn, base_seq, self.local.record_crc(base_seq), last_ids)
        conn.commit()
        self.local.hold(self.hold_name, base_seq)
        self._records = None
        for name, n in writer.counts.as_dict().items():
            totals[name] = totals.get(name, 0) + n
        log.warning("robot %s shipped from the checkpoint copy %s (its log before seq %s was pruned)",
                    self.robot_id, base_path.name, first_seq)
        if removed:
            for name, n in removed.items():
                totals[f"removed {name}"] = totals.get(f"removed {name}", 0) + n
            self._vacuum(conn, removed)
        return base_seq

    def _vacuum(self, conn: Any, removed: dict[str, int]) -> None:
        """After deletions (a forget on the robot), VACUUM the tables that lost rows: their index entries
        (the pgvector graph included) and dead row versions go now, not at autovacuum's leisure. PostgreSQL
        does not overwrite freed space: the bytes stay in the data files until reused (see the README)."""
        tables = {"observations": "observations", "texts": "texts", "robot_texts": "robot_texts",
                  "episodes": "episodes", "gists": "gists", "entities": "entities", "experiences": "experiences",
                  "edges": "edges"}
        wanted = sorted({tables[name] for name in removed if name in tables})
        if not wanted:
            return
        if removed.get("observations") or removed.get("texts"):
            wanted += ["sightings", "places"]
        conn.commit()
        conn.autocommit = True
        try:
            conn.execute("VACUUM " + ", ".join(f"fleet.{t}" for t in wanted))
        except Exception as exc:  # the rows are gone; only the clean-up of their space waits for autovacuum
            log.warning("robot %s: VACUUM after deletions failed: %s", self.robot_id, _first_line(exc))
        finally:
            conn.autocommit = False


def sync_memory(db_path: str | Path, url: str, robot_id: str, **options: Any) -> SyncReport:
    """One-shot sync (``emem sync``)."""
    max_seconds = options.pop("max_seconds", None)
    sync = FleetSync(db_path, url, robot_id, **options)
    try:
        return sync.run(max_seconds=max_seconds)
    finally:
        sync.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
