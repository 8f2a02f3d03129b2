"""``forget``: erase what a selector names from the memory and from every file it keeps.

Order matters for the proof:

1. everything buffered is stored first (a canary still in working memory
   would otherwise be written after the forget);
2. the selection is worked out on a reader connection (no lock);
3. rows go in short write transactions (``erase.py``), then gists, entities,
   episode texts, ledger experiences;
4. files outside SQLite are rewritten: cold store, dead letters;
5. the audit row is written (a logged transaction, so the base below holds it);
6. bytes go (``scrub.py``): FTS merge, vector index rebuild + snapshot,
   base copy + log restart, WAL truncation, stale rebuild copies.

No step holds the writer lock for more than one batch: reading and
planning (rows, place ends, gist summaries, the new log segment) happen
before it on a reader. A file from before secure_delete is VACUUMed at
open, not here (``schema.vacuum_once``). The WAL truncate is what is left
of the WAL after PASSIVE checkpoints, with an fsync. ``ForgetReport.longest_lock``
says what held it longest.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import emem_ros.forgetting.audit as audit
import emem_ros.forgetting.scrub as scrub
from emem_ros.consolidation.summaries import SummaryWriter
from emem_ros.core.errors import EmemError
from emem_ros.core.heap import return_freed_heap
from emem_ros.forgetting.episodes import episodes_of, resummarise
from emem_ros.forgetting.erase import Erased, Eraser
from emem_ros.forgetting.ledger_redact import matching_experiences, redact
from emem_ros.forgetting.meaning import dead_letters_meaning
from emem_ros.forgetting.select import Selection, record_selected, select
from emem_ros.forgetting.selector import Selector

if TYPE_CHECKING:  # pragma: no cover
    from emem_ros.consolidation.coldstore import ColdStore
    from emem_ros.engine import Engine

log = logging.getLogger(__name__)

BATCH = 2000
"""Most observations deleted per write transaction; fewer when a batch holds the lock too long (erase.py)."""


@dataclass
class ForgetReport:
    dry_run: bool
    observations: int = 0
    archived: int = 0
    texts: int = 0
    places_removed: int = 0
    places_updated: int = 0
    edges: int = 0
    gists_removed: int = 0
    gists_resummarised: int = 0
    entities_removed: int = 0
    entities_updated: int = 0
    episodes_scrubbed: int = 0
    episodes_resummarised: int = 0
    experiences_redacted: int = 0
    cold_records: int = 0
    dead_letters: int = 0
    stale_copies: list[str] = field(default_factory=list)
    log_base_seq: Optional[int] = None
    vacuumed: bool = False
    wal_truncated: bool = False
    fts_merge_slices: int = 0
    transactions: int = 0
    longest_lock: float = 0.0
    longest_lock_step: str = ""
    seconds: float = 0.0
    scrub_seconds: float = 0.0
    forget_id: Optional[int] = None
    step_seconds: dict[str, float] = field(default_factory=dict)
    """Wall time of each scrub step (fts, vectors, vacuum, log, wal, files)."""
    ids: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("ids", "dry_run", "stale_copies", "longest_lock_step", "step_seconds"):
            out.pop(key, None)
        return {k: v for k, v in out.items() if v}

    def __str__(self) -> str:
        if self.dry_run:
            head = f"would forget {self.observations} observation(s)"
            extra = f" ({self.archived} archived), {self.texts} text(s), {self.experiences_redacted} experience(s)"
            shown = ", ".join(self.ids[:20]) + (" ..." if len(self.ids) > 20 else "")
            return head + extra + (f": {shown}" if shown else "")
        parts = [f"forgot {self.observations} observation(s)"]
        for name in ("archived", "texts", "gists_removed", "gists_resummarised", "entities_removed",
                     "episodes_scrubbed", "episodes_resummarised", "experiences_redacted", "cold_records",
                     "dead_letters"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name.replace('_', ' ')}: {value}")
        parts.append(f"in {self.seconds:.2f} s, longest writer lock {self.longest_lock * 1000:.0f} ms")
        return "; ".join(parts) + (f" (forget #{self.forget_id})" if self.forget_id else "")


def default_who() -> str:
    try:
        return f"python:{getpass.getuser()}"
    except Exception:  # no user name in a container: still say where it came from
        return "python"


class Forgetter:
    def __init__(self, engine: "Engine", cold: Optional["ColdStore"], batch: int = BATCH,
                 summaries: Optional["SummaryWriter"] = None) -> None:
        self.engine = engine
        self.cold = cold
        self.batch = max(1, int(batch))
        self.summaries = summaries if summaries is not None else SummaryWriter(None)
        """Episode summaries are written again through it (the memory's: its LLM when one is configured)."""

    def forget(self, selector: Selector, *, reason: str = "", who: Optional[str] = None, dry_run: bool = False,
               kind: str = "forget") -> ForgetReport:
        return self.forget_many([selector], reason=reason, who=who, dry_run=dry_run, kind=kind)

    def forget_many(self, selectors: list[Selector], *, reason: str = "", who: Optional[str] = None,
                    dry_run: bool = False, kind: str = "forget", skip_if_empty: bool = False) -> ForgetReport:
        """What any of the selectors names, in one pass (one audit row, one scrub of the files)."""
        started = time.perf_counter()
        engine = self.engine
        store = engine.store
        waiting = engine.flush_for_query()
        if waiting and not dry_run:
            raise EmemError(f"{waiting} observation(s) could not be stored yet; forget refuses to run while they "
                            "wait (they would be written after it). Try again when storing works.")
        store.apply_deferred()
        selection = Selection()
        experiences: dict[int, str] = {}
        for selector in selectors:
            part = select(engine, store.reader(), selector, self.cold)
            selection.observations |= part.observations
            selection.texts |= part.texts
            selection.entities |= part.entities
            selection.cold |= part.cold
            experiences.update(matching_experiences(store, selector))
        report = ForgetReport(dry_run=dry_run, observations=len(selection.observations),
                              archived=len(selection.cold), texts=len(selection.texts),
                              experiences_redacted=len(experiences),
                              ids=[f"obs-{i}" for i in sorted(selection.observations)])
        report.dead_letters = self._dead_letters(selectors, selection, dry=True)
        nothing = not (selection.observations or selection.entities or selection.cold or experiences
                       or report.dead_letters or self._orphans(selection.texts))
        if dry_run or (skip_if_empty and nothing):
            report.seconds = time.perf_counter() - started
            return report
        erased = Erased()
        eraser = Eraser(engine, erased, self.cold)
        touched_episodes = episodes_of(store.reader(), selection.observations)
        eraser.observations(sorted(selection.observations), self.batch)
        if selection.texts:
            eraser.orphan_texts(sorted(selection.texts))
        erased.removed_text_strings += self._archived_strings(selection.cold)
        for n, selector in enumerate(selectors):
            eraser.gists(selector, touched_only=n > 0)
            eraser.entities(selection.entities if n == 0 else set(), selector)
            eraser.episodes(selector)
        report.episodes_resummarised = resummarise(
            engine, self.summaries, touched_episodes | erased.episodes,
            [eraser._scrub_pattern(s if s.words_only else None) for s in selectors])
        now = engine.now()
        timer = scrub.LockTimer()
        timer.held(f"batches: {erased.longest_what}" if erased.longest_what else "batches", erased.longest_lock)
        if experiences:
            self._redact(sorted(experiences.items()), now, timer)
        if self.cold is not None and selection.cold:
            report.cold_records = scrub.rewrite_cold(self.cold, selection.cold)
        report.dead_letters = self._dead_letters(selectors, selection, dry=False)
        for name in ("observations", "texts", "places_removed", "places_updated", "edges", "gists_removed",
                     "gists_resummarised", "entities_removed", "entities_updated", "episodes_scrubbed"):
            setattr(report, name, getattr(erased, name))
        report.transactions = erased.transactions
        described = selectors[0].describe() if len(selectors) == 1 else {"any_of": [s.describe() for s in selectors]}
        report.forget_id = self._audit(report, described, reason, who, kind, now, timer)
        scrub_started = time.perf_counter()
        self._scrub(report, timer, vectors=bool(erased.texts or erased.gists_removed or erased.gists_resummarised
                                                or erased.entities_removed or erased.episodes_scrubbed
                                                or experiences))
        report.scrub_seconds = time.perf_counter() - scrub_started
        report.longest_lock, report.longest_lock_step = timer.longest, timer.longest_step
        report.seconds = time.perf_counter() - started
        log.info("%s", report)
        return report

    # ------------------------------------------------------------------ parts
    def _orphans(self, text_ids: set[int]) -> bool:
        """Whether a named text is left that no observation refers to (it goes too)."""
        conn = self.engine.store.reader()
        return any(conn.execute("SELECT 1 FROM observations WHERE text_id=? LIMIT 1", (t,)).fetchone() is None
                   for t in text_ids)

    def _archived_strings(self, numbers: set[int]) -> list[str]:
        """Texts of the archived observations going that no hot text row still holds.

        Archival deleted their text rows long ago, so the erase did not see them go; episode texts quoting
        them are scrubbed like those of hot texts that went (``Eraser.episodes``).
        """
        if self.cold is None or not numbers:
            return []
        conn = self.engine.store.reader()
        texts = {str(r.get("text") or "") for r in self.cold.iter_records([f"obs-{n}" for n in sorted(numbers)])}
        return sorted(t for t in texts
                      if t and conn.execute("SELECT 1 FROM texts WHERE text=? LIMIT 1", (t,)).fetchone() is None)

    def _dead_letters(self, selectors: list[Selector], selection: Selection, dry: bool) -> int:
        path = self.engine.dead_letter_path
        means = dead_letters_meaning(self.engine, path, selectors, record_selected)

        def keep(record: dict[str, Any]) -> bool:
            number = scrub.dead_letter_number(record)
            if number is not None and number in selection.observations:
                return False
            return not (means(record) or any(record_selected(record, s, stamp_key="timestamp",
                                                             layer_key="layer_name") for s in selectors))

        if dry:
            from emem_ros.ingest.dead_letter import read_dead_letters

            try:
                return sum(1 for r in read_dead_letters(path) if not keep(r))
            except (OSError, ValueError):
                return 0
        # Flushes append dead letters under the working memory's flush lock: none may land in the old file.
        flush_lock = getattr(getattr(self.engine.ingest, "buffer", None), "_flush_lock", None)
        with flush_lock if flush_lock is not None else contextlib.nullcontext():
            return scrub.rewrite_dead_letters(path, keep)

    def _redact(self, experiences: list[tuple[int, str]], now: float, timer: scrub.LockTimer) -> None:
        store = self.engine.store
        for start in range(0, len(experiences), self.batch):
            part = experiences[start:start + self.batch]
            with store.write_lock:
                began = time.perf_counter()
                with store.write() as conn:
                    redact(conn, part, now, None)
                timer.held("ledger redaction", time.perf_counter() - began)
            index = store.vectors["experiences"]
            store.update_index("experiences", functools.partial(index.remove, [n for n, _ in part]))

    def _audit(self, report: ForgetReport, described: dict[str, Any], reason: str, who: Optional[str], kind: str,
               now: float, timer: scrub.LockTimer) -> int:
        store = self.engine.store
        with store.write_lock:
            began = time.perf_counter()
            with store.write() as conn:
                forget_id = audit.record(conn, at=now, who=who or default_who(), reason=reason or "", kind=kind,
                                         selector=described, counts=report.counts(), ids=report.ids)
                if report.experiences_redacted:
                    conn.execute("UPDATE redactions SET forget_id=? WHERE forget_id IS NULL", (forget_id,))
            timer.held("audit", time.perf_counter() - began)
        return forget_id

    def _scrub(self, report: ForgetReport, timer: scrub.LockTimer, vectors: bool) -> None:
        store = self.engine.store
        steps = report.step_seconds

        def timed(name: str, fn: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn()
            finally:
                steps[name] = time.perf_counter() - began

        report.fts_merge_slices = timed("fts", lambda: scrub.purge_fts(store, timer))
        if vectors:
            timed("vectors", lambda: scrub.compact_vectors(
                store, {"texts", "gists", "entities", "episodes", "experiences"}, timer))
        report.vacuumed = timed("vacuum", lambda: scrub.sqlite_vacuum_if_needed(store, timer))
        report.log_base_seq = timed("log", lambda: scrub.compact_log(store, timer))
        report.wal_truncated = timed("wal", lambda: scrub.truncate_wal(store, timer))
        report.stale_copies = timed("files", lambda: scrub.remove_stale_copies(store.path))
        timed("heap", return_freed_heap)  # the rebuilt indexes and the file copy were freed above
