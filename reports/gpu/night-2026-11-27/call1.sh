#!/bin/bash
# Issue 43's GPU tests the evening's calls did not finish, on ONE GPU (kinds of four were not lent), three lanes sharing
# it, a third of the cores each (the files are bound by compiling; none asserts a speed):
#   lane 0: test_gemm_sample.py (every Triton and Gluon GEMM structure), test_gemm_long_k_gpu.py (after b2f33c8);
#   lane 1: test_moe_gpu.py, test_gemma_ops_gpu.py, test_fp8_gemm_gpu.py (after 86ceed0's clamp), test_moe_experts_gpu.py;
#   lane 2: test_zoo_layer_kinds_gpu.py (the evening reached 9 of its 11 cases).
#   run(command="bash reports/gpu/night-2026-11-27/call1.sh", carry=[".whl"])
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
LANES=3 . "$(dirname "$0")/../lanes.sh"
lane 0 tests/gpu/test_gemm_sample.py tests/gpu/test_gemm_long_k_gpu.py &
lane 1 tests/gpu/test_moe_gpu.py tests/gpu/test_gemma_ops_gpu.py tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_moe_experts_gpu.py &
lane 2 tests/gpu/test_zoo_layer_kinds_gpu.py &
wait
cat $R/lanes.log
for i in 0 1 2; do echo "== lane $i"; tail -8 $R/lane$i.log; done
cd $OUT && tar czf res.tgz res && rm -rf res
