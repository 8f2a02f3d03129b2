# alternate.sh N ROUNDS REPS LABEL: fastest_calls.py on main's checkout (BASE) and this one, alternately,
# on memories bench_tools.py --reuse /tmp/perf-bt built; prints the best round per tool
N=$1; R=$2; REPS=$3; L=$4; OUT=/tmp/perf-ab/min-$L-$N; mkdir -p $OUT
T=semantic_search,spatial_query,locate,recall,get_current_context
for r in $(seq 1 $R); do for side in base perf; do root=$(cd $(dirname $0)/../.. && pwd); [ $side = base ] && root=${BASE:-/work/wt/perf-base}
  { cat /proc/loadavg; ${PYTHON:-python3} $(dirname $0)/fastest_calls.py $root $N $T $REPS; cat /proc/loadavg; } > $OUT/$side-$r.txt 2>&1
done; done
${PYTHON:-python3} - $OUT <<'PY'
import json, sys, glob, statistics
out = sys.argv[1]
res = {}
for f in sorted(glob.glob(out + "/*.txt")):
    side = f.split("/")[-1].split("-")[0]
    for line in open(f):
        if line.startswith("RESULT "):
            for tool, v in json.loads(line[7:]).items():
                res.setdefault(tool, {}).setdefault(side, []).append(v)
for tool, sides in res.items():
    row = f"{tool:22}"
    for side in ("base", "perf"):
        vs = sides.get(side, [])
        if vs:
            row += f" {side}: min {min(v['min'] for v in vs):.3f} p10 {min(v['p10'] for v in vs):.3f} p50 {min(v['p50'] for v in vs):.3f} |"
    print(row)
PY
