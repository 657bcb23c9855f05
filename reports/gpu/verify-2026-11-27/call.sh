#!/bin/bash
# NOT YET RUN (written 2026-11-27, a session with no device time left). One call on a machine of 4 GPUs (2 GPUs work
# too: the lanes then share them), from main's last commit (reports/gpu/setup.sh): every GPU test the last two sessions'
# changes have not yet met on a GPU, a file at a time per lane under a deadline (python -m tests.gpu.run_all keeps
# each file's log and summary.json as it finishes):
#   lane 0: the decode operators after the shared-memory fix (test_decode_ops_gpu failed on an H200 before it),
#           cache_attention's own test (split keys under CUDA-graph replay), the MoE and Gemma layer kinds;
#   lane 1: the GEMM epilogues (gemm+geglu added), stream-K, long-K split-K up to 128, the GEMM sample (every
#           Triton and Gluon structure, after the Gluon launcher's plan became pasted code);
#   lane 2: attention (Triton and Gluon, after the rewrite of issue 43), the Gemma operators (caps, windows,
#           gemm+geglu, cache_attention+softcap);
#   lane 3: fp8_gemm (three scale modes against torch._scaled_mm), MoE expert GEMMs.
# The call, from the project root on this machine:
#   run(command="bash reports/gpu/verify-2026-11-27/call.sh", kind="nvidia-h100-x4", timeout_s=600, carry=[".whl"])
# Results: res.tgz (one folder of logs per lane, each with summary.json); the tables are printed last.
set -u
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s)
N=$(nvidia-smi -L | wc -l); C=$(( $(nproc) / 4 ))
lane() {  # lane INDEX FILE...
  local i=$1; shift
  CUDA_VISIBLE_DEVICES=$(( i % N )) EVO_OUT=$R/lane$i taskset -c $(( i * C ))-$(( i * C + C - 1 )) \
    python3 -m tests.gpu.run_all --budget-s $(( ${BUDGET_S:-550} - ($(date +%s) - T0) )) --out $R/lane$i "$@" \
    > $R/lane$i.log 2>&1
  echo "lane $i exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
lane 0 tests/gpu/test_decode_ops_gpu.py tests/gpu/test_cache_attention_gpu.py tests/gpu/test_zoo_layer_kinds_gpu.py &
lane 1 tests/gpu/test_gemm_epilogue_gpu.py tests/gpu/test_gemm_stream_k_gpu.py tests/gpu/test_gemm_long_k_gpu.py \
  tests/gpu/test_gemm_sample.py &
lane 2 tests/gpu/test_attention_gpu.py tests/gpu/test_attention_gluon_gpu.py tests/gpu/test_gemma_ops_gpu.py &
lane 3 tests/gpu/test_fp8_gemm_gpu.py tests/gpu/test_moe_gpu.py &
wait
cat $R/lanes.log
for i in 0 1 2 3; do echo "== lane $i"; tail -14 $R/lane$i.log; done
cd $OUT && tar czf res.tgz res && rm -rf res
