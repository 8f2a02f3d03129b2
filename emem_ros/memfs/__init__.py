"""MemFS: a filesystem-like memory that planners (LLM agents) write themselves.

Folders and files live in the memory file (SQLite tables ``fs_*``), so the
operation log, ``emem rebuild`` and ``emem export/import`` cover them. Files
are cut into line-range chunks with embeddings for search by meaning; every
write is a version, so undo and restore never lose anything. See
``fs.py`` (the operations), ``layout.py`` (who may write where),
``session.py`` (per-agent sessions) and ``tools.py`` (the ``fs_*`` tools).
"""

from emem_ros.memfs.errors import Conflict, FsError, NotFound, NotText, PermissionDenied, TooLarge
from emem_ros.memfs.fs import MemFS
from emem_ros.memfs.session import Session

__all__ = ["MemFS", "Session", "FsError", "NotFound", "PermissionDenied", "Conflict", "TooLarge", "NotText"]
