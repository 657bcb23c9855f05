#!/bin/bash
# Call 9 of the late session of 2026-11-27, on ONE GPU (carry [".whl"]): the graph clock after its change
# (evo/evaluate/clocks.py: graph_ms captures a round of calls per contender, about 5 ms as call_ms's rounds, and
# replays the graphs in turn). The GPU tests of the clocks and the bench, call 8's probe again (its `graph` column is
# the new clock), then evo bench of gemm+geglu at 2048x14336x3584 (the problem whose elite read 26% slower under
# graphs than called) and the plain GEMM at 8192^3, each beside its rivals.
#   run(command="bash reports/gpu/session-2026-11-27-late/call9.sh", carry=[".whl"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-560}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
python3 -m tests.gpu.run_all --budget-s 200 --out $R/gpu-tests tests/gpu/test_clocks_gpu.py tests/gpu/test_bench_gpu.py \
  > $R/gpu-tests.log 2>&1
echo "GPU tests exit $? at $(( $(date +%s) - T0 )) s"
timeout 120 python3 tools/probe_graph_clock.py gemm+geglu:2048x14336x3584:bf16 \
  --bench reports/bench/gemm-geglu-nvidia-h200.json --rivals torch_compile > $R/geglu-probe.txt 2>&1
echo "probe exit $? at $(( $(date +%s) - T0 )) s"
timeout $(( $(left) / 2 )) python3 -m evo bench experiments/gemma2_gemm_geglu.yaml --problems 2 --wall-s 20 \
  --out $R/geglu --search-dir /tmp/runs/geglu > $R/geglu.log 2>&1
echo "geglu bench exit $? at $(( $(date +%s) - T0 )) s"
timeout $(( $(left) - 10 )) python3 -m evo bench experiments/bench_gemm_llm.yaml --problems 2 --wall-s 20 \
  --out $R/gemm --search-dir /tmp/runs/gemm > $R/gemm.log 2>&1
echo "gemm bench exit $? at $(( $(date +%s) - T0 )) s"
grep -E "^test_\S+\s+(passed|failed|timeout|error)" $R/gpu-tests.log; grep -h "graph clock:" $R/gpu-tests/*.log
grep -E "^(ms per call|torch_compile|evo) " $R/geglu-probe.txt
for f in $R/geglu/*.md $R/gemm/*.md; do echo "== $f"; grep -E "^\| [0-9]" $f | head -3 | cut -c1-240; done
cd $OUT && tar czf res.tgz res && rm -rf res
