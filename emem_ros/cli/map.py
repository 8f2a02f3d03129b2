"""``emem map DB -o map.png``: draw a memory file from above (track, observations, gists, entities)."""

from __future__ import annotations

import argparse
from pathlib import Path

from emem_ros.core.errors import EmemError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "map", help="draw the robot's track, observations by layer, gists and entities as an image",
        description="Read DB (read-only; no embedding model needed) and draw a top-down map: the robot's "
                    "track in time order, perception observations coloured by layer, gists as circles of "
                    "their radius, entities with their names.")
    parser.add_argument("db", help="memory file (.db)")
    parser.add_argument("-o", "--output", default="map.png", help="image file; .png, .svg or .pdf (default: map.png)")
    parser.add_argument("--title", default="", help="title (default: counts and time span)")
    parser.add_argument("--dpi", type=int, default=130, help="resolution of a .png (default: 130)")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.cli.common import stored_model

    db = Path(args.db)
    stored_model(db)  # a plain-words error for a missing file or one that is not a memory
    out = Path(args.output)
    if not out.parent.exists():
        raise EmemError(f"the folder for {out} does not exist")
    if args.dpi < 20 or args.dpi > 1200:
        raise EmemError(f"--dpi must be between 20 and 1200, got {args.dpi}")
    try:
        from emem_ros.viz.map import draw_map
    except ImportError as exc:
        raise EmemError(f"emem map needs matplotlib ({exc}); install it with pip install 'emem_ros[replay]'") from exc
    report = draw_map(db, out, title=args.title, dpi=args.dpi)
    print(f"wrote {report.path}: {report.plotted} observations drawn of {report.observations}, "
          f"{report.gists} gists, {report.entities} entities")
    for note in report.notes:
        print(f"note: {note}")
    return 0
