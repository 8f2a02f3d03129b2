"""The working-memory buffer: accepts observations at once, stores them in batches.

Flushes happen when the batch size is reached, on a real timer, and on demand.
Nothing is dropped silently:

- an outage (embedder down, disk full; see ``failures.py``) keeps the whole
  batch at the front of the queue for the next try;
- one bad observation cannot block the rest: on any other failure the batch
  is bisected, the observations that store are stored, and one that fails
  alone (while others of its batch store) goes to the dead-letter sink
  (a JSONL file beside the memory) with a logged error;
- ``add`` never raises after it accepted an observation (a retrying caller
  would store it twice); it raises only when it refuses one: the buffer is
  full and flushing keeps failing (``WorkingMemoryFullError``).

Every flush is bounded: it stores what was buffered when it began (a
watermark), never what writers add meanwhile, so no flush can run forever
under unthrottled writers; and a writer that gets half a batch beyond a
due batch (the timer was poked and has not caught up) stores what is
waiting itself, in its turn, so the backlog stays about one batch (the
capacity is for outages, when flushing fails). A question
flushes only up to its own watermark (``flush(upto=mark(), question=True)``)
and goes first: the timer's and the writers' flushes wait while a question
waits for the flush lock, and store in chunks of a quarter batch, stopping
between chunks to let it in.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, Iterable, Optional, Sequence

from emem_ros.core.errors import WorkingMemoryFullError
from emem_ros.core.periodic import PeriodicThread
from emem_ros.ingest.failures import is_transient
from emem_ros.storage.store import NewObservation

log = logging.getLogger(__name__)

Sink = Callable[[Sequence[NewObservation]], object]
DeadLetterSink = Callable[[Sequence[tuple[NewObservation, BaseException]]], None]

# Bigger batches embed faster; this caps one transaction's size.
MAX_CHUNK = 2048


class WorkingMemory:
    def __init__(self, sink: Sink, capacity: int, batch_size: int, interval: float, *,
                 dead_letter: Optional[DeadLetterSink] = None,
                 transient: Callable[[BaseException], bool] = is_transient) -> None:
        self._sink = sink
        self._dead_letter = dead_letter
        self._transient = transient
        self._capacity = capacity
        self._batch_size = batch_size
        self._retry_at = batch_size
        """Without a timer: queue length at which add() tries the next synchronous flush
        (one batch later after a failure, so an outage is not retried on every add)."""
        self._lag_limit = min(capacity, batch_size + batch_size // 2)
        """With a timer: a writer this far ahead of storing (the timer was poked and has not caught up)
        stores itself, waiting its turn, so a question never has much more than this to store first."""
        self._queue: deque[NewObservation] = deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._added = 0
        """Observations ever accepted: a watermark is a value of this count."""
        self._taken = 0
        """Of those, how many left the queue (stored, dead-lettered or being stored; requeued ones come back)."""
        self._questions = 0
        """Questions waiting for the flush lock: other flushes give way to them."""
        self._no_questions = threading.Condition(self._lock)
        self._timer: Optional[PeriodicThread] = None
        if interval > 0:
            self._timer = PeriodicThread("emem-flush", interval, self._timed_flush).start()
        self.failed_flushes = 0
        self.dead_lettered = 0
        self.last_error: Optional[BaseException] = None
        """The error of the last flush attempt; None once a flush succeeded."""

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def has_timer(self) -> bool:
        return self._timer is not None

    @property
    def failing(self) -> bool:
        """The last flush attempt failed and nothing has been stored since."""
        return self.last_error is not None

    def add(self, observation: NewObservation) -> None:
        """Buffer one observation; raises only when it refuses it (buffer full, flushes failing)."""
        with self._lock:
            full = len(self._queue) >= self._capacity
            if not full:
                self._queue.append(observation)
                self._added += 1
                queued = len(self._queue)
                due = queued >= self._retry_at
        if full:
            # Back-pressure: store what is waiting before taking more.
            try:
                self.flush(give_way=False)
            except Exception as exc:
                raise WorkingMemoryFullError(
                    f"working memory is full ({self._capacity} observations) and flushing fails: {exc}"
                ) from exc
            with self._lock:
                self._queue.append(observation)
                self._added += 1
            return
        if due:
            if self._timer is not None and (queued < self._lag_limit or self.failing):
                self._timer.poke()
            else:  # no timer, or writers got ahead of it: this writer stores (and so waits) first
                try:
                    self.flush(give_way=True)
                except Exception as exc:  # accepted: it is kept, and add must not make the caller retry
                    log.warning("flush failed, %d observations kept for retry: %s", len(self._queue), exc)

    def recent(self, n: Optional[int] = None) -> list[NewObservation]:
        with self._lock:
            items = list(self._queue)
        return items if n is None else items[-n:]

    def mark(self) -> int:
        """The watermark now: a flush up to it stores everything accepted so far."""
        return self._added

    def waiting_before(self, mark: int) -> int:
        """How many observations accepted before ``mark`` have not left the queue yet."""
        return max(0, mark - self._taken)

    def flush(self, sink: Optional[Sink] = None, *, upto: Optional[int] = None, question: bool = False,
              give_way: bool = False) -> int:
        """Store what was buffered when the flush began (or up to ``upto``); raise on failure, keeping the rest.

        ``sink`` replaces the usual one for this call (the close uses one that
        stores texts without vectors when the embedder is down). ``question``:
        a query's flush, which goes before the other flushes. ``give_way``:
        a background flush (timer, batch full), which stops between chunks
        when a question waits (what it leaves is stored by the question or
        the next flush).
        """
        mark = self._added if upto is None else upto
        most = max(16, self._batch_size // 4) if give_way else MAX_CHUNK  # background: short transactions
        stored = 0
        self._lock_flush(question)
        try:
            while True:
                with self._lock:
                    wanted = min(most, len(self._queue), mark - self._taken)
                    if wanted <= 0 or (give_way and stored and self._questions):
                        break
                    chunk = [self._queue.popleft() for _ in range(wanted)]
                    self._taken += wanted
                try:
                    stored += self._store(chunk, sink or self._sink)
                except BaseException as exc:
                    self.failed_flushes += 1
                    self.last_error = exc
                    self._retry_at = len(self._queue) + self._batch_size
                    raise
            self.last_error = None
            self._retry_at = self._batch_size
        finally:
            self._flush_lock.release()
        return stored

    def _lock_flush(self, question: bool) -> None:
        """Take the flush lock; a question goes before flushes that are not one (writers never starve readers)."""
        if question:
            with self._lock:
                self._questions += 1
            try:
                self._flush_lock.acquire()
            finally:
                with self._lock:
                    self._questions -= 1
                    if not self._questions:
                        self._no_questions.notify_all()
            return
        with self._lock:
            self._no_questions.wait_for(lambda: not self._questions, timeout=1.0)  # bounded: never stuck
        self._flush_lock.acquire()

    def take_all(self) -> list[NewObservation]:
        """Empty the buffer and return what it held (the close spills it when nothing else works)."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._taken += len(items)
        return items

    # ------------------------------------------------------------------ failures
    def _store(self, chunk: list[NewObservation], sink: Sink) -> int:
        try:
            sink(chunk)
            return len(chunk)
        except BaseException as exc:
            if len(chunk) == 1 or self._dead_letter is None or self._transient(exc):
                self._requeue(chunk)
                raise
            log.warning("storing %d observations failed (%s: %s); looking for the one that causes it",
                        len(chunk), type(exc).__name__, exc)
            return self._isolate(chunk, sink)

    def _isolate(self, chunk: list[NewObservation], sink: Sink) -> int:
        """Bisect a batch that failed on data: store what stores, dead-letter what fails alone."""
        assert self._dead_letter is not None
        middle = len(chunk) // 2
        work = [chunk[:middle], chunk[middle:]]
        stored = 0
        suspects: list[tuple[NewObservation, BaseException]] = []
        while work:
            part = work.pop(0)
            try:
                sink(part)
                stored += len(part)
                continue
            except BaseException as exc:
                if self._transient(exc):  # an outage began: keep everything not stored yet
                    self._requeue([o for o, _ in suspects] + part + [o for w in work for o in w])
                    raise
                if len(part) > 1:
                    middle = len(part) // 2
                    work[0:0] = [part[:middle], part[middle:]]
                else:
                    suspects.append((part[0], exc))
        if stored == 0:  # every observation fails on its own: the fault is not in one of them
            self._requeue([o for o, _ in suspects])
            raise suspects[-1][1]
        try:
            self._dead_letter(suspects)
        except BaseException:
            self._requeue([o for o, _ in suspects])
            raise
        self.dead_lettered += len(suspects)
        return stored

    def _requeue(self, items: Iterable[NewObservation]) -> None:
        """Put unstored observations back at the front, in id order."""
        with self._lock:
            back = sorted(items, key=lambda o: o.id, reverse=True)
            self._queue.extendleft(back)
            self._taken -= len(back)

    def _timed_flush(self) -> None:
        if self._queue:
            was_failing = self.failing
            try:
                self.flush(give_way=True)
            except Exception as exc:  # warned when an outage begins, not every period while it lasts
                log.log(logging.DEBUG if was_failing else logging.WARNING,
                        "flush failed, %d observations kept for retry: %s", len(self._queue), exc)
            else:
                if was_failing:
                    log.warning("flushing works again; the buffered observations are stored")

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
