"""Hybrid ranking: keyword (FTS5 / BM25) lists, reciprocal rank fusion, recency.

Robots are queried by label ("red mug"), where exact words beat embeddings,
and by description, where embeddings win; RRF fuses both without having to
calibrate BM25 against cosine. Recency multiplies the fused score by an
exponential decay, so "the mug" prefers the mug seen a minute ago.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from emem_ros.storage.sqlutil import marks

RRF_K = 60
"""The usual RRF constant: ranks deep in a list still count, but little."""

MAX_TOKENS = 12
DF_BUDGET = 300
"""Documents BM25 may score for the OR query (about 1.5 us each); rarer words are kept first."""
AND_DEPTH = 256
"""AND matches of common words read at most (newest first): a filtered search that keeps asking for
more stops here instead of walking thousands of full matches the vector side ranks anyway."""
DF_CEILING = 1000
"""A word in more texts than this says little about any of them on its own: it joins only the AND pass."""

MEMO_ENTRIES = 1024
"""Document frequencies and ranked lists a keyword index remembers (then it starts over)."""
MEMO_IDS = 1024
"""Longer ranked lists are read afresh each time."""

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
STOPWORDS = frozenset(
    "a an the and or of to in on at by for with from is are was were be been it its this that these those"
    " there here what where when which who whom how i you we they he she me my our your their his her"
    " do does did have has had not no any some all near into onto over under about as than then"
    " please find show tell me seen saw see".split()
)


def query_tokens(text: str) -> list[str]:
    """Lower-case word tokens without stop words (all tokens if only stop words remain)."""
    tokens = [t for t in _TOKEN.findall(text.lower()) if len(t) > 1 or t.isdigit()]
    kept = [t for t in tokens if t not in STOPWORDS]
    out: list[str] = []
    for token in kept or tokens:
        if token not in out:
            out.append(token)
    return out[:MAX_TOKENS]


def _quoted(tokens: Iterable[str]) -> list[str]:
    return ['"' + t.replace('"', '""') + '"' for t in tokens]


def _stem_variants(token: str) -> list[str]:
    """Cheap guesses at the porter stem, only to look a word's frequency up."""
    out = [token]
    for suffix, repl in (("ies", "i"), ("es", ""), ("s", ""), ("e", ""), ("ing", ""), ("ed", ""), ("y", "i")):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            out.append(token[: len(token) - len(suffix)] + repl)
    return out


