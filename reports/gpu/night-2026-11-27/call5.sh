#!/bin/bash
# Ran on 2026-11-27 late (one H100; results in reports/gpu/session-2026-11-27-late/): issue 43's last GPU checks in one call on ONE GPU,
# carry [".whl"]. First test_gemm_sample.py alone: it now compiles its ~360 kernels ahead in a pool of 16 processes,
# then checks them. Then the benches call 4 had no time for, one after the other, so nothing shares the GPU with a
# timing: GEMM (4096^3 and 16x4096x4096), attention, a fused epilogue. Each bench gets 12 s of search and whatever is
# left of the call.
#   run(command="bash reports/gpu/night-2026-11-27/call5.sh", carry=[".whl"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-585}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R/bench; nvidia-smi -L
python3 -m tests.gpu.run_all --budget-s 330 --out $R/sample tests/gpu/test_gemm_sample.py > $R/sample.log 2>&1
echo "sample exit $? at $(( $(date +%s) - T0 )) s"
. "$(dirname "$0")/../benches.sh"  # bench NAME YAML PROBLEMS...
bench gemm bench_gemm_llm.yaml 1 7
bench attention bench_attention.yaml 1
bench epilogue bench_gemm_epilogue.yaml 1
grep -E "^test_\S+\s+(passed|failed|timeout|error)" $R/sample.log; grep -A5 "^GEMM genome sample" $R/sample/test_gemm_sample.log
for f in $R/bench/*/*.md; do echo "== $f"; grep -E "^\| [0-9]" $f | head -4 | cut -c1-260; done
cd $OUT && tar czf res.tgz res && rm -rf res
