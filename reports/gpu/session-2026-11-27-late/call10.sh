#!/bin/bash
# Call 10 of the late session of 2026-11-27, on ONE GPU (carry [".whl"]): the MoE expert benches against a rival
# they did not have, torch.compile (max-autotune) of the grouped-GEMM way (operators/moe/baselines.py:
# grouped_mm_compile, what a compiled transformers model with grouped_mm experts runs; in Mixtral's layer at 2048
# tokens its Inductor templates ran the experts in 2,530 us against the zoo's 3,009: call 7). Mixtral's three
# token counts (1, 16, 2048) of the gate/up and the down projection (PROBLEMS, the YAMLs' positions: default 1 2 3),
# 12 s searches, beside eager grouped_mm.
#   run(command="bash reports/gpu/session-2026-11-27-late/call10.sh", carry=[".whl"])
set -u
T0=$(date +%s); LIMIT=${LIMIT:-570}
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
for x in moe_gate_up moe_down; do
  s=$(( $(left) - 15 )); [ $x = moe_gate_up ] && s=$(( s / 2 ))
  timeout $s python3 -m evo bench experiments/$x.yaml --problems ${PROBLEMS:-1 2 3} --gpus 1 --wall-s 12 \
    --contenders grouped_mm,grouped_mm_compile --out $R/$x --search-dir /tmp/runs/$x > $R/$x.log 2>&1
  echo "$x exit $? at $(( $(date +%s) - T0 )) s"
done
for x in moe_gate_up moe_down; do echo "== $x"; sed -n '/^| problem/,/^$/p' $R/$x/*.md 2>/dev/null | head -12 | cut -c1-300
  tail -2 $R/$x.log | cut -c1-300; done
cd $OUT && tar czf res.tgz res && rm -rf res
