#!/bin/bash
# Call 5b on the same two GPUs, right after 5a: generate() four ways (python -m evo.bench.generate) with the zoo modules
# call 5a searched (/tmp/h/runs/zoo, kept on the warm machine; else the copies 5a returned, under
# reports/zoo/<model>-nvidia-h200-generate2/): Llama-3-8B on GPU 0, Llama-3.2-1B on GPU 1.
set -u
H0=$PWD; cd /tmp/h 2>/dev/null || { mkdir -p /tmp/h && tar xzf $H0/.gpu-head.tgz -C /tmp/h && cp -r $H0/evo_kernels.egg-info /tmp/h/ && cd /tmp/h; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-hf $H0/.whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site-hf:$PWD PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s)
gen() {  # gen GPU CORES MODEL
  local z=runs/zoo/$3/$3_kernels.py
  [ -f $z ] || z=$H0/reports/zoo/$3-nvidia-h200-generate2/$3_kernels.py
  echo "GPU $1 $3: $z" >> $R/lanes.log
  CUDA_VISIBLE_DEVICES=$1 taskset -c $2 timeout $(( 560 - ($(date +%s) - T0) )) python3 -m evo.bench.generate \
    $z experiments/models/$3.json --reps 3 --out $R/generate-$3 > $R/generate-$3.log 2>&1
  echo "GPU $1 $3 generate exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
H=$(( $(nproc) / 2 ))
gen 0 0-$(( H - 1 )) llama-3-8b &
gen 1 $H-$(( 2 * H - 1 )) llama-3.2-1b &
wait
cat $R/lanes.log
for m in llama-3-8b llama-3.2-1b; do echo "== $m"; grep -E "^\| |^- " $R/generate-$m/generate.md | cut -c1-160; done
cd $OUT && tar czf res.tgz res && rm -rf res
