"""``emem fleet ...``: create a fleet store, place robots in its frame, list them, retire old data."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("fleet", help="manage a fleet store (PostgreSQL + PostGIS + pgvector)",
                                   description="Manage the fleet store that `emem sync` ships robot memories into.")
    commands = parser.add_subparsers(dest="fleet_command", metavar="ACTION")
    commands.required = True

    init = commands.add_parser("init", help="create the fleet schema (and the vector and postgis extensions)")
    init.add_argument("url", help="postgresql://user@host:port/dbname")
    init.add_argument("--dim", type=int, default=384, help="embedding dimension (default 384: all-MiniLM-L6-v2)")
    init.add_argument("--model", default="", help="embedding model name ('' = taken from the first robot synced)")
    init.add_argument("--partition-days", type=float, default=7.0,
                      help="length of one observations partition in days (default 7)")
    init.set_defaults(func=_init)

    add = commands.add_parser("add-robot", help="register a robot and where its map frame sits in the fleet frame",
                              description="Register ROBOT_ID, or change its transform (rows already synced are "
                                          "moved to the new placement in the same transaction).")
    add.add_argument("url")
    add.add_argument("robot_id")
    add.add_argument("--x", type=float, default=0.0, help="metres (default 0)")
    add.add_argument("--y", type=float, default=0.0, help="metres (default 0)")
    angle = add.add_mutually_exclusive_group()
    angle.add_argument("--yaw", type=float, default=None, help="radians, counter-clockwise (default 0)")
    angle.add_argument("--yaw-deg", dest="yaw_deg", type=float, default=None, help="the same in degrees")
    add.set_defaults(func=_add_robot)

    robots = commands.add_parser("robots", help="list the robots, their transforms and sync positions")
    robots.add_argument("url")
    robots.set_defaults(func=_robots)

    remove = commands.add_parser("remove-robot", help="delete a robot and every row it synced")
    remove.add_argument("url")
    remove.add_argument("robot_id")
    remove.set_defaults(func=_remove_robot)

    detach = commands.add_parser("detach", help="detach (or drop) observation partitions older than a date",
                                 description="Retention: detach every observations partition that ends on or "
                                             "before BEFORE; with --drop, delete it too.")
    detach.add_argument("url")
    detach.add_argument("--before", required=True, help="ISO date/time (UTC unless it says) or epoch seconds")
    detach.add_argument("--drop", action="store_true", help="drop the detached partitions")
    detach.set_defaults(func=_detach)


def _connect(url: str) -> Any:
    from emem_ros.fleet import db

    return db.connect(url)


def _init(args: argparse.Namespace) -> int:
    from emem_ros.fleet import db
    from emem_ros.fleet.schema import SCHEMA_VERSION, init_fleet

    with _connect(args.url) as conn:
        created = init_fleet(conn, dim=args.dim, model=args.model, partition_days=args.partition_days)
    where = db.redact(args.url)
    print(f"created the fleet store at {where} ({args.dim}-dimensional embeddings)" if created
          else f"the fleet store at {where} already exists (now at schema version {SCHEMA_VERSION})", file=sys.stdout)
    return 0


def _add_robot(args: argparse.Namespace) -> int:
    from emem_ros.fleet.errors import FleetError
    from emem_ros.fleet.robots import add_robot
    from emem_ros.fleet.schema import open_fleet
    from emem_ros.fleet.transform import parse_transform

    try:
        transform = parse_transform(args.x, args.y, args.yaw, args.yaw_deg)
    except ValueError as exc:
        raise FleetError(str(exc)) from None
    with _connect(args.url) as conn:
        open_fleet(conn, args.url)
        added, moved = add_robot(conn, args.robot_id, transform)
    place = f"x={transform.x:g} m, y={transform.y:g} m, yaw={transform.yaw:g} rad"
    if added:
        print(f"added robot {args.robot_id} ({place})", file=sys.stdout)
    else:
        print(f"robot {args.robot_id} now at {place}; {moved} synced row(s) moved to the new placement",
              file=sys.stdout)
    return 0


def _robots(args: argparse.Namespace) -> int:
    from emem_ros.fleet.robots import list_robots
    from emem_ros.fleet.schema import open_fleet

    with _connect(args.url) as conn:
        open_fleet(conn, args.url)
        robots = list_robots(conn)
    if not robots:
        print("no robots yet (emem fleet add-robot, or emem sync adds one)", file=sys.stdout)
        return 0
    print(f"{'robot':<16} {'x':>8} {'y':>8} {'yaw':>7} {'log seq':>9} {'observations':>13}  last sync")
    for r in robots:
        synced = r.synced_at.isoformat(timespec="seconds") if r.synced_at else "never"
        print(f"{r.robot_id:<16} {r.transform.x:>8.2f} {r.transform.y:>8.2f} {r.transform.yaw:>7.3f} "
              f"{r.applied_seq:>9} {r.observations:>13}  {synced}", file=sys.stdout)
    return 0


def _remove_robot(args: argparse.Namespace) -> int:
    from emem_ros.fleet.robots import remove_robot
    from emem_ros.fleet.schema import open_fleet

    with _connect(args.url) as conn:
        open_fleet(conn, args.url)
        removed = remove_robot(conn, args.robot_id)
    print(f"removed robot {args.robot_id} and its {removed} observation(s)", file=sys.stdout)
    return 0


def _detach(args: argparse.Namespace) -> int:
    import time as _time

    from emem_ros.core.timeexpr import parse_time
    from emem_ros.fleet.errors import FleetError
    from emem_ros.fleet.schema import detach_partitions, open_fleet

    before = parse_time(args.before, now=_time.time())
    if before is None:
        raise FleetError(f"--before needs a date, got {args.before!r}")
    with _connect(args.url) as conn:
        open_fleet(conn, args.url)
        names = detach_partitions(conn, before, drop=args.drop)
    verb = "dropped" if args.drop else "detached"
    print(f"{verb} {len(names)} partition(s){': ' + ', '.join(names) if names else ''}", file=sys.stdout)
    return 0
