#!/bin/bash
# Call 6 of the late session of 2026-11-27: one call on a machine of 4 GPUs (carry [".whl", ".lk-before-tile_store.py"]),
# each GPU its own lane on a quarter of the cores, all stopped LIMIT seconds after the start (default 560):
#   GPU 0: issue 45, Mixtral-8x7B's zoo and layer at 2048 and 1 new tokens (zoo-moe-gemma-2026-11-27/call1.sh with
#          MODELS=mixtral-8x7b: the routing near-tie rule's first GPU run, and T = 1, cut in the evening's call);
#   GPU 1: issue 45, Llama-3-8B's FP8 zoo and layer at T = 1 only (zoo-fp8-2026-11-27/call1.sh, TOKENS=1; each zoo
#          keeps to its own runs/zoo/<model>/);
#   GPU 2: issue 44, the long-K GPU test with the pipelined partial sum (operators/gemm/tile_store.py) and again with
#          the sum before it (.lk-before-tile_store.py, carried), then experiments/bench_gemm_classes.yaml's
#          long-K and skinny-M problems;
#   GPU 3: the stream-K GPU test (its partials are summed by the same code), then the same bench's mid-size
#          square, off-aligned and aligned problems.
# Every class problem is benched against cuBLAS and torch.compile (25 s searches), then profiled by ncu: evo's elite
# beside the rivals' kernels (tools/profile_kernel.py; a profile's times are the profiler's, the bench's are the clock).
#   run(command="bash reports/gpu/session-2026-11-27-late/call6.sh", kind="nvidia-h100-x4",
#       carry=[".whl", ".lk-before-tile_store.py"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-560}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R $OUT/mixtral $OUT/fp8; nvidia-smi -L
N=$(nvidia-smi -L | wc -l); C=$(( $(nproc) / 4 ))
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
cores() { echo $(( $1 * C ))-$(( $1 * C + C - 1 )); }
log() { echo "$1 at $(( $(date +%s) - T0 )) s" >> $R/lanes.log; }

( OUT=$OUT/mixtral MODELS=mixtral-8x7b LIMIT=$(( $(left) - 15 )) CUDA_VISIBLE_DEVICES=0 taskset -c $(cores 0) \
    bash reports/gpu/zoo-moe-gemma-2026-11-27/call1.sh > $R/mixtral.log 2>&1; log "mixtral lane exit $?" ) &

( OUT=$OUT/fp8 TOKENS=1 LAYER_TOKENS=1 LIMIT=$(( $(left) - 15 )) CUDA_VISIBLE_DEVICES=$(( 1 % N )) \
    taskset -c $(cores 1) bash reports/gpu/zoo-fp8-2026-11-27/call1.sh > $R/fp8.log 2>&1; log "fp8 lane exit $?" ) &

classes() {  # classes GPU PROBLEM... : bench each class problem, then ncu of its elite beside the rivals
  local g=$1; shift
  for p in "$@"; do
    local s=$(( $(left) - 75 )); [ $s -lt 70 ] && { log "GPU $g: no time for class problem $p"; continue; }
    CUDA_VISIBLE_DEVICES=$(( g % N )) taskset -c $(cores $g) timeout $s python3 -m evo bench \
      experiments/bench_gemm_classes.yaml --problems $p --gpus 1 --contenders torch_compile --out $R/classes-p$p \
      --search-dir /tmp/runs/classes-p$p > $R/classes-p$p.log 2>&1
    log "GPU $g: class problem $p exit $?"
    local bench=$(ls $R/classes-p$p/gemm-*.json 2>/dev/null | head -1); [ -n "$bench" ] || continue
    local key=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['problems'][0]['key'])" $bench)
    local rivals=cublas; [ $p = 2 ] && rivals=cublas,torch_compile  # compile's own Triton kernel wins there
    CUDA_VISIBLE_DEVICES=$(( g % N )) taskset -c $(cores $g) timeout $(( $(left) - 5 )) ncu --clock-control none \
      --nvtx --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --section Occupancy --section MemoryWorkloadAnalysis \
      python3 tools/profile_kernel.py "$key" --bench $bench --rivals $rivals > $R/ncu-p$p.txt 2>&1
    log "GPU $g: ncu of class problem $p exit $?"
  done
}
( export CUDA_VISIBLE_DEVICES=$(( 2 % N )) EVO_OUT=$R/long-k-after
  mkdir -p $EVO_OUT && taskset -c $(cores 2) python3 -m tests.gpu.test_gemm_long_k_gpu > $R/long-k-after.log 2>&1
  log "long-K test (pipelined sum) exit $?"
  mkdir -p /tmp/before && cp -r evo operators genomes tests pyproject.toml /tmp/before/ \
    && cp "$H0/.lk-before-tile_store.py" /tmp/before/operators/gemm/tile_store.py \
    && ( cd /tmp/before && EVO_OUT=$R/long-k-before PYTHONPATH=/tmp/site:/tmp/before taskset -c $(cores 2) \
         python3 -m tests.gpu.test_gemm_long_k_gpu > $R/long-k-before.log 2>&1 ); log "long-K test (sum before) exit $?"
  classes 2 1 4 ) &
( CUDA_VISIBLE_DEVICES=$(( 3 % N )) taskset -c $(cores 3) python3 -m tests.gpu.run_all --budget-s 120 --out $R/stream-k \
    tests/gpu/test_gemm_stream_k_gpu.py > $R/stream-k.log 2>&1; log "stream-K GPU test exit $?"
  classes 3 3 2 5 ) &
wait
log "all done"
cat $R/lanes.log
grep -E "^test_\S+\s+(passed|failed|timeout|error)" $R/stream-k.log
for w in after before; do echo "== long-K test, $w"; sed -n '/^long-K split-K GEMM/,$p' $R/long-k-$w.log | head -20; done
python3 -m evo bench --merge $R/classes-p*/gemm-*.json --out $R/classes > $R/merge.log 2>&1
echo "== classes"; sed -n '/^| problem/,/^$/p' $R/classes/gemm-*.md 2>/dev/null | head -12 | cut -c1-300
for f in $R/ncu-p*.txt; do echo "== $f"; grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Registers Per|Grid Size|Block Size" $f | head -24 | cut -c1-160; done
for x in mixtral fp8; do echo "== $x lane"; tail -22 $R/$x.log | cut -c1-300; done
cd $OUT && tar czf res.tgz res mixtral fp8 && rm -rf res mixtral fp8
