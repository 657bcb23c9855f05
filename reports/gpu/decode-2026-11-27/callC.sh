#!/bin/bash
# Call C on a 4-GPU host: each model's decoder layer four ways (python -m evo.bench.zoo_layer with the zoo module
# call B's search collected: T = 1, 16, 2048 after a 4096-token context, the 128-step decode loop, the HBM floor
# and the per-kernel profile), one model per GPU; then, where time is left, model.generate() tokens per second
# (python -m evo.bench.generate) for the 1B and the 8B model.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R
nvidia-smi -L; python3 -c "import torch, transformers;print(torch.cuda.get_device_name(), torch.cuda.device_count(), transformers.__version__)"
T0=$(date +%s); LIMIT=${LIMIT:-560}
lane() {  # lane GPU CORES MODEL [generate layers]
  local gpu=$1 cores=$2 m=$3 dir=reports/zoo/$3-nvidia-h200
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $(( LIMIT - 150 )) python3 -m evo.bench.zoo_layer \
    $dir/${m}_kernels.py experiments/models/$m.json --tokens 1,16,2048 --context 4096 --decode-steps 128 --profile \
    --out $R/$m > $R/layer-$m.log 2>&1
  echo "GPU $gpu $m layer exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  if [ -n "${4:-}" ]; then
    local left=$(( LIMIT - ($(date +%s) - T0) ))
    [ $left -lt 60 ] && { echo "GPU $gpu $m: no time for generate" >> $R/lanes.log; return; }
    CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $left python3 -m evo.bench.generate $dir/${m}_kernels.py \
      experiments/models/$m.json --layers $4 --out $R/$m-generate > $R/generate-$m.log 2>&1
    echo "GPU $gpu $m generate exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  fi
}
lane 0 0-15 llama-3.2-1b 16 &
lane 1 16-31 llama-3-8b 8 &
lane 2 32-47 qwen2-7b &
lane 3 48-63 mistral-7b &
wait
cat $R/lanes.log
for m in llama-3.2-1b llama-3-8b qwen2-7b mistral-7b; do echo "== $m"; tail -12 $R/layer-$m.log; tail -8 $R/generate-$m.log 2>/dev/null; done
cd $OUT && tar czf res.tgz res && rm -rf res
