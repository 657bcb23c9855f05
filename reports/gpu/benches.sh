# Sourced by the GPU call scripts after setup.sh, with T0 (the call's start), LIMIT (its seconds) and R (its results
# folder) set: `bench NAME YAML PROBLEMS...` runs `evo bench experiments/YAML --problems PROBLEMS` with 12-second
# searches into R/bench/NAME, within what is left of LIMIT (not started with under 40 s left), a line when it ends.
bench() {
  local name=$1 yaml=$2; shift 2
  local left=$(( LIMIT - 15 - ($(date +%s) - T0) ))
  if [ $left -lt 40 ]; then echo "$name: not run (${left} s left)"; return; fi
  mkdir -p $R/bench
  timeout $left python3 -m evo bench experiments/$yaml --problems "$@" --wall-s 12 --out $R/bench/$name \
    --search-dir /tmp/runs/$name > $R/bench/$name.log 2>&1
  echo "$name exit $? at $(( $(date +%s) - T0 )) s"
}
