#!/bin/bash
# ONE GPU, carry [".whl"]: issue 43's last GPU checks, one after the other so nothing shares the GPU with a timing:
#   test_gemm_sample.py alone (after the ws_b_tile rule; its modules now freed as it goes: on an H100 call 3's run
#   filled 80 GB with split-K workspaces), then one short `evo bench` per operator family (12 s searches, the
#   committed benches searched 25-60 s), each within what is left of the call.
#   run(command="bash reports/gpu/night-2026-11-27/call4.sh", carry=[".whl"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R/bench; nvidia-smi -L
python3 -m tests.gpu.run_all --budget-s 300 --out $R/sample tests/gpu/test_gemm_sample.py > $R/sample.log 2>&1
echo "sample exit $? at $(( $(date +%s) - T0 )) s"
. "$(dirname "$0")/../benches.sh"  # bench NAME YAML PROBLEMS...
bench softmax bench_softmax.yaml 1
bench rmsnorm bench_rmsnorm.yaml 1
bench gemm bench_gemm_llm.yaml 1 7
bench attention bench_attention.yaml 1
bench epilogue bench_gemm_epilogue.yaml 1
grep -E "^test_\S+\s+(passed|failed|timeout|error)" $R/sample.log; grep -A5 "^GEMM genome sample" $R/sample/test_gemm_sample.log
for f in $R/bench/*/*.md; do echo "== $f"; grep -E "^\| [0-9]" $f | head -4 | cut -c1-260; done
cd $OUT && tar czf res.tgz res && rm -rf res
