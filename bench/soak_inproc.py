"""In-process soak: a bag through the node's ingest pipeline and timers, RSS of this process and its maintenance child.

How issue 26's growth was found (no ROS needed): the bag is read with the replay's reader and fed to
``IngestPipeline`` in bag time, as the node does; every 60 s of bag time the buffered observations are
flushed and entities + time-window consolidation run (in the maintenance process, as the node's
consolidation timer does), every 600 s archival; every 300 s ``locate`` and ``semantic_search`` are
asked (``--ask S``: every S s of bag time, with ``recall``, the soak's questions in turn). Every 30 robot-minutes it prints RSS (this process and the maintenance process), SQLite's own
heap (``sqlite3_memory_used``), and with ``--py`` Python's traced heap and the lines that grew most.

    python rosbags/generate.py --out /tmp/g --laps 80        # (or any bag of the patrol's topics)
    PYTHONPATH=. python bench/soak_inproc.py /tmp/g/patrol_db3 /tmp/m.db [--py] [--inproc] [--trace] [--who]
        [--retention SECONDS] [--ask S] [--set NAME=VALUE ...]

``--retention S``: every layer's retention is S seconds, archived text dropped (as soak.py --retention).
``--set NAME=VALUE``: a memory setting (``--set gist_graph_hours=0``: every gist in the vector graph).
``--trim``: malloc_trim after each archive job.
``--inproc``: maintenance in this process (its heap is traced too); ``--trace``: tracebacks of the
growth (slow); ``--who``: what holds consolidation rows at the end.
"""
import ctypes
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, os.getcwd())
import dataclasses

from emem_ros.core.heap import return_freed_heap
from emem_ros.replay.bagreader import BagReader
from emem_ros.replay.decoder import Decoder
from emem_ros.replay.runner import CAMERA_INFO, ODOMETRY, BagClock, _routes
from emem_ros.replay.typestore import load_typestore
from emem_ros.ros.factory import build_memory
from emem_ros.ros.params import load_params_yaml
from emem_ros.ros.pipeline import IngestPipeline


