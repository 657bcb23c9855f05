#!/bin/bash
# ONE GPU, three lanes sharing it (a third of the cores each): the warp-specialization probe after call 1's GEMM sample
# found a valid ws genome with unwritten outputs, and the GPU tests no call has run since issue 43's rewrites.
#   lane 0: tools/probe_warp_specialize.py at 4096^3, then test_rowwise_sample.py, test_rowwise_split.py;
#   lane 1: test_fp8_gemm_gpu.py (cut in call 1), test_moe_experts_gpu.py (not reached), rope_cache, search, bench;
#   lane 2: user surface, zoo decode and its roles, launch, clocks, compile cache, faults, measure_eval, generate.
#   run(command="bash reports/gpu/night-2026-11-27/call2.sh", carry=[".whl"])
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
LANES=3 . "$(dirname "$0")/../lanes.sh"
( mkdir -p $R/lane0; EVO_OUT=$R/lane0 taskset -c 0-$(( C - 1 )) timeout 300 python3 tools/probe_warp_specialize.py \
    > $R/probe_ws.log 2>&1; echo "probe exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  lane 0 tests/gpu/test_rowwise_sample.py tests/gpu/test_rowwise_split.py ) &
lane 1 tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_moe_experts_gpu.py tests/gpu/test_rope_cache_gpu.py \
  tests/gpu/test_search_gpu.py tests/gpu/test_bench_gpu.py &
lane 2 tests/gpu/test_user_surface_gpu.py tests/gpu/test_zoo_decode_gpu.py tests/gpu/test_zoo_decode_roles_gpu.py \
  tests/gpu/test_launch.py tests/gpu/test_clocks_gpu.py tests/gpu/test_compile_cache.py tests/gpu/test_faults.py \
  tests/gpu/test_measure_eval.py tests/gpu/test_generate_compile_gpu.py &
wait
cat $R/lanes.log
echo "== probe"; tail -14 $R/probe_ws.log | cut -c1-300
for i in 0 1 2; do echo "== lane $i"; grep -E "^test_\S+\s+(passed|failed|timeout|error|skipped|not run)" $R/lane$i.log; done
cd $OUT && tar czf res.tgz res && rm -rf res
