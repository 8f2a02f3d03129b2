#!/usr/bin/env python3
"""How far off ``locate`` is, and whether its stated radius and confidence can be trusted.

The bundled bags are replayed (the real ingest path, in bag time) and every
object of their ground truth is located, by evidence kind:

- ``3-D``: the patrol bag's 3-D detections (``layer=detections_3d``);
- ``bearings``: camera detections with rays (the camera-only bag; and the
  patrol bag's 2-D layer);
- ``pose only``: the camera-only bag replayed without its camera model, so its
  2-D detections are stored at the robot's pose with the layer's view range
  (what a plain camera gave before bearings).

Each object is asked for over the whole bag and over sliding two-minute
windows (less evidence: fewer poses, sometimes one). An answer counts when its
best evidence is the object's own label. Per evidence kind the table gives
the answers' error (distance from the true position, median and 90th
percentile), the calibration (share of answers whose stated radius holds the
true position: the radius is meant to hold it with probability 0.95), and
the mean stated confidence (0.95 times the share of evidence pointing there;
calibration should be at least that). The kind column is the kind the answer
says placed it. Targets (issue 14): on the 2-D-only bag, median error
<= 0.5 m for objects seen from at least three poses; calibration >= 0.9 for
every kind; both chairs (one class, two rooms) reported.

The TF patrol (``locate_tf.py``): the same bag with ``fixed_frame: map`` and with
odometry alone, errors in ``map`` per placement kind, before and after the reboot.

A fifth case is no bag: ``house_patrol.py``'s six-room house fed through the
Python API the way eMEM's and EmbodiedAgents' callers do (every position the
robot's pose, nothing declared; detections as text "detected: mug, stove",
captions). Targets (issue 25): median error <= 1.0 m, the stated radius holds
the object in >= 90 % of answers, twins both reported, an entity per object.

It also measures what bearings cost a ``locate`` call at scale (``--latency``,
default 100k observations; 0 = skip): bench_tools' robot stream twice in one
run, once as it is (2-D detections at the robot's pose) and once with each
2-D detection carrying the ray from the robot to its object (1° noise), the
same questions asked of both (hashing embedder, query embeddings excluded).

    python bench/bench_locate_accuracy.py            # MiniLM embeddings (offline), windows, latency at 100k
    python bench/bench_locate_accuracy.py --quick    # hashing embedder, whole-bag questions only, no latency
    python bench/bench_locate_accuracy.py --save     # also write bench/results/locate_accuracy-<date>.txt
    python bench/bench_locate_accuracy.py --house-only   # only the house patrol (eMEM-style caller)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from engines import machine_info, percentile, save_results  # noqa: E402

BAGS = ROOT / "rosbags"
WINDOW = 120.0
STEP = 60.0


@dataclass
class Answer:
    case: str
    name: str
    window: str
    kind: str
    error: float
    radius: float
    confidence: float
    poses_2d: int

    @property
    def hit(self) -> bool:
        return self.error <= self.radius


def load_params(embedding: str, camera: bool = True):
    from emem_ros.ros.camera import CameraSpec
    from emem_ros.ros.params import load_params_yaml

    params = load_params_yaml(ROOT / "config" / "memory.yaml")
    if embedding == "hashing":
        params = dataclasses.replace(params, embedding_backend="hashing", embedding_model="")
    if not camera:
        layers = [dataclasses.replace(spec, camera=CameraSpec()) for spec in params.layers]
        params = dataclasses.replace(params, layers=layers)
    return params


def replay(bag: Path, params, folder: Path, name: str):
    from emem_ros.replay import ReplayOptions, replay_bag

    db = folder / f"{name}.db"
    replay_bag(bag, params, ReplayOptions(db_path=str(db), progress=False))
    from emem_ros.cli.common import open_memory

    return open_memory(db)


def windows(truth: dict[str, Any], with_windows: bool) -> list[tuple[str, Optional[float], Optional[float]]]:
    out: list[tuple[str, Optional[float], Optional[float]]] = [("whole", None, None)]
    if with_windows:
        t = truth["start"]
        while t + WINDOW <= truth["end"] + STEP:
            out.append((f"{t - truth['start']:.0f}s", t, t + WINDOW))
            t += STEP
    return out


def ask(memory, case: str, truth: dict[str, Any], layer: Optional[str], with_windows: bool
        ) -> tuple[list[Answer], list[tuple[str, bool]]]:
    """Answers per (class, window); and per duplicated class whether every instance was reported."""
    names = sorted({o["name"] for o in truth["objects"]})
    answers: list[Answer] = []
    duplicates: list[tuple[str, bool]] = []
    for name in names:
        instances = [o for o in truth["objects"] if o["name"] == name]
        for label, after, before in windows(truth, with_windows):
            result = memory.tools.locate(name, layer=layer, time_after=after, time_before=before)
            if result.position is None or not result.evidence or result.evidence[0].text != name:
                continue
            nearest = min(instances, key=lambda o: math.dist(o["position"][:2], result.position[:2]))
            answers.append(Answer(case, name, label, result.source or "?",
                                  math.dist(nearest["position"][:2], result.position[:2]), result.radius,
                                  result.confidence, nearest.get("poses_2d", 0)))
            if label == "whole" and len(instances) > 1:
                spots = [(result.position, result.radius)] + [(p.position, p.radius) for p in result.elsewhere
                                                             if p.label == name]
                both = all(any(math.dist(o["position"][:2], pos[:2]) <= radius for pos, radius in spots)
                           for o in instances)
                duplicates.append((f"{case}: {name} x{len(instances)}", both))
    return answers, duplicates


def table(answers: list[Answer]) -> list[str]:
    lines = [f"{'case':46} {'kind':10} {'answers':>7} {'err p50':>7} {'err p90':>7} {'rad p50':>7} {'calib.':>6} "
             f"{'stated':>6}"]
    keys = sorted({(a.case, a.kind) for a in answers}, key=lambda k: (k[0], k[1]))
    for case, kind in keys:
        group = [a for a in answers if a.case == case and a.kind == kind]
        errors = [a.error for a in group]
        hits = sum(a.hit for a in group) / len(group)
        stated = statistics.fmean(a.confidence for a in group)
        lines.append(f"{case:46} {kind:10} {len(group):>7} {percentile(errors, 0.5):>7.2f} "
                     f"{percentile(errors, 0.9):>7.2f} {percentile([a.radius for a in group], 0.5):>7.2f} "
                     f"{hits:>6.2f} {stated:>6.2f}")
    return lines


def entity_rows(memory, case: str, truth: dict[str, Any]) -> list[str]:
    """Per object: the nearest entity of its name, how it was placed, its error and whether its radius holds it."""
    rows = memory.store.reader().execute("SELECT name, x, y, metadata FROM entities WHERE x IS NOT NULL").fetchall()
    out = []
    for name in sorted({o["name"] for o in truth["objects"]}):
        mine = [(x, y, json.loads(meta or "{}")) for n, x, y, meta in rows if n == name]
        for thing in (o for o in truth["objects"] if o["name"] == name):
            if not mine:
                out.append((case, name, "none", math.nan, math.nan, len(mine)))
                continue
            x, y, meta = min(mine, key=lambda e: math.dist((e[0], e[1]), thing["position"][:2]))
            radius = meta.get("radius", math.nan)
            out.append((case, name, meta.get("position_source", "?"), math.dist((x, y), thing["position"][:2]),
                        radius, len(mine)))
    return out


def entity_table(rows: list[tuple]) -> list[str]:
    lines = [f"{'case':46} {'placed by':10} {'objects':>7} {'err p50':>7} {'err p90':>7} {'calib.':>6}  "
             "entities per class"]
    for case, source in sorted({(r[0], r[2]) for r in rows}):
        group = [r for r in rows if r[0] == case and r[2] == source]
        errors = [r[3] for r in group if not math.isnan(r[3])]
        with_radius = [r for r in group if not math.isnan(r[4])]
        calib = f"{sum(r[3] <= r[4] for r in with_radius) / len(with_radius):>6.2f}" if with_radius else f"{'-':>6}"
        counts = ", ".join(sorted({f"{r[1]} {r[5]}" for r in group if r[5] != 1}))
        lines.append(f"{case:46} {source:10} {len(group):>7} {percentile(errors, 0.5):>7.2f} "
                     f"{percentile(errors, 0.9):>7.2f} {calib}  {'1 each' if not counts else counts + ', others 1'}")
    return lines


QUERIES = ["red mug", "where is the refrigerator", "a person near the door", "laptop on the desk",
           "fire extinguisher", "something to sit on"]
"""bench_tools' locate questions."""


