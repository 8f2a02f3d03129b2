#!/usr/bin/env python3
"""What one maintenance run costs the serving process: wall time and CPU seconds, per job.

Fills a memory with the realistic stream of robot_streams.py (the
deterministic ``HashingEmbeddingProvider``), then runs ``maintenance()``
once with nothing else going on: entities, the time window and archival of
the whole backlog. Reported: each job's seconds, and the CPU seconds of this
process and of the maintenance process (``maintenance_process``, when there
is one) during the run. CPU of the serving process is interpreter time
questions and flushes would have shared.

    python bench/bench_maintenance_cost.py --rows 100000
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from robot_streams import CachedProvider, make_stream  # noqa: E402


def child_cpu(memory: Any) -> float:
    """CPU seconds the maintenance process used so far (0 without one)."""
    offload = getattr(getattr(memory, "_consolidation", None), "offload", None)
    pid = getattr(offload, "pid", None)
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    from emem_ros import Memory, MemoryConfig
    from emem_ros.embeddings.hashing import HashingEmbeddingProvider

    stream = make_stream(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(db_path=str(Path(tmp) / "memory.db"), query_cache_enabled=False,
                              consolidation_window=5.0, archive_after_seconds=0.0, index_save_interval=0.0)
        memory = Memory(config=config, embedding_provider=CachedProvider(HashingEmbeddingProvider()))
        try:
            shift = time.time() - 600 - float(stream.stamp[args.rows - 1])
            for text, x, y, z, stamp, layer, source, conf, value, meta in stream.rows():
                if source == "interoception":
                    memory.add_body_state(text, layer, x, y, z, stamp + shift, metadata=meta, value=value)
                else:
                    memory.add(text, x, y, z, stamp + shift, layer, source, conf, meta)
            memory.flush()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            report = memory.maintenance(timeout=600)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            child = child_cpu(memory)
        finally:
            memory.close()
    print(f"{args.rows} observations; load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"maintenance {wall:.2f} s (entities {report.entities.seconds:.2f}, time window"
          f" {report.consolidation.seconds:.2f}, archive {report.archive.seconds:.2f});"
          f" {report.consolidation.gists} gists, {report.archive.observations} archived")
    print(f"CPU seconds: serving process {cpu:.2f}, maintenance process {child:.2f}")


if __name__ == "__main__":
    main()
