#!/bin/bash
# Call 2 on two GPUs: the zoo of Llama-3.2-1B (GPU 0) and Llama-3-8B (GPU 1) searched again on main (the committed
# modules pasted the linear plan from before 1efd746, whose closure kept an activation: the 3 untracked tensors of
# generate()'s zoo_compile way, call 1), then collected; the modules come back for call 3 (generate()).
set -u
# run from main's last commit (.gpu-head.tgz, git archive HEAD), not the shared working tree others are editing
H0=$PWD; mkdir -p /tmp/h && tar xzf .gpu-head.tgz -C /tmp/h && cp -r evo_kernels.egg-info /tmp/h/ && cd /tmp/h
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H0/.whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R; nvidia-smi -L; nproc
T0=$(date +%s); LIMIT=${LIMIT:-480}
ZOO="--tokens 1,16,2048 --context 4096 --wall-s ${WALL:-8} -o runs/zoo"
lane() {  # lane GPU CORES MODEL
  local gpu=$1 cores=$2 m=$3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout -s INT $(( LIMIT - ($(date +%s) - T0) )) python3 -m evo zoo \
    experiments/models/$m.json $ZOO --run > $R/zoo-$m.log 2>&1
  echo "GPU $gpu $m zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  CUDA_VISIBLE_DEVICES=$gpu python3 -m evo zoo experiments/models/$m.json $ZOO --collect >> $R/zoo-$m.log 2>&1
  cp runs/zoo/$m/${m}_kernels.py runs/zoo/$m/zoo.md runs/zoo/$m/zoo.json $R/ 2>/dev/null
  mkdir -p $OUT/$m && cp runs/zoo/$m/${m}_kernels.py runs/zoo/$m/zoo.md runs/zoo/$m/zoo.json $OUT/$m/ 2>/dev/null
}
H=$(( $(nproc) / 2 ))
lane 0 0-$(( H - 1 )) llama-3.2-1b &
lane 1 $H-$(( 2 * H - 1 )) llama-3-8b &
wait
cat $R/lanes.log
for m in llama-3.2-1b llama-3-8b; do echo "== $m"; grep -E "cut short|problems|evaluations|USES|wrote" $R/zoo-$m.log | tail -5; done
cd $OUT && tar czf res.tgz res && rm -rf res
