"""Entity and gist markers (emem_ros/ros/markers.py): specs from the store, MarkerArray via rosbags classes."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("rosbags.typesys")

from emem_ros.core.types import Entity, Gist
from emem_ros.ros import markers
from emem_ros.ros.markers import (
    CYLINDER,
    DELETEALL,
    MIN_GIST_DIAMETER,
    SPHERE,
    TEXT_VIEW_FACING,
    marker_specs,
    specs_for,
    to_marker_array,
)
from test.support.ros_messages import InterfaceFactory
from test.support.scene import START, add_entity, add_gist


def entity(number: int, name: str, position, entity_type="furniture") -> Entity:
    return Entity(id=f"ent-{number}", name=name, entity_type=entity_type, position=position, spread=0.3,
                  first_seen=0.0, last_seen=1.0)


def gist(number: int, text: str, centroid, radius: float) -> Gist:
    return Gist(id=f"gist-{number}", text=text, centroid=centroid, radius=radius, time_start=0.0, time_end=1.0,
                source_count=3)


def test_specs_one_marker_and_label_per_placed_thing():
    specs = specs_for(
        [entity(7, "red chair", (2.0, 3.0, 0.0)), entity(8, "ghost", None),
         entity(9, "bad", (math.nan, 1.0, 0.0))],
        [gist(4, "kitchen " * 20, (3.0, 3.0, 0.0), 2.0), gist(5, "tiny", (9.0, 1.0, 0.0), math.nan),
         gist(6, "nowhere", None, 1.0)],
        "odom")
    by_ns = {}
    for spec in specs:
        by_ns.setdefault(spec.ns, []).append(spec)
    assert [s.id for s in by_ns["entities"]] == [7] and by_ns["entities"][0].type == SPHERE
    assert [s.id for s in by_ns["entity_labels"]] == [7] and by_ns["entity_labels"][0].type == TEXT_VIEW_FACING
    assert by_ns["entity_labels"][0].text == "red chair (furniture)"
    assert [s.id for s in by_ns["gists"]] == [4, 5] and {s.type for s in by_ns["gists"]} == {CYLINDER}
    assert by_ns["gists"][0].scale[:2] == (4.0, 4.0)  # diameter of a 2 m radius
    assert by_ns["gists"][1].scale[:2] == (MIN_GIST_DIAMETER, MIN_GIST_DIAMETER)  # NaN radius
    assert len(by_ns["gist_labels"][0].text) <= markers.LABEL_CHARS
    assert {s.frame for s in specs} == {"odom"}


def test_entity_colour_is_stable_per_type():
    a = specs_for([entity(1, "chair", (0.0, 0.0, 0.0)), entity(2, "stool", (1.0, 0.0, 0.0)),
                   entity(3, "alice", (2.0, 0.0, 0.0), "person")], [], "map")
    spheres = [s for s in a if s.ns == "entities"]
    assert spheres[0].color == spheres[1].color != spheres[2].color


def test_marker_specs_from_a_memory(make_memory):
    memory = make_memory()
    entity_id = add_entity(memory, "red chair", "furniture", (2.0, 3.0, 0.0), 5, START, START + 10)
    gist_id = add_gist(memory, "kitchen summary", (3.0, 3.0, 0.0), 1.5, START, START + 10)
    add_gist(memory, "a summary without a place", None, 0.0, START, START + 10)
    specs = marker_specs(memory)
    assert {(s.ns, s.id) for s in specs} == {("entities", entity_id), ("entity_labels", entity_id),
                                             ("gists", gist_id), ("gist_labels", gist_id)}
    assert {s.frame for s in specs} == {memory.config.frame_id}


def test_marker_array_starts_with_deleteall_and_passes_rclpy_checks():
    make = InterfaceFactory()
    specs = specs_for([entity(7, "red chair", (2.0, 3.0, 0.0))], [gist(4, "kitchen", (3.0, 3.0, 0.0), 2.0)], "map")
    array = to_marker_array(specs, make, stamp=START + 0.25)
    make.check(array)
    first, *rest = array.markers
    assert first.action == DELETEALL and first.header.frame_id == "map"
    assert [(m.ns, m.id, m.type) for m in rest] == [(s.ns, s.id, s.type) for s in specs]
    sphere = rest[0]
    assert (sphere.pose.position.x, sphere.pose.position.y) == (2.0, 3.0) and sphere.pose.orientation.w == 1.0
    assert (sphere.header.stamp.sec, sphere.header.stamp.nanosec) == (int(START), 250_000_000)
    assert 0.0 < sphere.color.a <= 1.0 and sphere.scale.x > 0.0
    empty = to_marker_array([], make, stamp=START, frame="odom")
    assert [m.action for m in empty.markers] == [DELETEALL] and empty.markers[0].header.frame_id == "odom"
