"""Hand freed heap memory back to the operating system after a job that allocated a lot for a while.

glibc keeps what a process frees: large blocks are first mapped and unmapped, but once one is freed
glibc raises its threshold and serves blocks of that size from the heap, where freed ones stay
resident. A job that builds big things and drops them (a forget pass rebuilding vector indexes and
copying the file; parsing a model) then leaves the process tens of MB larger for good.
``malloc_trim(0)`` returns the free pages; elsewhere than glibc there is nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Optional

_LIBC: Optional[ctypes.CDLL] = None
_LOOKED = False


def _libc() -> Optional[ctypes.CDLL]:
    global _LIBC, _LOOKED
    if not _LOOKED:
        _LOOKED = True
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.malloc_trim.restype = ctypes.c_int
            _LIBC = libc
        except (OSError, AttributeError):  # not glibc (musl, macOS): no malloc_trim
            _LIBC = None
    return _LIBC


def return_freed_heap() -> bool:
    """Give the heap's free pages back to the OS; True if any were returned (False also where unsupported)."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
