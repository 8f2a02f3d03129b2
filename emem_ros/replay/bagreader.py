"""Open a rosbag2 recording and say in plain words why when it cannot be read.

A bag is a directory with ``metadata.yaml`` (what ``ros2 bag record``
writes) or a single ``.db3`` / ``.mcap`` file. ``rosbags`` does the reading;
this module adds the checks and the error messages a person can act on, and
decompresses per-message zstd when a bare ``.db3`` file is given without the
metadata that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

from rosbags.rosbag2 import Reader
from rosbags.rosbag2.errors import ReaderError

from emem_ros.core.errors import EmemError

try:  # Python >= 3.14
    from compression import zstd  # type: ignore[import-not-found]  # the standard library's from 3.14 on
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from backports import zstd
    except ImportError:
        zstd = None

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SUFFIXES = (".db3", ".mcap")


class BagError(EmemError):
    """The bag cannot be opened or read; the message says why."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    msgtype: str
    count: int


@dataclass(frozen=True)
class BagInfo:
    path: Path
    storage: str
    """'sqlite3' or 'mcap'."""
    ros_distro: Optional[str]
    start: float
    """Seconds, bag time of the first message (0 for an empty bag)."""
    end: float
    messages: int
    topics: tuple[TopicInfo, ...]
    compression: Optional[str] = None

    def topic(self, name: str) -> Optional[TopicInfo]:
        return next((t for t in self.topics if t.name == name), None)


class BagReader:
    """A rosbags ``Reader`` with plain-words errors; use as a context manager."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._reader = _make_reader(self.path)
        self._bare_file = self.path.is_file()

    def __enter__(self) -> "BagReader":
        try:
            self._reader.open()
        except (ReaderError, OSError, KeyError, ValueError) as exc:
            raise BagError(f"cannot read the bag {self.path}: {_words(exc)}") from exc
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._reader.is_open:
            self._reader.close()

    @property
    def connections(self) -> list[Any]:
        return list(self._reader.connections)

    def info(self) -> BagInfo:
        reader = self._reader
        counts: dict[tuple[str, str], int] = {}
        for conn in reader.connections:
            key = (conn.topic, conn.msgtype)
            counts[key] = counts.get(key, 0) + int(conn.msgcount)
        topics = tuple(TopicInfo(topic, msgtype, n) for (topic, msgtype), n in sorted(counts.items()))
        storage = "mcap" if self._storage_suffix() == ".mcap" else "sqlite3"
        messages = int(reader.message_count)
        start = reader.start_time / 1e9 if messages else 0.0
        end = reader.end_time / 1e9 if messages else 0.0
        return BagInfo(self.path, storage, reader.ros_distro, start, end, messages, topics,
                       reader.compression_mode)

    def messages(self, connections: Optional[Iterable[Any]] = None) -> Iterator[tuple[Any, int, bytes]]:
        """(connection, bag time in ns, raw CDR bytes) in time order; ``connections`` None = all.

        A damaged file raises ``BagError`` at the first unreadable record; the
        messages yielded before it are good, so a caller can keep them.
        """
        wanted = None if connections is None else list(connections)
        if wanted is not None and not wanted:
            return
        try:
            for connection, stamp, raw in self._reader.messages(connections=wanted or ()):
                if self._bare_file and bytes(raw[:4]) == ZSTD_MAGIC and zstd is not None:
                    raw = zstd.decompress(bytes(raw))  # message-compressed .db3 opened without metadata.yaml
                yield connection, stamp, raw
        except Exception as exc:  # sqlite (apsw), mcap record and zstd errors all mean "damaged"
            raise BagError(f"the bag {self.path} is damaged after the first good messages: {_words(exc)}") from exc

    def _storage_suffix(self) -> str:
        if self.path.is_file():
            return self.path.suffix
        storages = getattr(self._reader.storage, "storages", None) or []
        return ".mcap" if any("mcap" in type(s).__name__.lower() for s in storages) else ".db3"


def _make_reader(path: Path) -> Reader:
    if not path.exists():
        raise BagError(f"no bag at {path}")
    if path.is_dir() and not (path / "metadata.yaml").is_file():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in SUFFIXES)
        hint = f"; replay the file itself, e.g. {path / inside[0]}" if inside else ""
        raise BagError(f"{path} is a folder without metadata.yaml, so it is not a rosbag2 bag{hint}")
    if path.is_file() and path.suffix not in SUFFIXES:
        raise BagError(f"{path} is not a bag: expected a bag folder, a .db3 or an .mcap file")
    try:
        return Reader(path)
    except (ReaderError, OSError) as exc:
        raise BagError(f"cannot open the bag {path}: {_words(exc)}") from exc


def _words(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[0].lower() + text[1:] if text else text
