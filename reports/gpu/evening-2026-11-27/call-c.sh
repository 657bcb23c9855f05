#!/bin/bash
# Call C of the evening of 2026-11-27, one call on a machine of 4 GPUs (carry [".whl"]), issue 45's measurements side
# by side, each GPU its own lane on 16 cores, all stopped by LIMIT seconds after the start (default 420):
#   GPU 0: Llama-3-8B's FP8 zoo and its layer bench four ways (zoo-fp8-2026-11-27/call1.sh);
#   GPU 1: evo bench experiments/fp8_gemm_channel.yaml (the eight Llama-3-8B FP8 GEMMs against torch._scaled_mm);
#   GPU 2: evo bench experiments/moe_gate_up.yaml, then moe_down.yaml (Mixtral and Qwen-MoE experts, 1-2048 tokens);
#   GPU 3: evo bench experiments/gemma2_gemm_geglu.yaml (against torch.compile).
# Each bench searches WALL seconds a problem (default 15; the YAMLs' own budgets are what a longer call allows).
# Results: res.tgz (bench JSON/markdown and logs) and zoo/res.tgz; the tables are printed last.
set -u
T0=$(date +%s); LIMIT=${LIMIT:-420}; WALL=${WALL:-15}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R $OUT/zoo; nvidia-smi -L
N=$(nvidia-smi -L | wc -l); C=$(( $(nproc) / 4 ))
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
bench() {  # bench GPU EXPERIMENT...: one evo bench per experiment on that GPU, in turn, within what is left
  local g=$1; shift
  for x in "$@"; do
    local s=$(( $(left) - 10 )); [ $s -lt 60 ] && { echo "GPU $g: no time for $x" >> $R/lanes.log; continue; }
    CUDA_VISIBLE_DEVICES=$(( g % N )) taskset -c $(( g * C ))-$(( g * C + C - 1 )) timeout $s \
      python3 -m evo bench experiments/$x.yaml --gpus 1 --wall-s $WALL --out $R/$x --search-dir runs/$x \
      > $R/$x.log 2>&1
    echo "GPU $g: $x exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  done
}
( OUT=$OUT/zoo CUDA_VISIBLE_DEVICES=0 LIMIT=$(( $(left) - 10 )) taskset -c 0-$(( C - 1 )) \
    bash reports/gpu/zoo-fp8-2026-11-27/call1.sh > $R/zoo-fp8.log 2>&1
  echo "fp8 zoo lane exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log ) &
bench 1 fp8_gemm_channel &
bench 2 moe_gate_up moe_down &
bench 3 gemma2_gemm_geglu &
wait
cat $R/lanes.log
for x in fp8_gemm_channel moe_gate_up moe_down gemma2_gemm_geglu; do echo "== $x"
  sed -n '/^| problem/,/^$/p' $R/$x/*.md 2>/dev/null | head -12 | cut -c1-300; tail -3 $R/$x.log | cut -c1-300; done
echo "== fp8 zoo"; tail -25 $R/zoo-fp8.log | cut -c1-400
cd $OUT && tar czf res.tgz res && rm -rf res
