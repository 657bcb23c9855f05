#!/bin/bash
# Call 2 on a 4-GPU machine: GPU 0 runs the GPU tests (stream-K, then the GEMM sample); GPUs 1-3 the whole ragged
# bench (one evo bench process per problem, pinned to 16 cores, 16 compile workers: a one-GPU machine's search);
# then ncu profiles of the four worst ragged problems, one per GPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
R=/tmp/res; mkdir -p $R/prof
nvidia-smi -L
sed 's/^  gpus: null.*/  gpus: null\n  compile_workers: 16/' experiments/bench_gemm_ragged.yaml > /tmp/ragged.yaml
T0=$(date +%s)
( EVO_OUT=$R CUDA_VISIBLE_DEVICES=0 taskset -c 48-63 python3 -m tests.gpu.run_all --budget-s 395 --out $R/gpu-tests \
    tests/gpu/test_gemm_stream_k_gpu.py tests/gpu/test_gemm_sample.py > $R/tests.log 2>&1 ) &
TP=$!
lane() {  # lane GPU CORES PROBLEM...
  local gpu=$1 cores=$2; shift 2
  for p in "$@"; do
    local left=$(( 405 - ($(date +%s) - T0) ))
    [ $left -lt 60 ] && { echo "GPU $gpu: no time for problem $p" >> $R/lanes.log; continue; }
    echo "GPU $gpu: problem $p at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
    CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $left python3 -m evo bench /tmp/ragged.yaml --problems $p \
      --out $R/ragged-p$p --search-dir runs/ragged-p$p --contenders evo,torch_compile > $R/ragged-p$p.log 2>&1
    echo "GPU $gpu: problem $p exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  done
}
lane 1 0-15 12 4 1 2 & L1=$!
lane 2 16-31 11 7 6 5 3 & L2=$!
lane 3 32-47 10 8 9 13 & L3=$!
wait $L1 $L2 $L3
echo "lanes done at $(( $(date +%s) - T0 )) s"
wait $TP
python3 -m evo bench --merge $R/ragged-p*/gemm-*.json --out $R/merged > $R/merge.log 2>&1
python3 - <<'PY' > /tmp/worst.txt
import glob, json
rows = []
for path in glob.glob("/tmp/res/ragged-p*/gemm-*.json"):
    for p in json.load(open(path))["problems"]:
        c = p["contenders"]
        evo = c.get("evo", {}).get("median_ms")
        best = min(c[n]["median_ms"] for n in ("cublas", "torch_compile") if c.get(n, {}).get("median_ms"))
        if evo:
            rows.append((best / evo, p["key"], path))
for r, k, path in sorted(rows)[:4]:
    print(k, path, round(r, 3))
PY
cat /tmp/worst.txt
i=0
while read key path ratio; do
  n=$(echo $key | cut -d: -f2)
  python3 reports/gpu/profile-h200-2026-11-26-b/best_gluon.py runs "$key" > /tmp/g$i.json 2>> $R/prof/best.log
  ( for what in elite gluon; do
      if [ $what = elite ]; then arg="--bench $path"; else [ -s /tmp/g$i.json ] || continue; arg="--genome /tmp/g$i.json"; fi
      CUDA_VISIBLE_DEVICES=$i timeout 70 ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight \
        --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
        python3 tools/profile_kernel.py "$key" $arg --rivals cublas,torch_compile > $R/prof/ncu-$n-$what.txt 2>&1
    done ) &
  i=$((i+1))
done < /tmp/worst.txt
wait
echo "all done at $(( $(date +%s) - T0 )) s"
cat $R/lanes.log; tail -6 $R/tests.log; grep -h "x cuBLAS\|wrong\|crashed" $R/gpu-tests/test_gemm_stream_k_gpu.log | tail -20
sed -n '/^| problem/,/^$/p' $R/merged/gemm-nvidia-h200.md | head -18
cat $R/prof/best.log; grep -h "  evo \|  cublas \|  torch_compile " $R/prof/*.txt
tar czf $OUT/res.tgz -C /tmp res
ls -la $OUT
