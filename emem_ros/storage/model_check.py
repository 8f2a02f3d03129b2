"""Which embedding model the stored vectors belong to, and re-embedding when it changes.

A memory's vectors are only comparable within one model: the open records
the model and dimension on first use and refuses (or, when asked, re-embeds
everything) when a later open brings another one. Re-embedding is
crash-safe and resumable (see ``reembed_all``).
"""

from __future__ import annotations

import json
import logging
import time

from emem_ros.core.errors import EmbeddingMismatchError
from emem_ros.storage import codec
from emem_ros.storage.base import StoreBase
from emem_ros.storage.derived_indexes import VECTOR_TABLES
from emem_ros.storage.records import EmbedFn
from emem_ros.storage.sqlutil import chunked

log = logging.getLogger(__name__)


def _reembed_target(marker: str) -> tuple[str, int]:
    """(model, dim) a re-embedding was heading for, from its meta marker."""
    try:
        value = json.loads(marker)
        return str(value["model"]), int(value["dim"])
    except (ValueError, KeyError, TypeError):
        return str(marker), -1



class ModelCheckMixin(StoreBase):
    """``MemoryStore``'s model check at open and ``reembed_all``."""

    def _check_model(self) -> bool:
        """Record the model on first open; on a later open, insist it is the same.

        A re-embedding that stopped half-way (``reembed_target`` in meta) left
        vectors of two models: opening with its target model resumes it; any
        other model needs ``rebuild_on_model_change`` (it then re-embeds with
        that one), else the open is refused rather than mixing vector spaces.
        """
        rows = dict(self.state.conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dim', 'reembed_target')"
        ).fetchall())
        if "embedding_model" not in rows:
            with self.write() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                    [("embedding_model", self.model_name), ("embedding_dim", str(self.dim)),
                     ("created_at", repr(time.time()))],
                )
            return False
        stored_model, stored_dim = rows.get("embedding_model"), int(rows.get("embedding_dim", "0"))
        marker = rows.get("reembed_target")
        if marker is not None:
            target = _reembed_target(marker)
            if target == (self.model_name, self.dim):
                log.warning("memory %s: resuming the re-embedding with %s (dim %d) that stopped half-way",
                            self.path, self.model_name, self.dim)
                return True
            if self.config.rebuild_on_model_change:
                log.warning("memory %s: a re-embedding with %s stopped half-way; re-embedding everything with"
                            " %s (dim %d)", self.path, target[0], self.model_name, self.dim)
                return True
            raise EmbeddingMismatchError(
                f"memory {self.path} was being re-embedded with model {target[0]!r} (dim {target[1]}) when it"
                f" stopped, so its vectors mix two models; open it with {target[0]!r} to finish, or set"
                f" rebuild_on_model_change=True to re-embed everything with {self.model_name!r}"
            )
        if stored_model == self.model_name and stored_dim == self.dim:
            return False
        if self.config.rebuild_on_model_change:
            log.warning(
                "memory %s was built with %s (dim %d); re-embedding everything with %s (dim %d)",
                self.path, stored_model, stored_dim, self.model_name, self.dim,
            )
            return True
        raise EmbeddingMismatchError(
            f"memory {self.path} was built with embedding model {stored_model!r} (dim {stored_dim}) "
            f"but this process uses {self.model_name!r} (dim {self.dim}); use the same model, or "
            f"set rebuild_on_model_change=True to re-embed the stored texts"
        )

    def reembed_all(self, embed: EmbedFn, batch: int = 512) -> int:
        """Replace every stored vector with the current model's; then rebuild indexes.

        Crash-safe: a ``reembed_target`` marker is committed before the first
        vector changes, and each chunk commits its progress (``reembed_done``)
        with its vectors, so an interrupted run resumes where it stopped and
        no open in between can take the mixed vectors for one model's.
        """
        target = json.dumps({"model": self.model_name, "dim": self.dim})
        done = 0
        with self.state.write_lock:
            rows = dict(self.state.conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('reembed_target', 'reembed_done')").fetchall())
            progress: dict[str, int] = {}
            if rows.get("reembed_target") == target:
                progress = {k: int(v) for k, v in json.loads(rows.get("reembed_done") or "{}").items()}
            else:
                with self.write() as conn:
                    conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                                     [("reembed_target", target), ("reembed_done", "{}")])
            for name, (table, label, column) in VECTOR_TABLES.items():
                rows_ = self.state.conn.execute(
                    f"SELECT {label}, {column} FROM {table} WHERE embedding IS NOT NULL AND {label} > ?"
                    f" ORDER BY {label}", (progress.get(name, -(2 ** 62)),)
                ).fetchall()
                for chunk in chunked(rows_, batch):
                    vectors = embed([r[1] for r in chunk])
                    progress[name] = int(chunk[-1][0])
                    with self.write() as conn:
                        conn.executemany(
                            f"UPDATE {table} SET embedding=? WHERE {label}=?",
                            [(codec.vector_to_blob(v), r[0]) for v, r in zip(vectors, chunk)],
                        )
                        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('reembed_done', ?)",
                                     (json.dumps(progress),))
                    done += len(chunk)
            with self.write() as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                    [("embedding_model", self.model_name), ("embedding_dim", str(self.dim))],
                )
                conn.execute("DELETE FROM meta WHERE key IN ('reembed_target', 'reembed_done')")
            for path in self.index_dir.glob("*") if self.index_dir.exists() else []:
                try:
                    path.unlink()
                except OSError as exc:  # the open below ignores snapshots it cannot trust
                    log.warning("could not remove the old index file %s: %s", path, exc)
            self.needs_reembed = False
            self.open_indexes()
        return done
