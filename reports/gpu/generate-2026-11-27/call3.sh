#!/bin/bash
# Call 3 on two GPUs: generate() four ways (python -m evo.bench.generate), Llama-3.2-1B on GPU 0 and Llama-3-8B on
# GPU 1, with the zoo modules call 2 searched (put under reports/zoo/<model>-nvidia-h200-generate/).
set -u
# run from main's last commit (.gpu-head.tgz, git archive HEAD), not the shared working tree others are editing
H0=$PWD; mkdir -p /tmp/h && tar xzf .gpu-head.tgz -C /tmp/h && cp -r evo_kernels.egg-info /tmp/h/ && cd /tmp/h
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H0/.whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s)
gen() {  # gen GPU CORES MODEL
  CUDA_VISIBLE_DEVICES=$1 taskset -c $2 timeout $(( 540 - ($(date +%s) - T0) )) python3 -m evo.bench.generate \
    $H0/reports/zoo/$3-nvidia-h200-generate/$3_kernels.py experiments/models/$3.json --reps 3 --out $R/generate-$3 \
    > $R/generate-$3.log 2>&1
  echo "GPU $1 $3 generate exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
H=$(( $(nproc) / 2 ))
gen 0 0-$(( H - 1 )) llama-3.2-1b &
gen 1 $H-$(( 2 * H - 1 )) llama-3-8b &
wait
cat $R/lanes.log
for m in llama-3.2-1b llama-3-8b; do echo "== $m"; tail -9 $R/generate-$m.log | cut -c1-400; done
cd $OUT && tar czf res.tgz res && rm -rf res
