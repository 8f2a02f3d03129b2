"""Bearings and honest radii: camera rays, triangulation, and radii that hold what they claim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emem_ros.geometry.rays import (
    Intrinsics,
    Mounting,
    Ray,
    RaySet,
    camera_ray,
    cut_by_border,
    ray_of,
    view_range_of,
    wrap,
)
from emem_ros.geometry.triangulation import count_poses, find_instances, fit
from emem_ros.geometry.uncertainty import (
    COVERAGE,
    Segment,
    circle_radii,
    circle_radius,
    compass,
    pose_region,
)

CAMERA = Intrinsics(fx=400.0, cx=320.0, width=640, fy=400.0, cy=240.0, height=480)


# ---------------------------------------------------------------------- a box as a ray
def test_the_principal_point_looks_along_the_robot_and_its_mounting():
    ray = camera_ray(1.0, 2.0, 0.0, math.pi / 2, Mounting(x=0.2, y=0.1, z=0.9, yaw=0.3), CAMERA, 320.0, 240.0,
                     10.0, 4.0, 0.01)
    assert ray is not None
    # the mounting offset turns with the robot: 0.2 forward is +y, 0.1 left is -x
    assert ray.x == pytest.approx(0.9) and ray.y == pytest.approx(2.2) and ray.z == pytest.approx(0.9)
    assert ray.azimuth == pytest.approx(math.pi / 2 + 0.3) and ray.elevation == pytest.approx(0.0)


def test_a_box_left_of_centre_lies_counter_clockwise():
    ray = camera_ray(0.0, 0.0, 0.0, 0.0, Mounting(), CAMERA, 120.0, 140.0, 10.0, 4.0, 0.0)
    assert ray.azimuth == pytest.approx(math.atan2(200.0, 400.0))
    # above the centre row: looking up; the pixel's ray is (200, 100, 400) px from the camera's centre, so its
    # elevation is measured from the horizontal through that direction, not along the optical axis
    assert ray.elevation == pytest.approx(math.atan2(100.0, math.hypot(400.0, 200.0)))


def test_the_angular_noise_grows_with_pixel_noise_heading_noise_and_box_width():
    def sigma(pixels, heading, width):
        return camera_ray(0, 0, 0, 0, Mounting(), CAMERA, 300.0, None, width, pixels, heading).sigma

    assert sigma(4.0, 0.0, 1.0) == pytest.approx(4.0 / 400.0, rel=0.01)
    assert sigma(8.0, 0.0, 1.0) > sigma(4.0, 0.0, 1.0)
    assert sigma(4.0, 0.02, 1.0) > sigma(4.0, 0.0, 1.0)
    assert sigma(4.0, 0.0, 200.0) > 3 * sigma(4.0, 0.0, 1.0)  # a big object's box centre is a vague bearing


def test_no_ray_from_a_box_cut_by_the_border_or_outside_the_image():
    assert cut_by_border(30.0, 60.0, CAMERA) and cut_by_border(620.0, 41.0, CAMERA)
    assert not cut_by_border(320.0, 100.0, CAMERA)
    assert camera_ray(0, 0, 0, 0, Mounting(), CAMERA, 30.0, None, 60.0, 4.0, 0.01) is None
    assert camera_ray(0, 0, 0, 0, Mounting(), CAMERA, 700.0, None, None, 4.0, 0.01) is None
    assert camera_ray(0, 0, 0, 0, Mounting(), CAMERA, math.nan, None, None, 4.0, 0.01) is None
    assert camera_ray(0, 0, 0, 0, Mounting(), Intrinsics(fx=0.0, cx=320.0, width=640), 320.0, None, None, 4, 0) is None


def test_a_ray_round_trips_through_metadata_and_bad_ones_are_refused():
    ray = Ray(1.23456, -2.0, 0.9, 3.5, 0.1, 0.0145)
    stored = ray.to_metadata()
    back = Ray.from_metadata(stored)
    assert back.x == pytest.approx(1.235) and back.azimuth == pytest.approx(wrap(3.5), abs=1e-5)
    assert ray_of({"ray": stored}) == back and ray_of('{"ray": ' + str(stored) + "}") == back
    for bad in (None, [1, 2, 3], [1, 2, 3, 4, 5, float("nan")], [1, 2, 3, 4, 5, 0.0], [1, 2, 3, 4, 5, 2.0],
                ["a", 2, 3, 4, 5, 0.1], [True, 2, 3, 4, 5, 0.1]):
        assert Ray.from_metadata(bad) is None, bad
    assert ray_of("{not json") is None and ray_of({"other": 1}) is None
    assert view_range_of({"view_range": 4.5}) == 4.5 and view_range_of({"view_range": -1}) == 6.0
    assert view_range_of(None, default=3.0) == 3.0


# ---------------------------------------------------------------------- radii
def test_the_circle_radius_holds_its_coverage_for_any_ellipse():
    rng = np.random.default_rng(3)
    for covariance in (np.eye(2) * 0.04, np.diag([1.0, 0.01]), np.array([[0.5, 0.3], [0.3, 0.4]])):
        r = circle_radius(covariance)
        points = rng.multivariate_normal([0.0, 0.0], covariance, size=200_000)
        inside = float((np.hypot(points[:, 0], points[:, 1]) <= r).mean())
        assert inside == pytest.approx(COVERAGE, abs=0.004), covariance
        assert circle_radii(covariance[None])[0] == pytest.approx(r, rel=1e-6)
    assert circle_radius(np.eye(2) * 0.01) == pytest.approx(0.1 * math.sqrt(-2 * math.log(1 - COVERAGE)), rel=1e-3)
    assert circle_radius(np.diag([1.0, 0.0])) == pytest.approx(1.96, rel=1e-3)  # a line: the 1-D interval


def test_a_scale_estimated_from_few_rays_widens_the_radius():
    known = circle_radius(np.eye(2))
    assert circle_radius(np.eye(2), dof=5) == pytest.approx(known * 1.39, rel=0.01)
    assert known < circle_radius(np.eye(2), dof=50) < known * 1.04


def test_seen_from_one_spot_the_region_is_the_whole_view_range():
    region = pose_region(np.array([[2.0, 3.0]]), 6.0)
    assert region.consistent and region.radius == pytest.approx(6.0, abs=0.01)
    assert math.dist(region.centre, (2.0, 3.0)) < 0.3


def test_poses_far_apart_leave_a_smaller_region_that_still_holds_every_possible_spot():
    poses = np.array([[0.0, 0.0], [4.0, 0.0], [2.0, 3.0]])
    region = pose_region(poses, 5.0)
    assert region.consistent and region.radius < 4.5
    rng = np.random.default_rng(1)
    spots = rng.uniform(-6, 10, size=(20_000, 2))
    possible = spots[(np.hypot(*(spots[:, None, :] - poses[None]).transpose(2, 0, 1)) <= 5.0).all(axis=1)]
    assert len(possible) > 100
    assert (np.hypot(*(possible - region.centre).T) <= region.radius).all()


def test_poses_with_no_common_spot_fall_back_to_every_disc():
    region = pose_region(np.array([[0.0, 0.0], [20.0, 0.0]]), 5.0)
    assert not region.consistent and region.radius >= 15.0


def test_one_poses_rays_give_a_direction_and_range_whose_circle_holds_the_wedge():
    segment = Segment(origin=(1.0, 1.0), azimuth=math.radians(135), spread=0.02, near=0.3, far=6.0)
    circle = segment.circle()
    for r in np.linspace(0.3, 6.0, 20):
        for off in (-0.039, 0.0, 0.039):  # within ±1.96 sigma
            x = 1.0 + r * math.cos(segment.azimuth + off)
            y = 1.0 + r * math.sin(segment.azimuth + off)
            assert math.dist((x, y), circle.centre) <= circle.radius + 1e-9
    assert compass(segment.azimuth) == "north-west" and compass(0.0) == "east"


# ---------------------------------------------------------------------- triangulation
ONE_DEGREE = math.radians(1.0)


def rays_at(target, poses, rng, sigma=ONE_DEGREE, true_noise=None, outliers=0.0, view=6.0, key=0):
    rows = []
    for i, (x, y) in enumerate(poses):
        az = math.atan2(target[1] - y, target[0] - x) + rng.normal(0.0, true_noise or sigma)
        if rng.random() < outliers:
            az += rng.uniform(-0.8, 0.8)
        rows.append((x, y, 0.9, az, 0.0, sigma, view, float(i), 1.0, key))
    return RaySet.from_rows(rows)


def test_rays_from_several_poses_meet_at_the_object():
    rng = np.random.default_rng(0)
    poses = [(0.0, 0.0), (1.0, -0.5), (2.0, -0.5), (3.0, 0.0), (4.0, 0.5)]
    found = fit(rays_at((2.5, 3.0), poses, rng), np.array([2.0, 2.0]))
    assert found is not None and found.poses == 5 and found.rays == 5
    assert math.dist(found.position, (2.5, 3.0)) < 0.1
    assert found.radius() < 0.5 and found.z == pytest.approx(0.9)


def test_outliers_are_rejected():
    rng = np.random.default_rng(1)
    poses = [(x, y) for x in np.linspace(0, 4, 9) for y in (-1.0, 0.0)]
    rays = rays_at((2.0, 3.0), poses, rng)
    rays.azimuth[[2, 7, 11]] += np.array([0.5, -0.4, 0.7])  # three boxes on something else
    found = fit(rays, np.array([2.0, 2.0]))
    assert math.dist(found.position, (2.0, 3.0)) < 0.1
    assert not found.inliers[[2, 7, 11]].any() and found.inliers.sum() == len(poses) - 3


def test_rays_from_one_spot_do_not_triangulate():
    rng = np.random.default_rng(2)
    rays = rays_at((3.0, 3.0), [(0.0, 0.0)] * 6, rng)
    assert fit(rays, np.array([2.0, 2.0])) is None
    fixes, unexplained = find_instances(rays)
    assert fixes == [] and unexplained.all()
    assert count_poses(rays.x, rays.y) == 1


def test_two_objects_of_one_class_are_found_apart():
    rng = np.random.default_rng(4)
    kitchen = rays_at((2.0, 3.0), [(x, 0.5) for x in np.linspace(0, 4, 12)], rng)
    office = rays_at((12.0, 11.0), [(10.0 + x, 8.5) for x in np.linspace(0, 4, 12)], rng)
    fixes, unexplained = find_instances(RaySet.concat([kitchen, office]))
    assert len(fixes) == 2 and not unexplained.any()
    spots = sorted(tuple(np.round(f.position, 1)) for f in fixes)
    assert math.dist(spots[0], (2.0, 3.0)) < 0.2 and math.dist(spots[1], (12.0, 11.0)) < 0.2


def test_the_radius_holds_the_object_as_often_as_it_says_even_when_the_noise_is_underestimated():
    """Random scenes (3-10 poses; the true noise half to twice the stated one; 5 % stray boxes)."""
    rng = np.random.default_rng(7)
    hits = total = 0
    for _ in range(300):
        target = rng.uniform(-1, 1, 2)
        n = int(rng.integers(3, 11))
        angles = rng.uniform(-math.pi, math.pi) + rng.uniform(-1.2, 1.2, n)
        ranges = rng.uniform(1.0, 5.0, n)
        poses = [(target[0] - r * math.cos(a), target[1] - r * math.sin(a)) for a, r in zip(angles, ranges)]
        stated = math.radians(1.0)
        rays = rays_at(target, poses, rng, sigma=stated, true_noise=stated * rng.uniform(0.5, 2.0), outliers=0.05)
        fixes, _ = find_instances(rays, max_instances=1)
        if not fixes:
            continue
        total += 1
        hits += math.dist(fixes[0].position, target) <= fixes[0].radius()
    assert total > 250
    assert hits / total >= 0.93
