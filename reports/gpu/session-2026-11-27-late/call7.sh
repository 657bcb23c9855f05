#!/bin/bash
# Call 7 of the late session of 2026-11-27, on ONE GPU (carry [".whl"]), each step within what is left of LIMIT s:
#   1. the long-K GPU test again: its Gluon cases' split-K reduction now takes 8-16 rows a program where 32 left SMs
#      idle (operators/gemm/gluon_plan.py: _reduce_rows; call 6's ncu: 12 us of 97 at 640x384x98304);
#   2. experiments/bench_gemm_classes.yaml's long-K problem again (call 6: 0.72x the better of cuBLAS and compile);
#   3. issue 45: why gemm+geglu's elite is slower replayed in a CUDA graph (tools/probe_graph_clock.py);
#   4. issue 45: ncu of Mixtral's down projection at 2048 tokens, evo's elite beside torch._grouped_mm's kernels;
#   5. issue 45: where Mixtral's layer at 2048 tokens spends its time (evo.bench.zoo_layer --profile), with the zoo
#      call 6 collected (call6/mixtral/res/mixtral-8x7b/mixtral-8x7b_kernels.py.gz).
#   run(command="bash reports/gpu/session-2026-11-27-late/call7.sh", carry=[".whl"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-570}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
log() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a $R/steps.log; }
NCU="ncu --clock-control none --nvtx --nvtx-include profile/ --section SpeedOfLight --section WarpStateStats \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"

EVO_OUT=$R/long-k timeout $(( $(left) - 20 )) python3 -m tests.gpu.test_gemm_long_k_gpu > $R/long-k.log 2>&1
log "long-K test exit $?"
timeout $(( $(left) - 20 )) python3 -m evo bench experiments/bench_gemm_classes.yaml --problems 1 --gpus 1 \
  --contenders torch_compile --out $R/classes-p1 --search-dir /tmp/runs/classes-p1 > $R/classes-p1.log 2>&1
log "class problem 1 exit $?"
timeout $(( $(left) - 20 )) python3 tools/probe_graph_clock.py gemm+geglu:2048x14336x3584:bf16 \
  --bench reports/bench/gemm-geglu-nvidia-h200.json --rivals torch_compile > $R/geglu-graph.txt 2>&1
log "geglu graph probe exit $?"
timeout $(( $(left) - 20 )) $NCU python3 tools/profile_kernel.py moe_down:2048x8x2x4096x14336:bf16 \
  --bench reports/bench/moe_down-nvidia-h200.json --rivals grouped_mm > $R/ncu-moe-down-2048.txt 2>&1
log "moe_down ncu exit $?"
gunzip -c reports/gpu/session-2026-11-27-late/call6/mixtral/res/mixtral-8x7b/mixtral-8x7b_kernels.py.gz \
  > /tmp/mixtral-8x7b_kernels.py
timeout $(( $(left) - 10 )) python3 -m evo.bench.zoo_layer /tmp/mixtral-8x7b_kernels.py experiments/models/mixtral-8x7b.json \
  --context 4096 --tokens 2048 --profile --out $R/mixtral-profile > $R/mixtral-profile.log 2>&1
log "mixtral profile exit $?"
sed -n '/^long-K split-K GEMM/,$p' $R/long-k.log | head -20
sed -n '/^| problem/,/^$/p' $R/classes-p1/gemm-*.md 2>/dev/null | head -8 | cut -c1-260
cat $R/geglu-graph.txt | grep -v Warning | tail -8 | cut -c1-260
grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|Grid Size|Block Size|Registers Per|^  [a-z_]+ +[0-9.]+ us" \
  $R/ncu-moe-down-2048.txt | cut -c1-150 | head -40
sed -n '/^## Where/,/^## /p' $R/mixtral-profile/zoo.md 2>/dev/null | head -40 | cut -c1-260; tail -3 $R/mixtral-profile.log | cut -c1-300
cd $OUT && tar czf res.tgz res && rm -rf res
