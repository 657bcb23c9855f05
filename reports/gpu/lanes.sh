# Sourced by the GPU call scripts after setup.sh, with T0 (the call's start) and R (its results folder) set: one GPU and
# a quarter of the cores per lane (LANES=3: a third; on a one-GPU machine every lane shares GPU 0). `lane INDEX FILE...` runs those GPU test files on GPU INDEX (modulo the GPUs there
# are) under tests.gpu.run_all, within BUDGET_S seconds (default 560) of T0, its logs in R/laneINDEX, a line in
# R/lanes.log when it ends.
N=$(nvidia-smi -L | wc -l); C=$(( $(nproc) / ${LANES:-4} ))
lane() {
  local i=$1; shift
  CUDA_VISIBLE_DEVICES=$(( i % N )) EVO_OUT=$R/lane$i taskset -c $(( i * C ))-$(( i * C + C - 1 )) \
    python3 -m tests.gpu.run_all --budget-s $(( ${BUDGET_S:-560} - ($(date +%s) - T0) )) --out $R/lane$i "$@" \
    > $R/lane$i.log 2>&1
  echo "lane $i exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
