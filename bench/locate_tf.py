"""The TF patrol (rosbags/patrol_tf_mcap): ``locate`` in ``map`` with ``fixed_frame: map`` against odometry alone.

The bag's odometry drifts (1 % heading bias per metre, 2 % scale) and restarts
at the origin half-way (a reboot); localization publishes ``map -> odom``.
It is replayed twice through the real ingest path: with ``fixed_frame: map``
(positions from TF) and with ``fixed_frame: ""`` (the odometry frame, as
before TF). Every object is located per placement kind — measured 3-D (the
3-D detections, in ``camera_optical_frame``), bearings (2-D detections with
the camera's pose from TF), robot pose (2-D detections without a camera
model: placed where the robot stood, within the view range) — over the whole
bag, before the reboot and after it; errors are measured in ``map`` against
the ground truth. Targets (issue 23): measured 3-D p50 <= 0.1 m, bearings p50
<= 0.3 m, stated radius holding the truth >= 90 %.

Used by bench_locate_accuracy.py (section "TF patrol"); alone:

    python bench/locate_tf.py [--embedding hashing]
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from engines import percentile as _pct  # noqa: E402

BAG = ROOT / "rosbags" / "patrol_tf_mcap"
TRUTH = ROOT / "rosbags" / "ground_truth_tf.json"

KINDS = (("measured 3-D", "detections_3d", True), ("bearings", "detections", True),
         ("robot pose", "detections", False))
"""(placement kind, layer asked, with the camera model)."""


def params_for(embedding: str, fixed_frame: str, camera: bool) -> Any:
    from emem_ros.ros.camera import CameraSpec
    from emem_ros.ros.params import load_params_yaml

    params = load_params_yaml(ROOT / "config" / "memory.yaml", overrides={"fixed_frame": fixed_frame})
    params = dataclasses.replace(params, embedding_backend=embedding,
                                 embedding_model="" if embedding == "hashing" else params.embedding_model)
    if not camera:
        params = dataclasses.replace(params, layers=[dataclasses.replace(s, camera=CameraSpec()) for s in params.layers])
    return params


def periods(truth: dict[str, Any]) -> list[tuple[str, Optional[float], Optional[float]]]:
    reboot = truth["reboots"][0]
    return [("whole", None, None), ("before reboot", truth["start"], reboot["last_before"]),
            ("after reboot", reboot["first_after"], truth["end"])]


def measure(embedding: str = "hashing") -> list[dict[str, Any]]:
    """One row per (fixed frame, placement kind, period): answers, error p50/p90, calibration."""
    from emem_ros.cli.common import open_memory
    from emem_ros.replay import ReplayOptions, replay_bag

    truth = json.loads(TRUTH.read_text())
    names = sorted({o["name"] for o in truth["objects"]})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-locate-tf-") as tmp:
        for fixed in ("map", ""):
            for camera in (True, False):
                db = Path(tmp) / f"m-{fixed or 'odom'}-{camera}.db"
                replay_bag(BAG, params_for(embedding, fixed, camera), ReplayOptions(db_path=str(db), progress=False))
                memory = open_memory(db)
                try:
                    for kind, layer, with_camera in KINDS:
                        if with_camera != camera:
                            continue
                        for period, after, before in periods(truth):
                            errors, hits = [], []
                            for name in names:
                                result = memory.tools.locate(name, layer=layer, time_after=after, time_before=before)
                                if result.position is None or not result.evidence or result.evidence[0].text != name:
                                    continue
                                instances = [o["position"] for o in truth["objects"] if o["name"] == name]
                                error = min(math.dist(p[:2], result.position[:2]) for p in instances)
                                errors.append(error)
                                hits.append(error <= result.radius)
                            rows.append({"fixed_frame": fixed or '"" (odometry)', "kind": kind, "period": period,
                                         "answers": len(errors), "p50": _pct(errors, 0.5), "p90": _pct(errors, 0.9),
                                         "calibration": statistics.fmean(hits) if hits else math.nan})
                finally:
                    memory.close()
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'fixed_frame':16} {'placement':13} {'period':14} {'answers':>7} {'err p50':>7} {'err p90':>7} "
             f"{'calib.':>6}"]
    for r in rows:
        lines.append(f"{r['fixed_frame']:16} {r['kind']:13} {r['period']:14} {r['answers']:>7} {r['p50']:>7.2f} "
                     f"{r['p90']:>7.2f} {r['calibration']:>6.2f}")
    return lines


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedding", choices=("sentence_transformers", "hashing"), default="hashing")
    args = parser.parse_args()
    print("\n".join(table(measure(args.embedding))))
