#!/bin/bash
# Call A of the evening of 2026-11-27, one call on a machine of 4 GPUs (kind nvidia-h100-x4 or nvidia-h200-x4,
# carry [".whl"]): reports/gpu/PENDING.md's calls 1 and 3 side by side, each GPU its own lane on 16 cores:
#   GPU 0: the decode operators after the shared-memory fix, cache_attention under graph replay, the zoo's MoE and
#          Gemma layer kinds, fp8_gemm against torch._scaled_mm, the MoE expert GEMMs, the Gemma operators;
#   GPU 1: the GEMM epilogues (gemm+geglu among them), stream-K, long-K split-K;
#   GPU 2: the GEMM sample (every Triton and Gluon structure), attention in Triton and in Gluon (issue 43's rewrite);
#   GPU 3: Mixtral-8x7B's and Gemma-2-9B's zoos and their layer benches (zoo-moe-gemma-2026-11-27/call1.sh).
# Every test file runs under tests.gpu.run_all's deadline, so a lane cut short still says what ran.
# Results: res.tgz (lane logs, each with summary.json) and zoo/res.tgz; the tables are printed last.
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R $OUT/zoo; nvidia-smi -L
. "$(dirname "$0")/../lanes.sh"  # lane INDEX FILE..., N GPUs, C cores a lane
lane 0 tests/gpu/test_decode_ops_gpu.py tests/gpu/test_cache_attention_gpu.py tests/gpu/test_fp8_gemm_gpu.py \
  tests/gpu/test_zoo_layer_kinds_gpu.py tests/gpu/test_moe_gpu.py tests/gpu/test_gemma_ops_gpu.py &
lane 1 tests/gpu/test_gemm_epilogue_gpu.py tests/gpu/test_gemm_stream_k_gpu.py tests/gpu/test_gemm_long_k_gpu.py &
lane 2 tests/gpu/test_attention_gpu.py tests/gpu/test_attention_gluon_gpu.py tests/gpu/test_gemm_sample.py &
( OUT=$OUT/zoo CUDA_VISIBLE_DEVICES=$(( 3 % N )) LIMIT=$(( ${BUDGET_S:-560} - 10 - ($(date +%s) - T0) )) \
    taskset -c $(( 3 * C ))-$(( 4 * C - 1 )) bash reports/gpu/zoo-moe-gemma-2026-11-27/call1.sh > $R/zoo.log 2>&1
  echo "zoo lane exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log ) &
wait
cat $R/lanes.log
for i in 0 1 2; do echo "== lane $i"; tail -9 $R/lane$i.log; done
echo "== zoo"; tail -40 $R/zoo.log | cut -c1-400
cd $OUT && tar czf res.tgz res && rm -rf res
