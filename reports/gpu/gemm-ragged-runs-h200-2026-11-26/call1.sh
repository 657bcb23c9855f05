#!/bin/bash
# Call 1 on a 4-GPU machine: GPU tests on GPU 0; the ragged bench on GPUs 1-3, one evo bench process per problem,
# each process pinned to 16 cores with 16 compile workers (what a one-GPU machine of 16 cores gives a search).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R
nvidia-smi -L; nproc
python3 -c "import torch;print(torch.cuda.get_device_name(), torch.cuda.device_count())"
sed 's/^  gpus: null.*/  gpus: null\n  compile_workers: 16/' experiments/bench_gemm_ragged.yaml > /tmp/ragged.yaml
grep -n compile_workers /tmp/ragged.yaml
T0=$(date +%s)
( EVO_OUT=$R CUDA_VISIBLE_DEVICES=0 taskset -c 48-63 python3 -m tests.gpu.run_all --budget-s 545 --out $R/gpu-tests \
    tests/gpu/test_gemm_sample.py tests/gpu/test_gemm_epilogue_gpu.py > $R/tests.log 2>&1 ) &
lane() {  # lane GPU CORES PROBLEM...
  local gpu=$1 cores=$2; shift 2
  for p in "$@"; do
    local left=$(( 560 - ($(date +%s) - T0) ))
    [ $left -lt 60 ] && { echo "GPU $gpu: no time for problem $p" >> $R/lanes.log; continue; }
    echo "GPU $gpu: problem $p at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
    CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $left python3 -m evo bench /tmp/ragged.yaml --problems $p \
      --out $R/ragged-p$p --search-dir runs/ragged-p$p --contenders evo,torch_compile > $R/ragged-p$p.log 2>&1
    echo "GPU $gpu: problem $p exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  done
}
lane 1 0-15 4 1 2 3 &
lane 2 16-31 6 7 5 8 &
lane 3 32-47 9 10 11 12 13 &
wait
cat $R/lanes.log; tail -15 $R/tests.log
for f in $R/ragged-p*/gemm-*.md; do sed -n '/^| problem/,/^$/p' $f | sed -n 3p; done
tar czf $OUT/res.tgz -C /tmp res
tar czf $OUT/runs.tgz $(find runs -type f \( -name '*.jsonl' -o -name '*.json' \) -size -8M) 2>/dev/null
ls -la $OUT