def latency(n: int, rounds: int = 50) -> list[str]:
    """locate p50/p95 on bench_tools' stream without and with rays (same data otherwise, same run)."""
    import random

    from engines import adder, flush, open_ours
    from robot_streams import CachedProvider, make_stream

    from emem_ros.embeddings import HashingEmbeddingProvider
    from emem_ros.geometry.rays import Ray

    stream = make_stream(n)
    positions = {(room.index, label): (room.origin[0] + lx, room.origin[1] + ly)
                 for room in stream.rooms for label, lx, ly in room.objects}
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-locate-latency-") as tmp:
        results = {}
        for with_rays in (False, True):
            rng = random.Random(5)
            provider = CachedProvider(HashingEmbeddingProvider())
            clock = [float(stream.stamp[0])]
            folder = Path(tmp) / ("rays" if with_rays else "plain")
            folder.mkdir()
            memory = open_ours(folder, provider, lambda clock=clock: clock[0], query_cache_enabled=False)
            add = adder("emem_ros", memory)
            rays = 0
            for i, row in enumerate(stream.rows()):
                text, x, y, z, stamp, layer, source, conf, value, meta = row
                if with_rays and layer == "detections":
                    target = positions[(int(stream.room[i]), text)]
                    azimuth = math.atan2(target[1] - y, target[0] - x) + rng.gauss(0.0, math.radians(1.0))
                    meta = {**meta, "ray": Ray(x, y, 0.9, azimuth, 0.0, math.radians(1.0)).to_metadata(),
                            "view_range": 9.0}
                    rays += 1
                add(text, x, y, z, stamp, layer, source, conf, value, meta)
            flush("emem_ros", memory)
            provider.precompute(QUERIES)
            clock[0] = float(stream.stamp[-1]) + 30.0
            for q in QUERIES:
                memory.locate(q)
            times = []
            for _ in range(rounds):
                for q in QUERIES:
                    t0 = time.perf_counter()
                    memory.locate(q)
                    times.append((time.perf_counter() - t0) * 1000.0)
            answer = memory.tools.locate("red mug")
            memory.close()
            results[with_rays] = (percentile(times, 0.5), percentile(times, 0.95), rays, answer.source)
        for with_rays, (p50, p95, rays, source) in results.items():
            what = f"with rays ({rays:,} detections carry one)" if with_rays else "robot-pose detections, no rays"
            out.append(f"  {what:48} p50 {p50:6.2f}  p95 {p95:6.2f}   ('red mug' placed by: {source})")
        out.append(f"  ratio with / without rays: p50 {results[True][0] / results[False][0]:.2f}x")
    return out


