"""A top-down picture of a memory file: where the robot went, what it saw, what it made of it.

Drawn straight from the SQLite truth (read-only, no embedder needed), with
matplotlib's object API and the Agg canvas, so it works headless and never
changes the caller's pyplot backend:

- the robot's track: the positions of observations placed by odometry, in
  time order (a memory filled by hand, without odometry, uses every position);
- perception observations, one colour per layer (3-D detections sit on the
  objects, 2-D ones where the robot stood);
- gists as circles of their radius;
- entities as black crosses with their names.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

MAX_TRACK_POINTS = 50_000
MAX_POINTS_PER_LAYER = 20_000
MAX_LABELS = 40
"""Entities named on the map (the most sighted); the rest are drawn without a name."""


@dataclass
class MapData:
    track: np.ndarray
    """(n, 2) robot positions in time order."""
    track_from_odometry: bool
    layers: dict[str, np.ndarray]
    """Perception layer -> (n, 2) observation positions."""
    gists: list[tuple[float, float, float]]
    """(x, y, radius) of gists with a centroid."""
    entities: list[tuple[str, float, float, int]]
    """(name, x, y, sightings)."""
    observations: int = 0
    without_position: int = 0
    time_span: Optional[tuple[float, float]] = None


@dataclass
class MapReport:
    path: Path
    observations: int
    plotted: int
    gists: int
    entities: int
    notes: list[str] = field(default_factory=list)


def load(db_path: Union[str, Path]) -> MapData:
    """Everything the map needs, read-only; big layers are subsampled evenly (deterministically)."""
    conn = sqlite3.connect(f"file:{Path(db_path)}?mode=ro", uri=True)
    try:
        total, unplaced, first, last = conn.execute(
            "SELECT COUNT(*), SUM(x IS NULL OR y IS NULL), MIN(stamp), MAX(stamp) FROM observations").fetchone()
        robot = conn.execute(
            "SELECT x, y FROM observations WHERE x IS NOT NULL AND y IS NOT NULL"
            " AND json_extract(metadata, '$.position_source') = 'odometry' ORDER BY stamp, id").fetchall()
        from_odometry = bool(robot)
        if not robot:
            robot = conn.execute("SELECT x, y FROM observations WHERE x IS NOT NULL AND y IS NOT NULL"
                                 " ORDER BY stamp, id").fetchall()
        layers: dict[str, np.ndarray] = {}
        for (layer,) in conn.execute("SELECT DISTINCT layer FROM observations WHERE source_type != 'interoception'"
                                     " AND x IS NOT NULL ORDER BY layer").fetchall():
            rows = conn.execute("SELECT x, y FROM observations WHERE layer = ? AND x IS NOT NULL AND y IS NOT NULL"
                                " AND source_type != 'interoception'", (layer,)).fetchall()
            layers[layer] = _thin(np.asarray(rows, dtype=np.float64).reshape(-1, 2), MAX_POINTS_PER_LAYER)
        gists = [(float(x), float(y), float(r or 0.0)) for x, y, r in conn.execute(
            "SELECT cx, cy, radius FROM gists WHERE cx IS NOT NULL AND cy IS NOT NULL").fetchall()]
        entities = [(str(n), float(x), float(y), int(s)) for n, x, y, s in conn.execute(
            "SELECT name, x, y, sightings FROM entities WHERE x IS NOT NULL AND y IS NOT NULL"
            " ORDER BY sightings DESC, id").fetchall()]
    finally:
        conn.close()
    track = _thin(np.asarray(robot, dtype=np.float64).reshape(-1, 2), MAX_TRACK_POINTS)
    span = (float(first), float(last)) if first is not None else None
    return MapData(track, from_odometry, layers, gists, entities, int(total or 0), int(unplaced or 0), span)


def draw(data: MapData, out: Union[str, Path], title: str = "", dpi: int = 130) -> MapReport:
    """Write the map as an image (format from the suffix: .png, .svg, .pdf)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle

    out = Path(out)
    points = [data.track] + list(data.layers.values()) + [np.asarray([(x, y) for _, x, y, _ in data.entities])]
    lo, hi = _extent([p for p in points if p.size], data.gists)
    width, height = hi - lo
    aspect = height / width if width > 0 else 1.0
    fig_w = 11.0
    fig = Figure(figsize=(fig_w, min(14.0, max(5.0, fig_w * aspect * 0.9 + 1.0))), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)

    for x, y, radius in data.gists:
        ax.add_patch(Circle((x, y), max(radius, 0.15), facecolor=(0.95, 0.69, 0.2, 0.07),
                            edgecolor=(0.77, 0.5, 0.0, 0.7), linewidth=1.0, zorder=1))
    if data.gists:
        ax.scatter([], [], s=120, facecolor=(0.95, 0.69, 0.2, 0.25), edgecolor=(0.77, 0.5, 0.0, 0.8),
                   label=f"gists ({len(data.gists)}), radius to scale")
    if len(data.track):
        ax.plot(data.track[:, 0], data.track[:, 1], color="#555555", linewidth=0.7, alpha=0.55, zorder=2,
                label="robot track" if data.track_from_odometry else "observation positions in time order")
        ax.plot(*data.track[0], marker="^", color="#1a9641", markersize=9, zorder=5, linestyle="none",
                label="start")
        ax.plot(*data.track[-1], marker="s", color="#d7191c", markersize=8, zorder=5, linestyle="none",
                label="end")
    colours = _palette(len(data.layers))
    plotted = 0
    for colour, (layer, xy) in zip(colours, data.layers.items()):
        if not len(xy):
            continue
        plotted += len(xy)
        ax.scatter(xy[:, 0], xy[:, 1], s=9, color=colour, alpha=0.55, linewidths=0, zorder=3,
                   label=f"{layer} ({len(xy)})")
    if data.entities:
        ex = [e[1] for e in data.entities]
        ey = [e[2] for e in data.entities]
        ax.scatter(ex, ey, marker="X", s=60, color="black", edgecolor="white", linewidths=0.6, zorder=6,
                   label=f"entities ({len(data.entities)})")
        placed: list[tuple[float, float]] = []
        near = 0.03 * max(width, height, 1.0)
        for name, x, y, _ in data.entities[:MAX_LABELS]:
            crowd = sum(1 for px, py in placed if abs(px - x) < 3 * near and abs(py - y) < near)
            placed.append((x, y))
            ax.annotate(name, (x, y), xytext=(5, 4 - 11 * crowd), textcoords="offset points", fontsize=8, zorder=7,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.75, "linewidth": 0})

    margin = max(0.5, 0.04 * max(width, height))
    ax.set_xlim(lo[0] - margin, hi[0] + margin)
    ax.set_ylim(lo[1] - margin, hi[1] + margin)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.set_title(title or _title(data), fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(out, bbox_inches="tight")
    notes = []
    if data.without_position:
        notes.append(f"{data.without_position} observations have no position and are not drawn")
    if not data.track_from_odometry and len(data.track):
        notes.append("no odometry-placed observations: the line joins every position in time order")
    return MapReport(out, data.observations, plotted, len(data.gists), len(data.entities), notes)


def draw_map(db_path: Union[str, Path], out: Union[str, Path], title: str = "", dpi: int = 130) -> MapReport:
    return draw(load(db_path), out, title, dpi)


# ---------------------------------------------------------------------- helpers
def _thin(points: np.ndarray, limit: int) -> np.ndarray:
    """At most ``limit`` points, evenly spaced in the given order (keeps the first and last)."""
    if len(points) <= limit:
        return points
    index = np.linspace(0, len(points) - 1, limit).round().astype(int)
    thinned: np.ndarray = points[index]
    return thinned


def _extent(points: list[np.ndarray], gists: list[tuple[float, float, float]]) -> tuple[np.ndarray, np.ndarray]:
    arrays = [p.reshape(-1, 2) for p in points]
    arrays += [np.asarray([[x - r, y - r], [x + r, y + r]]) for x, y, r in gists]
    if not arrays:
        return np.zeros(2), np.ones(2)
    stacked = np.vstack(arrays)
    lo, hi = stacked.min(axis=0), stacked.max(axis=0)
    hi = np.where(hi - lo < 1.0, lo + 1.0, hi)
    return lo, hi


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _title(data: MapData) -> str:
    parts = [f"{data.observations} observations", f"{len(data.gists)} gists", f"{len(data.entities)} entities"]
    if data.time_span is not None:
        start, end = data.time_span
        fmt = "%Y-%m-%d %H:%M" if end - start >= 86_400 else "%H:%M"
        day = datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y-%m-%d")
        parts.append(f"{day} {_utc(start, '%H:%M')}–{_utc(end, fmt)} UTC ({_minutes(end - start)})")
    return " · ".join(parts)


def _utc(stamp: float, fmt: str) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime(fmt)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"