def rss(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_mb():
    """glibc's view of this process's heap (MB): arena (brk), mmapped blocks, in use, free but kept."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return (f"arena {info.arena / 1e6:.1f} mmap {info.hblkhd / 1e6:.1f} used {info.uordblks / 1e6:.1f} "
            f"free {info.fordblks / 1e6:.1f}")


def smaps_mb():
    """Where this process's RSS is (MB): the brk heap, other anonymous maps (mmapped blocks, thread arenas,
    Python's arenas), file-backed maps (code)."""
    heap = anon = files = 0.0
    name = ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:
            name = head[5] if len(head) > 5 else ""
        elif line.startswith("Rss:"):
            kb = int(head[1]) / 1024
            if name == "[heap]":
                heap += kb
            elif not name or name.startswith("[anon") or name == "[stack]":
                anon += kb
            else:
                files += kb
    return f"heap {heap:.1f} anon {anon:.1f} files {files:.1f}"


def children(pid):
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except Exception:
            pass
    return out


bag = sys.argv[1]
db = sys.argv[2]
trace = "--trace" in sys.argv
TRIM = "--trim" in sys.argv
"""Hand freed heap back to the OS after each archive job (is the growth live data or glibc keeping it?)."""
ASK = float(sys.argv[sys.argv.index("--ask") + 1]) if "--ask" in sys.argv else 300.0
"""Bag seconds between two rounds of questions (40 = a round per wall second at 40x, as bench/soak.py asks)."""
EVERY = int(sys.argv[sys.argv.index("--every") + 1]) if "--every" in sys.argv else int(1800 // ASK)
"""Rounds of questions between two prints: every 30 robot-minutes unless told."""
QUESTIONS = ["red mug", "fridge", "sofa", "laptop", "coffee machine", "person", "chair", "bookshelf"]
params = load_params_yaml("config/memory.yaml")
params = dataclasses.replace(params, embedding_backend="hashing", embedding_model="")
mem_cfg = dataclasses.replace(params.memory, db_path=db, maintenance_process="--inproc" not in sys.argv)
if "--retention" in sys.argv:  # --retention SECONDS: every layer keeps that long, archived text dropped
    keep = float(sys.argv[sys.argv.index("--retention") + 1])
    mem_cfg = dataclasses.replace(mem_cfg, retention_max_age={spec.name: keep for spec in params.layers},
                                  archive_retention="drop")
for setting in [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--set"]:  # --set gist_graph_hours=0
    key, value = setting.split("=", 1)
    mem_cfg = dataclasses.replace(mem_cfg, **{key: type(getattr(mem_cfg, key))(value)})
params = dataclasses.replace(params, memory=mem_cfg)
if trace:
    tracemalloc.start(12)
elif "--py" in sys.argv:
    tracemalloc.start(1)
with BagReader(bag) as reader:
    info = reader.info()
    decoder = Decoder(load_typestore("humble"), "humble")
    routes, _ = _routes(reader.connections, params)
    clock = BagClock(info.start)
    memory = build_memory(params, get_current_time=clock, db_path=db)
    pipeline = IngestPipeline(memory, params, warn=lambda m: None)
    for question in QUESTIONS:  # the level a restarted node takes on this file, once it has answered
        memory.locate(question)
        memory.semantic_search(question)
        memory.recall(question)
    gc.collect()
    print(f"open  obs {memory.store.counts()['observations']:6d} rss {rss(os.getpid()):6.1f} "
          f"child {sum(rss(k) for k in children(os.getpid())):6.1f}  maps {smaps_mb()}  "
          f"hnsw {[(k, len(v)) for k, v in memory.store.vectors.items() if len(v)]}", flush=True)
    wanted = [c for c in reader.connections if c.id in routes]
    next_cons = info.start + 60
    next_arch = info.start + 600
    next_q = info.start + ASK
    t0 = time.time()
    snap0 = None
    n = 0
    lat = []
    for conn, stamp_ns, raw in reader.messages(wanted):
        t = stamp_ns * 1e-9
        clock.now = t
        route = routes[conn.id]
        msg = decoder.decode(conn, raw)
        if route == ODOMETRY:
            pipeline.on_odometry(msg, t)
        elif route.startswith(CAMERA_INFO):
            pipeline.on_camera_info(route[len(CAMERA_INFO):], msg)
        else:
            pipeline.on_message(route, msg, t)
        n += 1
        if t >= next_cons:
            next_cons += 60
            memory.flush()
            f1 = memory.submit_job("entities")
            f2 = memory.submit_job("time_window")
            f1.result()
            f2.result()
        if t >= next_arch:
            next_arch += 600
            memory.submit_job("archive").result()
            if TRIM:
                return_freed_heap()
        if t >= next_q:
            next_q += ASK
            question = QUESTIONS[len(lat) % len(QUESTIONS)]
            s = time.perf_counter()
            memory.locate(question)
            lat.append((time.perf_counter() - s) * 1000)
            memory.semantic_search(question)
            memory.recall(question)
            if len(lat) % EVERY == 0:
                gc.collect()
                kids = children(os.getpid())
                c = memory.store.counts()
                print(f"{(t - info.start) / 3600:5.2f} h obs {c['observations']:6d} rss {rss(os.getpid()):6.1f} "
                      f"child {sum(rss(k) for k in kids):6.1f} locate {sum(lat[-EVERY:]) / EVERY:6.1f} ms "
                      f"wall {time.time() - t0:5.0f}", flush=True)
                import ctypes
                lib = ctypes.CDLL("libsqlite3.so.0")
                lib.sqlite3_memory_used.restype = ctypes.c_int64
                st = memory.store
                heap = tracemalloc.get_traced_memory()[0] / 1e6 if tracemalloc.is_tracing() else -1.0
                vectors = [(k, len(v)) for k, v in st.vectors.items()]
                print(f"      sqlite {lib.sqlite3_memory_used() / 1e6:.1f} MB  py {heap:.1f} MB  hnsw {vectors}"
                      f"  malloc {malloc_mb()}  maps {smaps_mb()}", flush=True)
                if tracemalloc.is_tracing():
                    snap = tracemalloc.take_snapshot()
                    if snap0 is None:
                        snap0 = snap
                    else:
                        for st in snap.compare_to(snap0, "traceback" if trace else "lineno")[:8]:
                            print("   ", st)
                            for line in st.traceback.format()[-8:] if trace else []:
                                print("      ", line)
    if "--who" in sys.argv:
        from emem_ros.consolidation.rows import ObsRow
        objs = [o for o in gc.get_objects() if isinstance(o, ObsRow)]
        print("ObsRows", len(objs))
        import collections
        holders = collections.Counter()
        for o in objs[:: max(1, len(objs)//50)]:
            for r in gc.get_referrers(o):
                if r is objs:
                    continue
                desc = type(r).__name__
                if isinstance(r, (dict, list)):
                    for rr in gc.get_referrers(r):
                        if rr is objs or type(rr).__name__ == 'frame':
                            continue
                        desc += "<-" + type(rr).__name__ + (":" + ",".join(k for k, v in vars(rr).items() if v is r) if hasattr(rr, "__dict__") else "")
                holders[desc] += 1
        print(holders.most_common(10))
        sv = memory._consolidation
        print("rowmemo", len(sv.rows))
    memory.close()
    # (memory closed above) -- who holds ObsRows?