def house(embedding: str, quick: bool) -> list[str]:
    """The house patrol fed like eMEM's callers feed a memory (``house_patrol.py``), with the machine's load."""
    import os

    from house_patrol import run

    started = time.perf_counter()
    lines = run("hashing" if embedding == "hashing" else "minilm", [1] if quick else [1, 2, 3], 3)
    load = os.getloadavg()
    lines.append(f"  {time.perf_counter() - started:.0f} s; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
                 "(2 shared cores: times are inflated)")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="hashing embedder, whole-bag questions only")
    parser.add_argument("--embedding", choices=("sentence_transformers", "hashing"), default=None)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--latency", type=int, default=None, help="observations for the latency part (0 = skip)")
    parser.add_argument("--house-only", action="store_true", help="only the house patrol through the Python API")
    args = parser.parse_args(argv)
    embedding = args.embedding or ("hashing" if args.quick else "sentence_transformers")
    if args.house_only:
        lines = house(embedding, args.quick)
        print("\n".join(lines))
        if args.save:
            save_results("locate_accuracy_house", lines, quick=args.quick)
        return 0
    with_windows = not args.quick
    patrol = json.loads((BAGS / "ground_truth.json").read_text())
    camera_only = json.loads((BAGS / "ground_truth_camera_only.json").read_text())
    header = f"bench_locate_accuracy ({'quick' if args.quick else 'full'}; {embedding}) on {machine_info()}"
    print(header, flush=True)
    started = time.perf_counter()
    answers: list[Answer] = []
    duplicates: list[tuple[str, bool]] = []
    entities: list[tuple] = []
    whole: dict[str, list[Answer]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-locate-") as tmp:
        folder = Path(tmp)
        cases = [
            ("patrol_db3, 3-D layer", BAGS / "patrol_db3", patrol, True, "detections_3d"),
            ("patrol_db3, 2-D layer (bearings)", BAGS / "patrol_db3", patrol, True, "detections"),
            ("camera_only_mcap (bearings)", BAGS / "camera_only_mcap", camera_only, True, None),
            ("camera_only_mcap, no camera model (pose only)", BAGS / "camera_only_mcap", camera_only, False, None),
        ]
        memories: dict[tuple[Path, bool], Any] = {}
        try:
            for case, bag, truth, camera, layer in cases:
                key = (bag, camera)
                if key not in memories:
                    memories[key] = replay(bag, load_params(embedding, camera), folder, f"m{len(memories)}")
                got, dup = ask(memories[key], case, truth, layer, with_windows)
                if layer is None or layer == "detections_3d":
                    entities += entity_rows(memories[key], case.split(",")[0] if layer else case, truth)
                answers += got
                duplicates += dup
                whole[case] = [a for a in got if a.window == "whole"]
                print(f"  {case}: {len(got)} answers", flush=True)
        finally:
            for memory in memories.values():
                memory.close()
    lines = [header, "", "Every answer (whole bag and two-minute windows), by the kind of evidence that placed it:"]
    lines += table(answers)
    lines += ["", "Whole-bag answers only:"]
    lines += table([a for answers_of in whole.values() for a in answers_of])
    target = [a for a in whole.get("camera_only_mcap (bearings)", []) if a.poses_2d >= 3]
    if target:
        lines += ["", f"camera_only_mcap, objects seen from >= 3 poses (whole bag): median error "
                      f"{percentile([a.error for a in target], 0.5):.2f} m over {len(target)} answers"]
    lines += ["", "Entities (consolidation): the nearest entity of each object's name:"]
    lines += entity_table(entities)
    lines += ["", "One class, two rooms (both instances inside a reported radius):"]
    lines += [f"  {what}: {'both reported' if ok else 'NOT both reported'}" for what, ok in duplicates]
    import locate_tf

    lines += ["", "TF patrol (patrol_tf_mcap: drifting odometry, a reboot), errors in map: fixed_frame map vs "
                  "odometry alone (its frame starts where the robot booted, not at map's origin):"]
    lines += locate_tf.table(locate_tf.measure(embedding))
    lines += [""] + house(embedding, args.quick)
    latency_n = args.latency if args.latency is not None else (0 if args.quick else 100_000)
    if latency_n:
        lines += ["", f"locate latency at {latency_n:,} observations (ms, query embedding excluded):"]
        lines += latency(latency_n)
    lines += ["", "calib. = share of answers whose stated radius holds the true position; stated = mean stated "
              "confidence (0.95 x share of evidence); err and rad(ius) in metres. Entities: their metadata "
              "'radius' (the same models as locate's).",
              f"total bench time {time.perf_counter() - started:.0f} s"]
    print("\n".join(lines))
    if args.save:
        save_results("locate_accuracy", lines, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
