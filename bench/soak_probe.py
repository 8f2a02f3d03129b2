"""The launched node on a copy of a soak's memory, one of its bags replayed, its services timed.

How the soak's slow answers were found (issue 26): the week's file, Sunday's patrol at 40x, and
``semantic_search``, ``locate`` and ``recall`` asked in turn; prints the node's CPU and RSS and p50 / p95 of
each tool. ``--profile FILE`` also records the node with py-spy (``--gil``: only threads holding the GIL).

    source ../shared/ros2/env.sh && source <ws>/install/setup.bash
    python bench/soak_probe.py SOAK_FOLDER --bag 06-sunday-patrol --seconds 90 [--profile f.txt]

SOAK_FOLDER is the folder a soak run kept (memory.db*, params.yaml, bags/), e.g. /tmp/emem_soak_bmwpby3g.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "rosbags"))

from bench_node import Client, child_env, cpu_seconds, pct, rss_mb  # noqa: E402
from soak import QUESTIONS, TOOLS, Node  # noqa: E402


def copy_memory(folder: Path, work: Path) -> Path:
    """The soak's memory files (and its params, pointed at the copy) in ``work``."""
    for path in folder.glob("memory.db*"):
        (shutil.copytree if path.is_dir() else shutil.copy)(path, work / path.name)
    params = work / "params.yaml"
    params.write_text((folder / "params.yaml").read_text().replace(str(folder), str(work)))
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a soak's folder (memory.db*, params.yaml, bags/)")
    parser.add_argument("--bag", default="06-sunday-patrol")
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--seconds", type=float, default=90.0, help="wall seconds of questions")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy raw output")
    parser.add_argument("--gil", action="store_true", help="py-spy: only the thread holding the GIL")
    args = parser.parse_args()
    domain = int(os.environ.get("ROS_DOMAIN_ID", "57"))
    env = child_env(domain)
    with tempfile.TemporaryDirectory(prefix="emem_probe_") as scratch:
        work = Path(scratch)
        params = copy_memory(args.folder, work)
        client = Client(domain)
        node = Node(params, env, work / "launch.log")
        node.wait_active(client)
        bag = subprocess.Popen(["ros2", "bag", "play", str(args.folder / "bags" / args.bag), "--rate", f"{args.rate:g}",
                                "--clock", "--disable-keyboard-controls", "-d", "1.0"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            time.sleep(5.0)
            assert node.pid is not None
            spy = None
            if args.profile is not None:
                spy = subprocess.Popen(["py-spy", "record", "-p", str(node.pid), "-d", str(int(args.seconds)), "-r", "50",
                                        "-o", str(args.profile), "-f", "raw", "--threads",
                                        "--gil" if args.gil else "--idle"])
            times: dict[str, list[float]] = {tool: [] for tool, _ in TOOLS}
            cpu0, wall0 = cpu_seconds(node.pid), time.monotonic()
            turn = 0
            while time.monotonic() < wall0 + args.seconds:
                tool, srv = TOOLS[turn % len(TOOLS)]
                question = QUESTIONS[(turn // len(TOOLS)) % len(QUESTIONS)]
                fields = {"locate": {"concept": question}, "recall": {"query": question},
                          "semantic_search": {"query": question, "near_x": math.nan, "near_y": math.nan}}[tool]
                _, ms = client.call(tool, srv, timeout=10.0, **fields)
                times[tool].append(ms)
                turn += 1
                client.spin(0.1)
            cpu = 100.0 * (cpu_seconds(node.pid) - cpu0) / (time.monotonic() - wall0)
            print(f"{args.bag} at {args.rate:g}x: node CPU {cpu:.0f} %, RSS {rss_mb(node.pid):.1f} MB; "
                  f"load {Path('/proc/loadavg').read_text().split()[0]}")
            for tool, values in times.items():
                print(f"  {tool:16s} n {len(values):4d}  p50 {pct(values, 0.5):6.1f} ms  p95 {pct(values, 0.95):6.1f} ms")
            if spy is not None:
                spy.wait()
        finally:
            os.killpg(bag.pid, signal.SIGINT)
            bag.wait(30)
            node.signal(signal.SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
