#!/bin/bash
# Issue 46, one call on a machine of 4 GPUs (2 GPUs: call-2gpu.sh): how one search scales over 1, 2 and 4 GPUs, from
# main's last commit (reports/gpu/setup.sh: the checkout, or .gpu-head.tgz where carried). `python -m benchmarks.scaling` runs
# each workload once per GPU count, one run at a time, and writes scaling-<gpu>.json (GPU and counts named):
#   gemm: experiments/llm_gemm.yaml, its ten GEMMs in turn (surrogate on), GEMM_MIN minutes per run, shared evenly;
#   zoo:  llama-3.2-1b's whole zoo at one decode token after a 2048-token context (evo zoo --run: 7 operators,
#         9 problems), ZOO_WALL seconds per problem.
# WORK=gemm or WORK=zoo measures one workload alone, with longer runs (GEMM_MIN=2, ZOO_WALL=12 by default).
# Everything is stopped by BUDGET_S seconds after the start (a run still going is stopped as Ctrl-C stops one, later
# runs skipped, both said in the JSON); each run's stores (rows and clocks, no kernel texts) are kept in res/kept, from
# which `python -m benchmarks.scaling --analyse res/kept` writes the JSON again on any machine.
# Sizing (an estimate, not yet timed on GPUs): a run takes about 20-25 s to start (Ray, workers, first compiles) plus
# its problems' wall time plus 1-2 s per problem (hand-over, the 24-evaluation floor); both workloads on 1, 2 and 4 GPUs:
# 3 x (10 x 4.2 s + ~40 s) + 3 x (9 x 4 s + ~40 s) = about 470 s of the 550. The last run is the one a slow start cuts.
# The call, from the project root on this machine (the GPU side runs HEAD as committed):
#   run(command="bash reports/gpu/scaling/call.sh", kind="nvidia-h100-x4", timeout_s=600, carry=[".whl"])
# (with helpers editing the checkout: .gpu-head.tgz and evo_kernels.egg-info carried too, reports/gpu/PENDING.md)
# Results: res.tgz (res/scaling.log, res/scaling-<gpu>.json, res/kept/) and scaling-<gpu>.json beside it; commit the
# JSON as reports/gpu/scaling-<gpu>.json.
set -u
T0=$(date +%s)
. "$(dirname "$0")/../setup.sh" || exit 1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
WORK=${WORK:-both}; GPUS=${GPUS:-1 2 4}
case $WORK in
  both) GEMM_MIN=${GEMM_MIN:-0.7}; ZOO_WALL=${ZOO_WALL:-4};;
  gemm) GEMM_MIN=${GEMM_MIN:-2};;
  zoo) ZOO_WALL=${ZOO_WALL:-12};;
  *) echo "WORK=$WORK: expected both, gemm or zoo"; exit 2;;
esac
ARGS=()
[ "$WORK" != zoo ] && ARGS+=(--experiment experiments/llm_gemm.yaml --problems all --minutes $GEMM_MIN)
[ "$WORK" != gemm ] && ARGS+=(--zoo experiments/models/llama-3.2-1b.json --tokens 1 --context 2048 --zoo-wall-s $ZOO_WALL)
python3 -m benchmarks.scaling "${ARGS[@]}" --gpus $GPUS --deadline-s $(( ${BUDGET_S:-550} - ($(date +%s) - T0) )) \
  --keep $R/kept --out $R --code "$COMMIT" --tag "${TAG:-}" > $R/scaling.log 2>&1
echo "scaling exit $? at $(( $(date +%s) - T0 )) s"
tail -45 $R/scaling.log
cp $R/scaling-*.json $OUT/ 2>/dev/null
cd $OUT && tar czf res.tgz res && rm -rf res; ls -la $OUT
