"""``emem sync DB --to URL --robot-id R``: ship what the fleet store has not applied of a memory's log."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sync", help="ship a memory's operation log into a fleet store (PostgreSQL)",
        description="Apply to the fleet store every record of DB's operation log it has not applied yet, in "
                    "batches, each with the robot's new log position in one PostgreSQL transaction: an "
                    "interrupted sync resumes where it stopped and nothing is applied twice. Works while the "
                    "robot's node has the memory open (it only reads).")
    parser.add_argument("db", help="memory file (.db); its log is the folder DB.log beside it")
    parser.add_argument("--to", dest="url", required=True, help="fleet store: postgresql://user@host:port/dbname")
    parser.add_argument("--robot-id", dest="robot_id", required=True,
                        help="this robot's id in the fleet (added with the identity transform if new)")
    parser.add_argument("--batch-records", type=int, default=None, help="log records per transaction (default 2000)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop after the batch that passes this many seconds (the rest ships next time)")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from emem_ros.fleet.sync import BATCH_RECORDS, sync_memory

    report = sync_memory(args.db, args.url, args.robot_id, batch_records=args.batch_records or BATCH_RECORDS,
                         max_seconds=args.max_seconds)
    print(report.summary(), file=sys.stdout)
    return 0