class KeywordIndex:
    """BM25 over one FTS5 table (``texts_fts`` or ``gists_fts``) with a cost budget."""

    def __init__(self, table: str, content: Optional[str] = None) -> None:
        self.table = table
        self._vocab = f"temp.{table}_vocab"
        self._content = content
        """The FTS table's content table (rows only inserted with growing ids, unless ``forget`` is called):
        document frequencies and ranked lists are then remembered until its highest id moves."""
        self._memo: dict[tuple[object, ...], Any] = {}
        self._memo_key: Optional[tuple[int, int]] = None
        self._generation = 0
        self._memo_lock = threading.Lock()

    def forget(self) -> None:
        """Rows were deleted (or rewritten): remembered frequencies and lists no longer hold."""
        with self._memo_lock:
            self._generation += 1
            self._memo.clear()
            self._memo_key = None

    def _top(self, conn: sqlite3.Connection) -> Optional[int]:
        """The content table's highest id (None without a content table: nothing is remembered)."""
        if self._content is None:
            return None
        return int(conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {self._content}").fetchone()[0])

    def _remembered(self, conn: sqlite3.Connection, what: tuple[object, ...], compute: Callable[[], Any],
                    top: Optional[int] = None) -> Any:
        """``compute()`` (an immutable value), remembered while the table only grew and its top id stood still.

        Every answer here is a function of the table's rows alone (BM25 uses the table's own statistics);
        rows are only inserted with growing ids, and deletions call ``forget``. ``top``: the highest id as
        read earlier in the same question (``plan``, then ``run``): a value computed after it is never older
        than it, and a later question reads a larger top if rows came meanwhile, so one read serves both.
        """
        if self._content is None:
            return compute()
        with self._memo_lock:
            generation = self._generation
        if top is None:
            top = self._top(conn)
        key = (generation, int(top or 0))
        with self._memo_lock:
            if self._memo_key == key:
                known = self._memo.get(what)
                if known is not None:
                    return known
        value = compute()  # read after ``top``: never older than its key
        with self._memo_lock:
            if self._generation == generation:
                if self._memo_key != key:
                    self._memo.clear()
                    self._memo_key = key
                if len(self._memo) >= MEMO_ENTRIES:
                    self._memo.clear()
                self._memo[what] = value
        return value

    def _document_frequency(self, conn: sqlite3.Connection, tokens: Sequence[str],
                            top: Optional[int] = None) -> dict[str, int]:
        """Per token, the documents holding it (or a stem guess of it)."""
        items = self._remembered(conn, ("df", *tokens),
                                 lambda: tuple(self._document_frequency_sql(conn, tokens).items()), top)
        return dict(items)

    def _ids(self, conn: sqlite3.Connection, sql: str, match: str, limit: int, top: Optional[int] = None) -> list[int]:
        """Row ids of one MATCH statement (no extra condition), remembered like the frequencies (short lists)."""
        if limit > MEMO_IDS:
            return [r[0] for r in conn.execute(sql, (match, limit))]
        rows = self._remembered(conn, (sql, match, limit),
                                lambda: tuple(r[0] for r in conn.execute(sql, (match, limit))), top)
        return list(rows)

    def _document_frequency_sql(self, conn: sqlite3.Connection, tokens: Sequence[str]) -> dict[str, int]:
        variants = {v: t for t in tokens for v in _stem_variants(t)}
        sql = f"SELECT term, doc FROM {self._vocab} WHERE term IN ({marks(len(variants))})"
        try:
            rows = conn.execute(sql, list(variants)).fetchall()
        except sqlite3.OperationalError:  # first use on this connection: the vocabulary view is per connection
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {self._vocab}"
                         f" USING fts5vocab(main, '{self.table}', 'row')")
            rows = conn.execute(sql, list(variants)).fetchall()
        df = {t: 0 for t in tokens}
        for term, doc in rows:
            token = variants[term]
            df[token] = max(df[token], int(doc))
        return df

    def plan(self, conn: sqlite3.Connection, query: str) -> Optional["KeywordPlan"]:
        """The MATCH expressions for a query: all words (AND), then the affordable words (OR).

        The AND pass always runs for a query of several words: a text holding
        every word is the best keyword evidence there is, however common each
        word is ("chair kitchen" among thousands of chairs and kitchens). It is
        cheap when streamed in rowid order with a LIMIT; only BM25 ordering
        costs (counting every document of every word, then scoring every
        match), so the AND matches are ordered by BM25 only while the words'
        document frequencies sum to at most DF_CEILING, and otherwise newest
        text first, at most AND_DEPTH of them. Words so common that BM25 would have to score more than
        DF_BUDGET documents are left out of the OR expression, and words in more
        than DF_CEILING texts out of it entirely: alone they say little, and the
        vector side covers them. None when no word is worth a query.
        """
        tokens = query_tokens(query)
        if not tokens:
            return None
        top = self._top(conn)
        df = self._document_frequency(conn, tokens, top)  # 0 also when the stem guess missed
        budget, chosen = DF_BUDGET, list[str]()
        for token in sorted(tokens, key=lambda t: df[t]):
            if df[token] > DF_CEILING or (chosen and df[token] > budget):
                break
            chosen.append(token)
            budget -= df[token]
        every = " AND ".join(_quoted(tokens)) if len(tokens) > 1 else None
        if not chosen and every is None:
            return None
        return KeywordPlan(every, " OR ".join(_quoted(chosen)) if chosen else None,
                           every_by_bm25=sum(df.values()) <= DF_CEILING, top=top)

    def run(self, conn: sqlite3.Connection, plan: "KeywordPlan", limit: int, where: str = "",
            params: Sequence[object] = ()) -> list[int]:
        """Row ids best first: documents with every word first, then any affordable word.

        ``where``: an extra SQL condition on ``rowid`` (with its ``params``), e.g. the ledger's filters.
        """
        extra = f" AND ({where})" if where else ""
        ranked = (f"SELECT rowid FROM {self.table} WHERE {self.table} MATCH ?{extra}"
                  f" ORDER BY bm25({self.table}) LIMIT ?")
        newest = f"SELECT rowid FROM {self.table} WHERE {self.table} MATCH ?{extra} ORDER BY rowid DESC LIMIT ?"
        if where:
            def ids(sql: str, match: str, n: int) -> list[int]:
                return [r[0] for r in conn.execute(sql, (match, *params, n))]
        else:
            def ids(sql: str, match: str, n: int) -> list[int]:
                return self._ids(conn, sql, match, n, plan.top)
        found: list[int] = []
        if plan.every:
            if plan.every_by_bm25:
                found = ids(ranked, plan.every, limit)
            else:
                found = ids(newest, plan.every, min(limit, AND_DEPTH))
        if plan.any and len(found) < limit:
            seen = set(found)
            for rowid in ids(ranked, plan.any, limit + len(found)):
                if rowid not in seen:
                    found.append(rowid)
                    seen.add(rowid)
        return found[:limit]

    def stream(self, conn: sqlite3.Connection, query: str, limit: int) -> Iterator[int]:
        """``search(conn, query, limit)`` one id at a time: the OR pass runs only if the caller reads that far."""
        plan = self.plan(conn, query)
        if plan is None or limit <= 0:
            return
        ranked = f"SELECT rowid FROM {self.table} WHERE {self.table} MATCH ? ORDER BY bm25({self.table}) LIMIT ?"
        newest = f"SELECT rowid FROM {self.table} WHERE {self.table} MATCH ? ORDER BY rowid DESC LIMIT ?"
        found: list[int] = []
        if plan.every:
            if plan.every_by_bm25:
                found = self._ids(conn, ranked, plan.every, limit, plan.top)
            else:
                found = self._ids(conn, newest, plan.every, min(limit, AND_DEPTH), plan.top)
        yield from found[:limit]
        if plan.any and len(found) < limit:
            seen = set(found)
            given = len(found)
            for rowid in self._ids(conn, ranked, plan.any, limit + len(found), plan.top):
                if rowid not in seen:
                    seen.add(rowid)
                    yield rowid
                    given += 1
                    if given >= limit:
                        return

    def search(self, conn: sqlite3.Connection, query: str, limit: int, where: str = "",
               params: Sequence[object] = ()) -> list[int]:
        plan = self.plan(conn, query)
        return self.run(conn, plan, limit, where, params) if plan is not None and limit > 0 else []


