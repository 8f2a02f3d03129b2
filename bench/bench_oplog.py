"""Operation-log size and cost per observation: record format v1 (JSON + zlib) vs v2 (binary, by column).

A realistic stream goes into a real memory (so the log holds exactly what
the memory writes); then the same records are encoded in both formats and
compared with the SQLite file:

- ``labels``: detections with repeated labels, scenes, battery readings
  (test/support/streams.py style): few distinct texts, so few vectors;
- ``captions``: the same with 10% unique captions, each with its own dense
  384-float vector (a language model's vectors do not compress; the hashing
  embedder's sparse ones would flatter the log).

    python bench/bench_oplog.py            # 50k observations per stream
    python bench/bench_oplog.py --quick    # 10k
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emem_ros import Memory, MemoryConfig  # noqa: E402
from emem_ros.storage import logcodec  # noqa: E402
from emem_ros.storage.oplog import FRAME, OpLog  # noqa: E402

LABELS = ["chair", "table", "red mug", "refrigerator", "sofa", "tv", "potted plant", "laptop", "door"]
SCENES = ["a kitchen with a red mug on the table", "a living room with a sofa facing the tv",
          "a hallway with a closed door"]


class DenseEmbedder:
    """Dense pseudo-random unit vectors, one per text (stands in for a language model's)."""

    dim = 384
    model_name = "dense-bench-384"

    def embed(self, texts):
        out = np.stack([np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def stream(memory: Memory, n: int, unique: float) -> None:
    rng = random.Random(3)
    for i in range(n):
        angle = i / 200.0
        x, y, t = 5 * math.cos(angle), 5 * math.sin(angle), 1_000_000.0 + i * 0.5
        if i % 20 == 0:
            memory.add_body_state(f"battery {100 - i * 50 // n}%", "battery", x=x, y=y, timestamp=t,
                                  value=1 - i / (2 * n))
        elif rng.random() < unique:
            memory.add(f"{rng.choice(SCENES)}, {rng.randint(0, 10 ** 6)} seen", x=x, y=y, timestamp=t,
                       layer_name="scene", source_type="perception")
        elif i % 7 == 0:
            memory.add(rng.choice(SCENES), x=x, y=y, timestamp=t, layer_name="scene", source_type="perception")
        else:
            memory.add(rng.choice(LABELS), x=x, y=y, timestamp=t, layer_name="detections",
                       source_type="perception", confidence=0.5 + rng.random() / 2)
    memory.flush()


def measure(name: str, n: int, unique: float) -> str:
    folder = Path(tempfile.mkdtemp(prefix="bench-oplog-"))
    try:
        path = folder / "m.db"
        memory = Memory(config=MemoryConfig(db_path=str(path), flush_interval=0.0, index_save_interval=0.0),
                        embedding_provider=DenseEmbedder())
        started = time.perf_counter()
        stream(memory, n, unique)
        ingest = time.perf_counter() - started
        memory.close()
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.close()
        db_bytes = sum(p.stat().st_size for p in folder.glob("m.db*") if p.is_file())
        records = list(OpLog(path.with_name("m.db.log")).records())
        sizes, costs = {}, {}
        for label, encode, decode in (("v1", logcodec.encode_v1, logcodec.decode_v1),
                                      ("v2", logcodec.encode_v2, logcodec.decode_v2)):
            t0 = time.perf_counter()
            payloads = [encode(r.statements) for r in records]
            t1 = time.perf_counter()
            for payload in payloads:
                decode(payload)
            t2 = time.perf_counter()
            sizes[label] = sum(FRAME.size + len(p) for p in payloads) + 8
            costs[label] = ((t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6)
        return (f"| {name:<9} | {n:>7,} | {db_bytes / n:>8.1f} | {sizes['v1'] / n:>7.1f} | {sizes['v2'] / n:>7.1f} | "
                f"{sizes['v2'] / sizes['v1']:>5.2f} | {costs['v1'][0]:>5.2f} / {costs['v1'][1]:>5.2f} | "
                f"{costs['v2'][0]:>5.2f} / {costs['v2'][1]:>5.2f} | {ingest / n * 1e6:>6.1f} |")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10k observations per stream")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else 50_000
    print("| stream    |     obs | SQLite B/obs | v1 B/obs | v2 B/obs | v2/v1 | v1 enc/dec us/obs | "
          "v2 enc/dec us/obs | ingest us/obs |")
    print("|:----------|--------:|---------:|--------:|--------:|------:|------------:|------------:|-------:|")
    print(measure("labels", n, 0.0))
    print(measure("captions", n, 0.1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
