"""Is a failed flush an outage (keep everything, retry) or one bad observation (set it aside)?

The rule, in order:

- an interrupt (KeyboardInterrupt, SystemExit) is neither: keep, re-raise;
- a provider answer we refused (zero/NaN vector, wrong shape:
  ``EmbeddingRejectedError`` anywhere in the cause chain) is about the data;
- the embedder failing to answer (``EmbeddingUnavailableError``: unreachable,
  timed out, crashed), SQLite's operational errors (disk full, I/O error,
  database locked), OS errors (the operation log cannot be written), running
  out of memory and a closed store are outages: every observation is kept
  for retry and nothing is dead-lettered, however long the outage lasts;
- anything else (a constraint, a value SQLite cannot bind, an overflow) is
  possibly one bad observation. The working memory then bisects the batch;
  an observation that fails alone while others of its batch store is
  dead-lettered. If every observation fails alone the fault is not in the
  data, and all of them are kept.
"""

from __future__ import annotations

import sqlite3

from emem_ros.core.errors import EmbeddingUnavailableError, StoreError
from emem_ros.embeddings.base import is_rejection


def is_transient(exc: BaseException) -> bool:
    if not isinstance(exc, Exception):
        return True
    if is_rejection(exc):
        return False
    return isinstance(exc, (EmbeddingUnavailableError, sqlite3.OperationalError, OSError, MemoryError,
                            StoreError))
