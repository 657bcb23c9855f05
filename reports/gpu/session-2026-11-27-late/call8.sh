#!/bin/bash
# Call 8 of the late session of 2026-11-27, on ONE GPU (carry [".whl"]): is gemm+geglu's "slower under CUDA graphs"
# (issue 45) a property of the kernel or of when each clock is read? Call 7's probe found evo's kernel and
# torch.compile's alike slower on every event- and profiler-timed clock (0.63-0.67 ms) than on the call clock read
# first (0.57-0.59 ms). Here nvidia-smi samples the SM clock, power and temperature every 25 ms while
# tools/probe_graph_clock.py runs twice (phases back to back, then with 2 s of idle GPU before each phase, the call
# clock read again last), at gemm+geglu 2048x14336x3584 and at a plain GEMM 8192^3 beside cuBLAS.
#   run(command="bash reports/gpu/session-2026-11-27-late/call8.sh", carry=[".whl"])
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 25 > $R/clocks.csv 2>&1 &
SMI=$!
probe() {  # probe NAME ARGS...
  local name=$1; shift
  timeout 200 python3 tools/probe_graph_clock.py "$@" > $R/$name.txt 2>&1
  echo "$name exit $? at $(( $(date +%s) - T0 )) s"
}
probe geglu gemm+geglu:2048x14336x3584:bf16 --bench reports/bench/gemm-geglu-nvidia-h200.json --rivals torch_compile
probe geglu-idle gemm+geglu:2048x14336x3584:bf16 --bench reports/bench/gemm-geglu-nvidia-h200.json \
  --rivals torch_compile --idle-s 2
probe gemm-idle gemm:8192x8192x8192:bf16 --bench reports/bench/gemm-nvidia-h200.json --idle-s 2
kill $SMI
for f in geglu geglu-idle gemm-idle; do echo "== $f"; grep -E "^(ms per call|torch_compile|evo|cublas) " $R/$f.txt; done
python3 - "$R" <<'PY'
import csv, sys, re, datetime as dt, statistics as st
from pathlib import Path
R = Path(sys.argv[1])
rows = []
for line in (R / "clocks.csv").read_text().splitlines():
    parts = [p.strip() for p in line.split(",")]
    try:
        t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, float(parts[1].split()[0]), float(parts[3].split()[0]), parts[6]))
    except (ValueError, IndexError):
        continue
for name in ("geglu", "geglu-idle", "gemm-idle"):
    text = (R / f"{name}.txt").read_text()
    marks = [(float(t), p) for p, t in re.findall(r"phase (.+?) at ([0-9.]+)", text)]
    print(f"== {name}: SM MHz and W over each phase's first 0.5 s (median), throttle reasons seen")
    for t, p in marks:
        window = [r for r in rows if t <= r[0] < t + 0.5]
        if window:
            print(f"  {p:12s} {st.median(r[1] for r in window):6.0f} MHz {st.median(r[2] for r in window):6.0f} W "
                  f"{sorted(set(r[3] for r in window))}")
PY
cd $OUT && tar czf res.tgz res && rm -rf res
