"""Opening emem_ros and the peer ``emem`` 0.3.0 the same way, for the benchmarks.

Both get the same embedding provider object type, no LLM, no timer threads
(flushes happen when a batch fills, and on demand), and a memory file in a
folder of their own, so disk use is the folder's size.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OURS = "emem_ros"
PEER = "emem"


def open_ours(folder: Path, provider, clock: Optional[Callable[[], float]] = None, **overrides: Any):
    from emem_ros import Memory, MemoryConfig

    settings: dict[str, Any] = {"flush_interval": 0.0, "index_save_interval": 0.0, "flush_batch_size": 2048,
                                "working_memory_size": 20_000}
    settings.update(overrides)
    config = MemoryConfig(db_path=str(folder / "memory.db"), **settings)
    return Memory(config=config, embedding_provider=provider, get_current_time=clock)


def open_peer(folder: Path, provider, clock: Optional[Callable[[], float]] = None, capacity: int = 100_000):
    from emem import SpatioTemporalMemory, SpatioTemporalMemoryConfig

    db = folder / "memory.db"
    # Batches of 512 (emem's defaults, 5 per flush and a 2 s timer, are far slower);
    # the HNSW capacity sized up front so emem never pays for a resize.
    config = SpatioTemporalMemoryConfig(db_path=str(db), hnsw_path=str(folder / "memory.hnsw.bin"),
                                        working_memory_size=4096, flush_batch_size=512, flush_interval=3600.0,
                                        hnsw_max_elements=max(100_000, capacity + 1024),
                                        embedding_dim=provider.dim)
    return SpatioTemporalMemory(db_path=str(db), config=config, embedding_provider=provider,
                                get_current_time=clock)


def adder(engine: str, memory) -> Callable[..., Any]:
    """add(text, x, y, z, stamp, layer, source_type, confidence, value, metadata) for either engine."""
    if engine == OURS:
        add, body = memory.add, memory.add_body_state

        def add_ours(text, x, y, z, stamp, layer, source, conf, value, meta=None):
            if source == "interoception":
                return body(text, layer, x, y, z, stamp, metadata=meta, value=value)
            return add(text, x, y, z, stamp, layer, source, conf, meta)

        return add_ours
    add, body = memory.add, memory.add_body_state

    def add_peer(text, x, y, z, stamp, layer, source, conf, value, meta=None):
        if source == "interoception":
            return body(text, layer, x, y, z, stamp, metadata=meta)
        return add(text, x, y, z, stamp, layer, source, conf, meta)

    return add_peer


def flush(engine: str, memory) -> None:
    if engine == OURS:
        memory.flush()
    else:
        memory._wm.flush()
        memory._drain_entity_buffer()


def folder_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


def rss_mb() -> float:
    """Current resident set (MB), from /proc."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine_info() -> str:
    import datetime
    import platform

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as handle:
            kb = int(handle.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, ValueError):
        pass
    return (f"{model}, {os.cpu_count()} cores{mem}; Python {platform.python_version()}; "
            f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def save_results(name: str, lines: list[str], quick: bool = False) -> Path:
    """Write a bench's tables to bench/results/<name>-<date>[-quick].txt, where the README reads them."""
    import datetime

    out = Path(__file__).resolve().parent / "results" / f"{name}-{datetime.date.today().isoformat()}{'-quick' if quick else ''}.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"saved {out}")
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` with linear interpolation; NaN for none."""
    import math

    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
