#!/bin/bash
# Call B on a 4-GPU host: one model's zoo per GPU (evo zoo --run: every operator of the model in one run), each
# process pinned to 16 cores; then each model's kernel module collected. GPU 0 first runs the patched-layer GPU
# test (about two minutes) before its model, the smallest. A search cut by the time limit resumes on a later call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R
nvidia-smi -L; nproc; python3 -c "import torch;print(torch.cuda.get_device_name(), torch.cuda.device_count())"
T0=$(date +%s); LIMIT=${LIMIT:-545}
ZOO="--tokens 1,16,2048 --context 4096 --wall-s ${WALL:-8} -o runs/zoo"
lane() {  # lane GPU CORES MODEL [pre-command]
  local gpu=$1 cores=$2 m=$3
  if [ -n "${4:-}" ]; then CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout 200 $4 > $R/pretest-$m.log 2>&1; \
    echo "GPU $gpu pre-test exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log; fi
  local left=$(( LIMIT - ($(date +%s) - T0) ))
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout -s INT $left python3 -m evo zoo experiments/models/$m.json $ZOO --run \
    > $R/zoo-$m.log 2>&1
  echo "GPU $gpu $m zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  CUDA_VISIBLE_DEVICES=$gpu python3 -m evo zoo experiments/models/$m.json $ZOO --collect >> $R/zoo-$m.log 2>&1
  cp runs/zoo/$m/${m}_kernels.py $R/ 2>/dev/null
}
lane 0 0-15 llama-3.2-1b "python3 -m pytest -q -x tests/gpu/test_zoo_decode_roles_gpu.py" &
lane 1 16-31 llama-3-8b &
lane 2 32-47 qwen2-7b &
lane 3 48-63 mistral-7b &
wait
cat $R/lanes.log; tail -3 $R/pretest-*.log
for m in llama-3.2-1b llama-3-8b qwen2-7b mistral-7b; do echo "== $m"; grep -E "cut short|problems|evaluations" $R/zoo-$m.log | tail -4; done
tar czf $OUT/runs.tgz runs/zoo 2>/dev/null; ls -la $OUT $R
