"""locate by evidence kind: measured, bearings, one pose's ray, robot pose; and two objects of one class."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emem_ros.geometry.rays import Ray
from emem_ros.geometry.uncertainty import COVERAGE

SIGMA = math.radians(1.0)


def seen_by_camera(memory, label, target, poses, start, rng, layer="camera", noise=SIGMA, view_range=6.0):
    """2-D detections of ``target`` from ``poses``: stored at the robot's pose with a ray, as the pipeline does."""
    for i, (x, y) in enumerate(poses):
        azimuth = math.atan2(target[1] - y, target[0] - x) + rng.normal(0.0, noise)
        ray = Ray(x, y, 0.9, azimuth, 0.0, SIGMA).to_metadata()
        memory.add(label, x=x, y=y, z=0.0, timestamp=start + i, layer_name=layer, source_type="perception",
                   metadata={"class_id": label, "position_source": "odometry", "ray": ray, "view_range": view_range})


def seen_from(memory, label, poses, start, layer="camera2d", view_range=5.0):
    for i, (x, y) in enumerate(poses):
        memory.add(label, x=x, y=y, z=0.0, timestamp=start + i, layer_name=layer, source_type="perception",
                   metadata={"class_id": label, "position_source": "odometry", "view_range": view_range})


def measured(memory, label, target, n, start, rng, layer="depth"):
    """A depth camera's positions of the object itself: said so (unsaid, one object a moment reads as robot pose)."""
    for i in range(n):
        memory.add(label, x=target[0] + rng.normal(0, 0.03), y=target[1] + rng.normal(0, 0.03), z=0.8,
                   timestamp=start + i, layer_name=layer, source_type="perception", metadata={"class_id": label},
                   position_is="thing")


def walk(x0, y0, x1, y1, n):
    return [(x0 + (x1 - x0) * k / (n - 1), y0 + (y1 - y0) * k / (n - 1)) for k in range(n)]


def test_rays_from_a_walk_past_place_the_object(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(0)
    seen_by_camera(memory, "red mug", (2.0, 3.0), walk(0.0, 0.0, 4.0, 0.0, 12), clock.now - 100, rng)
    result = memory.tools.locate("red mug")
    assert result.source == "bearings" and result.poses >= 8
    assert math.dist(result.position[:2], (2.0, 3.0)) < 0.2 and result.radius < 0.5
    assert result.confidence == pytest.approx(COVERAGE) and result.count == 12
    assert result.position[2] == pytest.approx(0.9)  # no elevation: the camera's height
    assert "placed by bearings" in str(result) and "from" in result.notes[0]


def test_rays_from_one_spot_are_a_direction_and_a_range_not_a_point(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(1)
    seen_by_camera(memory, "red mug", (1.0, 4.0), [(1.0, 1.0)] * 5, clock.now - 100, rng)
    result = memory.tools.locate("red mug")
    assert result.source == "ray" and result.segment is not None
    seg = result.segment
    assert seg.origin == pytest.approx((1.0, 1.0)) and seg.azimuth == pytest.approx(math.pi / 2, abs=0.03)
    assert (seg.near, seg.far) == (pytest.approx(0.3), pytest.approx(6.0))
    assert math.dist(result.position[:2], (1.0, 4.0)) <= result.radius  # the circle holds the whole interval
    text = str(result)
    assert "was seen from one spot only: from (1.0, 1.0) looking 90° (north), 0.3-6.0 m away" in text
    assert "not a point" in text


def test_a_measured_object_and_another_seen_only_by_the_camera_are_both_reported(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(2)
    t = clock.now - 1000
    measured(memory, "chair", (2.0, 3.0), 20, t, rng)
    seen_by_camera(memory, "chair", (2.0, 3.0), walk(0.0, 0.0, 4.0, 0.0, 10), t + 100, rng)  # the same chair
    seen_by_camera(memory, "chair", (12.0, 11.0), walk(10.0, 8.0, 14.0, 8.0, 10), t + 200, rng)  # another one
    result = memory.tools.locate("chair")
    spots = [(result.position, result.radius, result.source)] + [(p.position, p.radius, p.source)
                                                                  for p in result.elsewhere]
    kitchen = [s for s in spots if math.dist(s[0][:2], (2.0, 3.0)) <= s[1]]
    office = [s for s in spots if math.dist(s[0][:2], (12.0, 11.0)) <= s[1]]
    assert [s[2] for s in kitchen] == ["measured"]  # its rays agree with it: absorbed, not a second answer
    assert [s[2] for s in office] == ["bearings"]
    assert len(spots) == 2


def test_a_stray_box_makes_no_second_object(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(3)
    poses = walk(0.0, 0.0, 4.0, 0.0, 12)
    seen_by_camera(memory, "mug", (2.0, 3.0), poses, clock.now - 100, rng)
    memory.add("mug", x=0.0, y=0.0, timestamp=clock.now - 50, layer_name="camera", source_type="perception",
               metadata={"class_id": "mug", "position_source": "odometry", "view_range": 6.0,
                         "ray": Ray(0.0, 0.0, 0.9, -2.0, 0.0, SIGMA).to_metadata()})  # points away
    result = memory.tools.locate("mug")
    assert result.source == "bearings" and result.elsewhere == []


def test_a_stray_box_beside_a_measured_object_makes_no_second_object(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(6)
    measured(memory, "mug", (2.0, 3.0), 10, clock.now - 300, rng)
    seen_by_camera(memory, "mug", (2.0, 3.0), walk(0.0, 0.0, 4.0, 0.0, 12), clock.now - 200, rng)
    memory.add("mug", x=0.0, y=0.0, timestamp=clock.now - 50, layer_name="camera", source_type="perception",
               metadata={"class_id": "mug", "position_source": "odometry", "view_range": 6.0,
                         "ray": Ray(0.0, 0.0, 0.9, -2.0, 0.0, SIGMA).to_metadata()})
    result = memory.tools.locate("mug")
    assert result.source == "measured" and result.elsewhere == [], str(result)
    assert result.confidence == pytest.approx(COVERAGE)


def test_robot_poses_only_give_a_region_within_the_view_range(make_memory, clock):
    memory = make_memory()
    seen_from(memory, "fire extinguisher", walk(0.0, 0.0, 4.0, 0.0, 9), clock.now - 100)
    result = memory.tools.locate("fire extinguisher")
    assert result.source == "robot pose" and result.view_range == pytest.approx(5.0 + 0.5 * math.sqrt(0.5))
    # every spot within 5 m of all poses lies inside the stated circle
    for x in np.linspace(-5, 9, 57):
        for y in np.linspace(-5, 5, 41):
            if all(math.dist((x, y), p) <= 5.0 for p in walk(0.0, 0.0, 4.0, 0.0, 9)):
                assert math.dist((x, y), result.position[:2]) <= result.radius + 1e-6
    assert any("may be up to 5.35" in n for n in result.notes)


def test_robot_pose_sightings_a_measured_object_explains_are_not_a_second_answer(make_memory, clock):
    memory = make_memory()
    rng = np.random.default_rng(4)
    measured(memory, "sofa", (3.0, 3.0), 10, clock.now - 300, rng)
    seen_from(memory, "sofa", walk(0.0, 0.0, 4.0, 0.0, 9), clock.now - 200)
    result = memory.tools.locate("sofa")
    assert result.source == "measured" and result.elsewhere == []
    assert result.confidence == pytest.approx(COVERAGE)
    assert result.notes[0].startswith("placed by measured object positions")
