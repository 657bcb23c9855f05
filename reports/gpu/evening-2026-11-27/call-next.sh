#!/bin/bash
# NOT YET RUN (written 2026-11-27 evening, after the device time was spent): reports/gpu/PENDING.md's rows 1 and 2 in
# one call on a machine of 4 GPUs (carry [".whl"]), each GPU its own lane on 16 cores:
#   GPU 0: test_gemm_sample.py alone (every Triton and Gluon GEMM structure; call A's lane cut it at 254 s);
#   GPU 1: test_gemm_long_k_gpu.py (after b2f33c8's workspace fix), test_moe_gpu.py, test_gemma_ops_gpu.py;
#   GPU 2: test_zoo_layer_kinds_gpu.py (call A reached 9 of its 11 cases);
#   GPU 3: Mixtral-8x7B's zoo and its layer at T = 2048 and 1 (the near-tie rule's first GPU run, and the T = 1 row
#          call A's limit cut), zoo-moe-gemma-2026-11-27/call1.sh with MODELS=mixtral-8x7b.
#   run(command="bash reports/gpu/evening-2026-11-27/call-next.sh", kind="nvidia-h100-x4", carry=[".whl"])
# Results: res.tgz (lane logs, each with summary.json) and zoo/res.tgz; the tables are printed last.
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R $OUT/zoo; nvidia-smi -L
. "$(dirname "$0")/../lanes.sh"  # lane INDEX FILE..., N GPUs, C cores a lane
lane 0 tests/gpu/test_gemm_sample.py &
lane 1 tests/gpu/test_gemm_long_k_gpu.py tests/gpu/test_moe_gpu.py tests/gpu/test_gemma_ops_gpu.py &
lane 2 tests/gpu/test_zoo_layer_kinds_gpu.py &
( OUT=$OUT/zoo MODELS=mixtral-8x7b CUDA_VISIBLE_DEVICES=$(( 3 % N )) LIMIT=$(( ${BUDGET_S:-560} - 10 - ($(date +%s) - T0) )) \
    ZOO_PCT=35 taskset -c $(( 3 * C ))-$(( 4 * C - 1 )) bash reports/gpu/zoo-moe-gemma-2026-11-27/call1.sh > $R/zoo.log 2>&1
  echo "zoo lane exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log ) &
wait
cat $R/lanes.log
for i in 0 1 2; do echo "== lane $i"; tail -6 $R/lane$i.log; done
echo "== zoo"; tail -30 $R/zoo.log | cut -c1-400
cd $OUT && tar czf res.tgz res && rm -rf res
