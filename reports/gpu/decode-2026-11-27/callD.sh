#!/bin/bash
# Call D on a 2-GPU host (no 4-GPU kind was lent by then), after the routing fix (a role runs the layer's own torch code at the token counts where
# the zoo module runs its baseline) and the first-call fix (an op's first call of a new signature allocates its
# plan outside a CUDA-graph pool): the layer benches again (same modules as call C), generate() four ways, the GPU
# tests of both fixes, and the decode operators' check and timing after linear's plan change.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R
nvidia-smi -L; python3 -c "import torch, transformers;print(torch.cuda.get_device_name(), torch.cuda.device_count(), transformers.__version__)"
T0=$(date +%s); LIMIT=${LIMIT:-555}
layer() {  # layer GPU CORES MODEL
  CUDA_VISIBLE_DEVICES=$1 taskset -c $2 timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m evo.bench.zoo_layer \
    reports/zoo/$3-nvidia-h200/$3_kernels.py experiments/models/$3.json --tokens 1,16,2048 --context 4096 \
    --decode-steps 128 --profile --out $R/$3 > $R/layer-$3.log 2>&1
  echo "GPU $1 $3 layer exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
generate() {  # generate GPU CORES MODEL LAYERS
  CUDA_VISIBLE_DEVICES=$1 taskset -c $2 timeout $(( LIMIT - ($(date +%s) - T0) )) python3 -m evo.bench.generate \
    reports/zoo/$3-nvidia-h200/$3_kernels.py experiments/models/$3.json --layers $4 --out $R/$3-generate \
    > $R/generate-$3.log 2>&1
  echo "GPU $1 $3 generate exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
( CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 timeout 200 python3 -m pytest -q -x -p no:randomly \
    tests/gpu/test_generate_compile_gpu.py tests/gpu/test_zoo_decode_roles_gpu.py > $R/gpu-tests.log 2>&1
  echo "GPU 0 tests exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  generate 0 0-15 llama-3.2-1b 16; generate 0 0-15 llama-3-8b 8 ) &
( layer 1 16-31 qwen2-7b; layer 1 16-31 llama-3-8b ) &
wait
cat $R/lanes.log; tail -4 $R/gpu-tests.log; tail -14 $R/decode-ops.log
for m in llama-3.2-1b llama-3-8b qwen2-7b mistral-7b; do echo "== $m"; grep -E "^\| (1|16|2048) \|.*x (met|not met)" $R/$m/zoo.md | cut -d'|' -f2,7-12; grep "best way under graphs" $R/$m/zoo.md; grep -E "torch's code" $R/layer-$m.log | head -2; grep -E "^- (decode|prefill)|^\| (eager|compile|zoo_eager|zoo_compile) \|" $R/$m-generate/generate.md 2>/dev/null; done
cd $OUT && tar czf res.tgz res && rm -rf res
