#!/bin/bash
# NOT YET RUN (written 2026-11-27 without a GPU). One call on a 4-GPU machine (nvidia-h200-x4 or nvidia-h100-x4,
# carry [".whl"]), under 10 minutes: GPU 0 runs the long-K GPU test (correctness over launches and CUDA-graph
# replays, counters back at zero, time against cuBLAS, the reduction's share) and then the interpreter-checked
# GEMM sample at full size; GPUs 1-3 the long-K bench (experiments/bench_gemm_long_k.yaml: 30 s searches), one
# evo bench process per problem pinned to 16 cores with 16 compile workers, then the partial files merged; and the
# ragged bench's 1152x4352x4096 (problem 11), where cuBLAS runs 126 tiles of 128x320, now in evo's space too.
#   run(command="bash reports/gpu/gemm-long-k/call1.sh", kind="nvidia-h200-x4", carry=[".whl"])
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R
nvidia-smi -L
sed 's/^  gpus: null.*/  gpus: null\n  compile_workers: 16/' experiments/bench_gemm_long_k.yaml > /tmp/long_k.yaml
sed 's/^  gpus: null.*/  gpus: null\n  compile_workers: 16/' experiments/bench_gemm_ragged.yaml > /tmp/ragged.yaml
T0=$(date +%s)
( EVO_OUT=$R CUDA_VISIBLE_DEVICES=0 taskset -c 48-63 python3 -m tests.gpu.run_all --budget-s 530 --out $R/gpu-tests \
    tests/gpu/test_gemm_long_k_gpu.py tests/gpu/test_gemm_sample.py > $R/tests.log 2>&1 ) &
lane() {  # lane GPU CORES PROBLEM...
  local gpu=$1 cores=$2; shift 2
  for p in "$@"; do
    local left=$(( 540 - ($(date +%s) - T0) ))
    [ $left -lt 60 ] && { echo "GPU $gpu: no time for problem $p" >> $R/lanes.log; continue; }
    echo "GPU $gpu: problem $p at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
    CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $left python3 -m evo bench /tmp/long_k.yaml --problems $p \
      --out $R/long-k-p$p --search-dir runs/long-k-p$p --contenders evo,torch_compile > $R/long-k-p$p.log 2>&1
    echo "GPU $gpu: problem $p exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  done
}
lane 1 0-15 2 5 8 &
lane 2 16-31 3 6 1 &
( lane 3 32-47 4 7; left=$(( 540 - ($(date +%s) - T0) )); [ $left -ge 90 ] && CUDA_VISIBLE_DEVICES=3 taskset -c 32-47 \
    timeout $left python3 -m evo bench /tmp/ragged.yaml --problems 11 --out $R/ragged-p11 \
    --search-dir runs/ragged-p11 --contenders evo,torch_compile > $R/ragged-p11.log 2>&1 ) &
wait
python3 -m evo bench --merge $R/long-k-p*/gemm-*.json --out $R/merged > $R/merge.log 2>&1
echo "all done at $(( $(date +%s) - T0 )) s"
cat $R/lanes.log; tail -8 $R/tests.log
grep -h "x cuBLAS" $R/gpu-tests/test_gemm_long_k_gpu.log 2>/dev/null | tail -20
sed -n '/^| problem/,/^$/p' $R/merged/gemm-*.md | head -14
sed -n '/^| problem/,/^$/p' $R/ragged-p11/gemm-*.md 2>/dev/null | sed -n 3p
tar czf $OUT/res.tgz -C /tmp res
tar czf $OUT/runs.tgz $(find runs -type f \( -name '*.jsonl' -o -name '*.json' \) -size -8M) 2>/dev/null
ls -la $OUT
