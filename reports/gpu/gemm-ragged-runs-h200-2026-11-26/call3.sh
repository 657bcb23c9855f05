#!/bin/bash
# Call 3 on a 4-GPU machine: the LLM ten on GPUs 1-3 (one evo bench process per problem, 16 cores and 16 compile
# workers each, as a one-GPU machine); on GPU 0 the stream-K probe, then ncu of the stream-K kernel at 777x4096x4096.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R
nvidia-smi -L
sed 's/^  gpus: null.*/  gpus: null\n  compile_workers: 16/' experiments/bench_gemm_llm.yaml > /tmp/llm.yaml
T0=$(date +%s)
( CUDA_VISIBLE_DEVICES=0 taskset -c 48-63 timeout 250 python3 tools/probe_gluon_stream_k.py $R/probe-sk.json > $R/probe-sk.log 2>&1
  echo '{"BLOCK_M":128,"BLOCK_N":256,"BLOCK_K":64,"num_stages":3,"num_warps":8,"backend":"gluon","memory":"host_descriptor","persistent":true,"stream_k":true}' > /tmp/sk.json
  CUDA_VISIBLE_DEVICES=0 taskset -c 48-63 timeout 120 ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    python3 tools/profile_kernel.py gemm:777x4096x4096:bf16 --genome /tmp/sk.json > $R/ncu-sk-777.txt 2>&1 ) &
lane() {  # lane GPU CORES PROBLEM...
  local gpu=$1 cores=$2; shift 2
  for p in "$@"; do
    local left=$(( 540 - ($(date +%s) - T0) ))
    [ $left -lt 70 ] && { echo "GPU $gpu: no time for problem $p" >> $R/lanes.log; continue; }
    echo "GPU $gpu: problem $p at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
    CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $left python3 -m evo bench /tmp/llm.yaml --problems $p \
      --out $R/llm-p$p --search-dir runs/llm-p$p --contenders evo,triton_tutorial,torch_compile > $R/llm-p$p.log 2>&1
    echo "GPU $gpu: problem $p exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  done
}
lane 1 0-15 2 1 3 4 & L1=$!
lane 2 16-31 9 5 6 & L2=$!
lane 3 32-47 10 7 8 & L3=$!
wait
echo "done at $(( $(date +%s) - T0 )) s"
cat $R/lanes.log; cat $R/probe-sk.log | tail -45; grep -E "^  [a-z_]+ .*\(|Duration|Compute \(SM\)|No Eligible|Issued Warp|Stall" $R/ncu-sk-777.txt | head -30
for f in $R/llm-p*/gemm-*.md; do sed -n '/^| problem/,/^$/p' $f | sed -n 3p; done
tar czf $OUT/res.tgz -C /tmp res