@dataclass(frozen=True)
class KeywordPlan:
    every: Optional[str]
    """Every word (AND), or None for a one-word query."""
    any: Optional[str]
    """The affordable words (OR), or None when every word is too common."""
    every_by_bm25: bool = True
    """Order the AND matches by BM25 (affordable) or newest first (common words)."""
    top: Optional[int] = field(default=None, compare=False)
    """The content table's highest id when the plan was made (``KeywordIndex._remembered``)."""


@dataclass
class Fused:
    key: object
    score: float
    similarity: Optional[float] = None
    vector_rank: Optional[int] = None
    keyword_rank: Optional[int] = None


def rrf(vector: Sequence[tuple[object, float]], keyword: Sequence[object]) -> dict[object, Fused]:
    """Reciprocal rank fusion of a (key, cosine) list and a keyword list, both best first."""
    out: dict[object, Fused] = {}
    for rank, (key, sim) in enumerate(vector):
        out[key] = Fused(key, 1.0 / (RRF_K + rank + 1), similarity=sim, vector_rank=rank)
    for rank, key in enumerate(keyword):
        item = out.get(key)
        if item is None:
            out[key] = Fused(key, 1.0 / (RRF_K + rank + 1), keyword_rank=rank)
        else:
            item.score += 1.0 / (RRF_K + rank + 1)
            item.keyword_rank = rank
    return out


MAX_FUSED = 2.0 / (RRF_K + 1)
"""Score of an item ranked first by both lists: the scale for normalised scores."""


def recency_factor(stamp: Optional[float], now: float, weight: float, halflife: float) -> float:
    """1 - w + w * 2^(-age / halflife): weight 0 leaves the ranking alone."""
    if weight <= 0 or stamp is None:
        return 1.0
    age = max(0.0, now - stamp)
    return (1.0 - weight) + weight * math.pow(0.5, age / halflife)
