"""tools/ray_reads: what a stored ray that is not a six-number JSON array turns into (nothing), next to good ones."""

import json
import sqlite3

import pytest

from emem_ros.geometry.rays import DEFAULT_VIEW_RANGE
from emem_ros.tools.ray_reads import read_place_rays, read_rays

GOOD = [1.0, 2.0, 0.9, 0.5, 0.0, 0.05]


def _conn(metadata: list[object]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE observations(id INTEGER PRIMARY KEY, stamp REAL, layer TEXT, text_id INTEGER,"
                 " metadata TEXT)")
    for i, meta in enumerate(metadata, 1):
        conn.execute("INSERT INTO observations VALUES (?, ?, 'cam', 7, ?)",
                     (i, float(i), None if meta is None else json.dumps(meta)))
    return conn


# Each bad ray next to two good ones: a number, a word, five numbers, a nested list, text in JSON, no ray.
BAD = [{"ray": 3.5}, {"ray": "left"}, {"ray": GOOD[:5]}, {"ray": [GOOD]}, {"ray": "[1, 2"}, {"view_range": 4.0},
       None]


@pytest.mark.parametrize("bad", BAD, ids=[json.dumps(b) for b in BAD])
def test_a_bad_ray_is_left_out_and_the_good_ones_are_read(bad):
    conn = _conn([{"ray": GOOD, "view_range": 4.0}, bad, {"ray": [2.0, *GOOD[1:]]}])
    for found in (read_rays(conn, [7], ["cam"], None, None), read_place_rays(conn, [1, 2, 3])):
        rays = found.rays
        assert sorted(rays.key.tolist()) == [1, 3]
        by_id = dict(zip(rays.key.tolist(), zip(rays.x.tolist(), rays.view_range.tolist())))
        assert by_id == {1: (1.0, 4.0), 3: (2.0, DEFAULT_VIEW_RANGE)}
        assert found.text_id.tolist() == [7, 7] and found.layer.tolist() == ["cam", "cam"]
