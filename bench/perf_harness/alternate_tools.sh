#!/bin/bash
# alternate_tools.sh ROUNDS SIZES OUT: bench_tools.py (wall clock, the five target tools) on main's checkout
# (BASE) and this one, alternately, each run alone under the shared bench lock with the load printed inside
# it; memories are reused from REUSE (bench_tools.py --reuse). Then: median p50 / p95 per tool, size and side.
# EXTRA: more bench_tools.py flags for both sides (e.g. --no-label-memo; BASE's bench_tools.py must know them).
R=$1; SIZES=$2; OUT=$3; mkdir -p $OUT
HERE=$(cd $(dirname $0)/../.. && pwd); BASE=${BASE:-/work/wt/fastnear-base}; PY=${PYTHON:-$HERE/.venv/bin/python}
T=${TOOLS:-semantic_search,spatial_query,locate,recall,get_current_context}
for r in $(seq 1 $R); do for n in ${SIZES//,/ }; do for side in base after; do
  root=$HERE; [ $side = base ] && root=$BASE
  flock ${LOCK:-/work/wt/bench.lock} bash -c "echo load-in \$(cat /proc/loadavg); $PY $root/bench/bench_tools.py --ours-only $n \
    --sizes '' --skip-peer --reuse ${REUSE:-/tmp/fastnear} --only $T --budget ${BUDGET:-3} --samples 300 ${EXTRA:-}; echo load-out \$(cat /proc/loadavg)" \
    > $OUT/$side-$n-$r.txt 2>&1
done; done; done
$PY - $OUT <<'PY'
import glob, re, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    side, n, r = f.split("/")[-1][:-4].split("-")
    text = open(f).read()
    load = re.search(r"load-in (\S+)", text).group(1)
    for line in text.splitlines():
        m = re.match(r"(\w+)\s+([\d.]+)\s+([\d.]+)\s+-", line)
        if m:
            rows.setdefault((int(n), m.group(1)), {}).setdefault(side, []).append((float(m.group(2)), float(m.group(3)), load))
for (n, tool), sides in sorted(rows.items()):
    out = f"{tool:21}{n:>8} |"
    for side in ("base", "after"):
        vs = sides.get(side, [])
        if vs:
            out += (f" {side} " + " ".join(f"{a:.2f}/{b:.2f}" for a, b, _ in vs)
                    + f"  median p50 {statistics.median(a for a, _, _ in vs):.2f} p95 {statistics.median(b for _, b, _ in vs):.2f} |")
    print(out)
for f in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    text = open(f).read()
    print(f"  {f.split('/')[-1]}: " + " ".join(l for l in text.splitlines() if l.startswith("load-")))
PY
