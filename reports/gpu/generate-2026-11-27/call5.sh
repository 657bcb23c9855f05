#!/bin/bash
# Call 5 on two GPUs, from main's last commit (.gpu-head.tgz): with cache_attention (the static cache's masked decode
# attention) in the zoo's plan, each model's zoo searched (T = 1 and 2048 after a 2048-token context, the prompt
# generate() gets), collected, then generate() four ways on the same GPU: Llama-3-8B on GPU 0, Llama-3.2-1B on GPU 1.
# Then GPU 1: the GPU tests after the GEMM renderings became real kernel files (issue 43), in the time left.
set -u
H0=$PWD; mkdir -p /tmp/h && tar xzf .gpu-head.tgz -C /tmp/h && cp -r evo_kernels.egg-info /tmp/h/ && cd /tmp/h
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H0/.whl/*.whl $H0/.whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R; nvidia-smi -L; nproc; T0=$(date +%s)
ZOO="--tokens 1,2048 --context 2048 --wall-s ${WALL:-8} -o runs/zoo"
lane() {  # lane GPU CORES MODEL
  local gpu=$1 cores=$2 m=$3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout -s INT ${ZOO_S:-300} python3 -m evo zoo experiments/models/$m.json \
    $ZOO --run > $R/zoo-$m.log 2>&1
  echo "GPU $gpu $m zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  CUDA_VISIBLE_DEVICES=$gpu python3 -m evo zoo experiments/models/$m.json $ZOO --collect >> $R/zoo-$m.log 2>&1
  mkdir -p $OUT/$m && cp runs/zoo/$m/${m}_kernels.py runs/zoo/$m/zoo.json $OUT/$m/ 2>/dev/null
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout $(( 585 - ($(date +%s) - T0) )) python3 -m evo.bench.generate \
    runs/zoo/$m/${m}_kernels.py experiments/models/$m.json --reps 3 --out $R/generate-$m > $R/generate-$m.log 2>&1
  echo "GPU $gpu $m generate exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
H=$(( $(nproc) / 2 ))
tests() {  # tests GPU CORES NAME FILE...
  local gpu=$1 cores=$2 name=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores python3 -m tests.gpu.run_all --budget-s $(( 580 - ($(date +%s) - T0) )) \
    --out $R/$name "$@" > $R/$name.log 2>&1
  echo "GPU $gpu $name exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
lane 0 0-$(( H - 1 )) llama-3-8b &
( lane 1 $H-$(( 2 * H - 1 )) llama-3.2-1b; tests 1 $H-$(( 2 * H - 1 )) gpu-gemm tests/gpu/test_gemm_sample.py \
  tests/gpu/test_gemm_epilogue_gpu.py tests/gpu/test_gemm_stream_k_gpu.py tests/gpu/test_decode_ops_gpu.py ) &
wait
cat $R/lanes.log
for m in llama-3-8b llama-3.2-1b; do echo "== $m"; grep -E "cache_attention.*(done|best)" $R/zoo-$m.log | tail -2 | cut -c1-200
  grep -E "^\| |^- " $R/generate-$m/generate.md 2>/dev/null | cut -c1-160; done
for t in gpu-gemm; do echo "== $t"; tail -12 $R/$t.log; done
cd $OUT && tar czf res.tgz res && rm -rf res
