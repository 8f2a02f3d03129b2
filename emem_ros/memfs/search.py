"""fs_search: keyword (BM25 over chunks and descriptions), meaning (chunk and description vectors), or both.

Hybrid by default: the chunk lists and the description lists are fused by
reciprocal rank (``tools/hybrid.py``), so a note is found by its words, by
what it means, or by what its description says. Filters (base folder, tags,
owner, type, modification time, place) apply to the node of each hit; a
base folder narrow enough restricts the vector search itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

import emem_ros.memfs.tables as tables
from emem_ros.memfs.args import whole, words
from emem_ros.memfs.errors import FsError
from emem_ros.memfs.paths import prefix_range
from emem_ros.memfs.records import NODE_COLUMNS, Node
from emem_ros.tools.hybrid import MAX_FUSED, KeywordIndex, query_tokens, rrf

MODES = ("hybrid", "keyword", "meaning")
DEPTH = 40
"""Candidates taken from each list before fusing."""
PER_FILE = 3
EXACT_LIMIT = 4096
"""Chunks under a base folder up to which the vector side scores them exactly instead of walking the graph."""
SCOPE_LIMIT = 20000
"""Chunks under a base folder up to which the search is restricted to them (above: filtered after)."""
KEYWORD_DF = 2000
"""Documents a word may be in to take part in the keyword list (commoner words are left to the vectors);
also at most 5 % of the documents (50 at least)."""
KEYWORD_FLOOR = 50
"""A word in at most this many documents is distinctive enough, however few documents there are."""
DF_REFRESH = 1000
"""Commits after which remembered document counts are counted again."""
KEYWORD_TOKENS = 6
SNIPPET = 200
_CHUNKS = KeywordIndex("fs_chunks_fts")
_NODES = KeywordIndex("fs_nodes_fts")


@dataclass(frozen=True)
class SearchHit:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    description: str
    kind: str
    owner: str
    modified: float
    matched: str
    """'content' (a chunk) or 'description' (the file's description, name or tags)."""
    distance: Optional[float] = None
    """Metres from the asked place (near_x/near_y)."""


@dataclass(frozen=True)
class _Filters:
    prefix: str
    tags: tuple[str, ...]
    owner: Optional[str]
    kind: Optional[str]
    after: Optional[float]
    before: Optional[float]
    near: Optional[tuple[float, float, float]]


def search(session: Any, query: Any = None, path: Any = "/", mode: Any = "hybrid", tags: Any = None,
           owner: Any = None, kind: Any = None, modified_after: Any = None, modified_before: Any = None,
           near_x: Any = None, near_y: Any = None, radius: Any = None, n_results: Any = 10) -> list[SearchHit]:
    if query is not None and not isinstance(query, str):
        raise FsError(f"query must be text, got {query!r}")
    query = query.strip() if query else None
    if mode not in MODES:
        raise FsError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    n = whole(n_results, "n_results", 10, 1, 100)
    base = session.path(path or "/")
    filters = _filters(session, base, tags, owner, kind, modified_after, modified_before, near_x, near_y, radius)
    conn = session.fs.store.reader()
    if not query:
        return _browse(session, conn, filters, n)
    scope = _scope(session.fs, conn, filters.prefix)
    keyword_chunks: list[int] = []
    keyword_nodes: list[int] = []
    if mode in ("hybrid", "keyword"):
        only = mode == "keyword"
        keyword_chunks = _keyword(conn, _CHUNKS, query, DEPTH, scope, session.fs, only=only)
        keyword_nodes = _keyword(conn, _NODES, query, DEPTH // 2, scope, session.fs, nodes=True, only=only)
    vector_chunks: list[tuple[int, float]] = []
    vector_nodes: list[tuple[int, float]] = []
    if mode in ("hybrid", "meaning"):
        vector = session.fs.engine.embed_query(query)
        vector_chunks = _nearest(session, "fs_chunks", vector, DEPTH, scope)
        vector_nodes = _nearest(session, "fs_nodes", vector, DEPTH // 2, scope, nodes=True)
    fused = rrf([(("c", i), s) for (i, s) in vector_chunks] + [(("n", i), s) for (i, s) in vector_nodes],
                [("c", i) for i in keyword_chunks] + [("n", i) for i in keyword_nodes])
    ranked = sorted(fused.values(), key=lambda f: -f.score)
    keys: list[tuple[str, int]] = [f.key for f in ranked]  # type: ignore[misc]  # the (list, id) keys given above
    tokens = query_tokens(query)
    hits: list[SearchHit] = []
    per_file: dict[str, int] = {}
    chunk_rows: dict[int, tuple[int, int, int, str]] = {}
    nodes: dict[int, Node] = {}
    batch = max(2 * n, 16)
    for position, (item, (kind_, number)) in enumerate(zip(ranked, keys)):
        if position % batch == 0:  # rows of the next candidates only: most searches stop in the first batch
            window = keys[position:position + batch]
            chunk_rows.update(_chunk_rows(conn, [i for which, i in window if which == "c"]))
            wanted = {chunk_rows[i][0] for which, i in window if which == "c" and i in chunk_rows}
            wanted |= {i for which, i in window if which == "n"}
            nodes.update(tables.nodes_by_id(conn, wanted - set(nodes)))
        if kind_ == "c":
            row = chunk_rows.get(number)
            if row is None:
                continue
            node = nodes.get(row[0])
            start, end, text = row[1], row[2], row[3]
        else:
            node = nodes.get(number)
            if node is None or node.kind != "file" and filters.kind == "file":
                continue
            start, end, text = 1, max(1, node.lines), node.description or node.name
        if node is None:
            continue
        seen = _visible(session, node, filters)
        if seen is None:
            continue
        distance = _distance(node, filters)
        if filters.near is not None and distance is None:
            continue
        if per_file.get(seen, 0) >= PER_FILE or (kind_ == "n" and seen in per_file):
            continue
        per_file[seen] = per_file.get(seen, 0) + 1
        score = round(item.score / MAX_FUSED, 4)
        hits.append(SearchHit(seen, start, end, score, _snippet(text, tokens), node.description, node.kind,
                              node.owner, node.modified, "content" if kind_ == "c" else "description", distance))
        if len(hits) >= n:
            break
    return hits


def _filters(session: Any, base: str, tags: Any, owner: Any, kind: Any, after: Any, before: Any,
             near_x: Any, near_y: Any, radius: Any) -> _Filters:
    if tags is not None:
        tags = words(tags, "tags must be a list of words")
    if owner is not None and not isinstance(owner, str):
        raise FsError("owner must be an agent id")
    if kind not in (None, "file", "dir"):
        raise FsError(f"type must be 'file' or 'dir', got {kind!r}")
    if (near_x is None) != (near_y is None):
        raise FsError("give both near_x and near_y to search near a place, or neither")
    near = None
    if near_x is not None:
        try:
            near = (float(near_x), float(near_y), float(radius) if radius is not None else 5.0)
        except (TypeError, ValueError):
            raise FsError("near_x, near_y and radius must be numbers (metres)") from None
        if not all(math.isfinite(v) for v in near) or near[2] <= 0:
            raise FsError("near_x and near_y must be finite and radius positive")
    resolve = session.fs.engine.resolve_time
    return _Filters(session.stored(base), tuple(t.strip().lower() for t in tags or ()), owner, kind,
                    resolve(after) if after is not None else None, resolve(before) if before is not None else None,
                    near)


class _Scope:
    """The chunks under a narrow base folder (ids, and their vectors when few), or None: everything."""

    def __init__(self, ids: np.ndarray, vectors: Optional[np.ndarray], nodes: set[int],
                 node_vectors: tuple[np.ndarray, np.ndarray]) -> None:
        self.ids = ids
        self.vectors = vectors
        self.members = set(ids.tolist())
        self.nodes = nodes
        """Ids of the nodes under the folder (for the description lists)."""
        self.node_vectors = node_vectors
        """(ids, vectors) of the folder's described nodes: scored exactly (a filtered walk over a big
        index that few nodes pass visits most of it)."""

    @classmethod
    def of(cls, conn: Any, prefix: str, dim: int) -> Optional["_Scope"]:
        if prefix == "/":
            return None
        lo, hi = prefix_range(prefix)
        rows = conn.execute("SELECT c.id, c.embedding FROM fs_nodes n JOIN fs_chunks c ON c.node_id = n.id"
                            " WHERE (n.path = ? OR (n.path >= ? AND n.path < ?)) LIMIT ?",
                            (prefix, lo, hi, SCOPE_LIMIT + 1)).fetchall()
        if len(rows) > SCOPE_LIMIT:
            return None  # a broad folder: search everything, filter the hits
        node_rows = conn.execute("SELECT id, embedding FROM fs_nodes WHERE path = ? OR (path >= ? AND path < ?)",
                                 (prefix, lo, hi)).fetchall()
        nodes = {int(r[0]) for r in node_rows}
        described = [r for r in node_rows if r[1] is not None]
        node_vectors = (np.array([r[0] for r in described], dtype=np.int64),
                        np.frombuffer(b"".join(r[1] for r in described), dtype=np.float32).reshape(len(described), dim)
                        if described else np.empty((0, dim), dtype=np.float32))
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        vectors = None
        if len(rows) <= EXACT_LIMIT and all(r[1] is not None for r in rows):
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim) \
                if rows else np.empty((0, dim), dtype=np.float32)
        return cls(ids, vectors, nodes, node_vectors)


DF_CACHE_SIZE = 50_000


def _scope(fs: Any, conn: Any, prefix: str) -> Optional[_Scope]:
    """The folder's scope, reused until the next write (an agent searches the same folder again and again)."""
    key = (prefix, fs.generation)
    cached = fs.scope_cache.get(key, False)
    if cached is not False:
        hit: Optional[_Scope] = cached
        return hit
    scope = _Scope.of(conn, prefix, fs.store.dim)
    if len(fs.scope_cache) >= 16 or any(g != fs.generation for _, g in fs.scope_cache):
        fs.scope_cache.clear()
    fs.scope_cache[key] = scope
    return scope


def _frequencies(conn: Any, index: KeywordIndex, tokens: list[str], fs: Any) -> tuple[dict[str, int], int]:
    """(documents per word, the count above which a word is too common), remembered.

    Counting a word reads its whole posting list. Only "distinctive or
    common" matters here, and a stale count errs safely: a word counted
    before notes made it common still joins the list (found, only slower);
    one counted common stays out (the vectors cover it). The counts are
    dropped every ``DF_REFRESH`` commits and when there are too many.
    """
    cache: dict[tuple[str, str], int] = fs.df_cache
    if fs.generation - getattr(fs, "df_generation", 0) >= DF_REFRESH or len(cache) > DF_CACHE_SIZE:
        cache.clear()
        fs.df_generation = fs.generation
    total = cache.get((index.table, ""))
    if total is None:
        total = int(conn.execute(f"SELECT COUNT(*) FROM {index.table}").fetchone()[0])
        cache[(index.table, "")] = total
    out = {}
    missing = []
    for token in tokens:
        known = cache.get((index.table, token))
        if known is None:
            missing.append(token)
        else:
            out[token] = known
    if missing:
        for token, count in index._document_frequency(conn, missing).items():
            cache[(index.table, token)] = count
            out[token] = count
    return out, min(KEYWORD_DF, max(KEYWORD_FLOOR, total // 20))


def _keyword(conn: Any, index: KeywordIndex, query: str, limit: int, scope: Optional[_Scope], fs: Any,
             nodes: bool = False, only: bool = False) -> list[int]:
    """BM25 over the query's distinctive words only (OR); words in many documents are left to the vectors.

    Cheaper than ``KeywordIndex.search``'s AND pass, which reads the long
    posting lists of common words; for notes the rare words (names,
    numbers, places) are the keyword evidence worth having.
    """
    tokens = query_tokens(query)
    if not tokens:
        return []
    df, common = _frequencies(conn, index, tokens, fs)
    ordered = sorted(tokens, key=lambda t: df[t])
    chosen = [t for t in ordered if df[t] <= common][:KEYWORD_TOKENS]
    if not chosen:
        if not only:
            return []
        chosen = ordered[:1]  # keyword mode asked for words: the least common one, however common
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in chosen)
    table = index.table
    if scope is not None:
        depth = limit * 8
        rows = conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?",
                            (match, depth)).fetchall()
        members = scope.nodes if nodes else scope.members
        return [r[0] for r in rows if r[0] in members][:limit]
    return [r[0] for r in conn.execute(
        f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?", (match, limit))]


def _nearest(session: Any, name: str, vector: np.ndarray, k: int, scope: Optional[_Scope],
             nodes: bool = False) -> list[tuple[int, float]]:
    index = session.fs.store.vectors[name]
    if nodes and scope is not None:  # the folder's descriptions, scored exactly
        return _exact(scope.node_vectors[0], scope.node_vectors[1], vector, k)
    if nodes:
        labels, sims = index.search(vector, k)
        return [(int(label), float(sim)) for label, sim in zip(labels, sims)]
    if scope is not None and not len(scope.ids):
        return []
    if scope is not None and scope.vectors is not None:
        # A narrow folder: score its chunks exactly (a filtered graph walk visits far more nodes than this).
        return _exact(scope.ids, scope.vectors, vector, k)
    allowed = scope.members.__contains__ if scope is not None else None
    labels, sims = index.search(vector, k, allowed)
    return [(int(label), float(sim)) for label, sim in zip(labels, sims)]


def _exact(ids: np.ndarray, vectors: np.ndarray, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Cosine of ``vector`` with each row, best ``k`` first."""
    if not len(ids):
        return []
    query = np.asarray(vector, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0
    sims = (vectors @ query) / (norms * (float(np.linalg.norm(query)) or 1.0))
    order = np.argsort(-sims)[:k]
    return [(int(ids[i]), float(sims[i])) for i in order]


def _chunk_rows(conn: Any, ids: list[int]) -> dict[int, tuple[int, int, int, str]]:
    out: dict[int, tuple[int, int, int, str]] = {}
    for start in range(0, len(ids), 900):
        part = ids[start:start + 900]
        for row in conn.execute(f"SELECT id, node_id, start_line, end_line, text FROM fs_chunks WHERE id IN"
                                f" ({','.join('?' * len(part))})", part):
            out[row[0]] = (row[1], row[2], row[3], row[4])
    return out


def _visible(session: Any, node: Node, filters: _Filters) -> Optional[str]:
    """The path the session sees for a hit passing the filters, else None."""
    prefix = filters.prefix
    if prefix != "/" and node.path != prefix and not node.path.startswith(prefix.rstrip("/") + "/"):
        return None
    seen = session.visible(node.path)
    if seen is None:
        return None
    if filters.tags and not set(filters.tags) <= set(node.tags):
        return None
    if filters.owner is not None and node.owner != filters.owner:
        return None
    if filters.kind is not None and node.kind != filters.kind:
        return None
    if filters.after is not None and node.modified < filters.after:
        return None
    if filters.before is not None and node.modified > filters.before:
        return None
    path: Optional[str] = seen
    return path


def _distance(node: Node, filters: _Filters) -> Optional[float]:
    if filters.near is None or node.place is None:
        return None
    x, y, radius = filters.near
    d = math.hypot(node.place[0] - x, node.place[1] - y)
    return round(d, 2) if d <= radius else None


def _browse(session: Any, conn: Any, filters: _Filters, n: int) -> list[SearchHit]:
    """No query: the newest nodes passing the filters."""
    sql = f"SELECT {NODE_COLUMNS} FROM fs_nodes"
    params: list[Any] = []
    if filters.prefix != "/":
        lo, hi = prefix_range(filters.prefix)
        sql += " WHERE path >= ? AND path < ?"
        params = [lo, hi]
    if filters.near is not None:
        x, y, r = filters.near
        sql += (" AND" if params else " WHERE") + " x BETWEEN ? AND ? AND y BETWEEN ? AND ?"
        params += [x - r, x + r, y - r, y + r]
    sql += " ORDER BY modified DESC LIMIT 2000"
    hits = []
    for row in conn.execute(sql, params):
        node = Node.from_row(row)
        if filters.kind is None and node.kind == "dir":
            continue
        seen = _visible(session, node, filters)
        distance = _distance(node, filters)
        if seen is None or (filters.near is not None and distance is None):
            continue
        hits.append(SearchHit(seen, 1, max(1, node.lines), 1.0, node.description, node.description, node.kind,
                              node.owner, node.modified, "filters", distance))
        if len(hits) >= n:
            break
    if filters.near is not None:
        hits.sort(key=lambda h: h.distance or 0.0)
    return hits


def _snippet(text: str, tokens: list[str]) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    best = lines[0]
    if tokens:
        scored = [(sum(t in line.lower() for t in tokens), -i, line) for i, line in enumerate(lines)]
        top = max(scored)
        if top[0] > 0:
            best = top[2]
    best = best.strip()
    return best if len(best) <= SNIPPET else best[:SNIPPET - 3] + "..."
