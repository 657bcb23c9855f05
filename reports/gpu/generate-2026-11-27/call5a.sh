#!/bin/bash
# Call 5a on two GPUs, from main's last commit (.gpu-head.tgz): with cache_attention (the static cache's masked decode
# attention) in the zoo's plan, each model's zoo searched (T = 1 and 2048 after a 2048-token context, the prompt
# generate() gets) and collected: Llama-3-8B on GPU 0, Llama-3.2-1B on GPU 1; then, in the time left, the GPU tests
# after the GEMM renderings became real kernel files (issue 43). Call 5b runs generate() with these modules.
set -u
H0=$PWD; mkdir -p /tmp/h && tar xzf .gpu-head.tgz -C /tmp/h && cp -r evo_kernels.egg-info /tmp/h/ && cd /tmp/h
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H0/.whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R; nvidia-smi -L; nproc; T0=$(date +%s)
ZOO="--tokens 1,2048 --context 2048 --wall-s ${WALL:-8} -o runs/zoo"
lane() {  # lane GPU CORES MODEL
  local gpu=$1 cores=$2 m=$3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores timeout -s INT ${ZOO_S:-330} python3 -m evo zoo experiments/models/$m.json \
    $ZOO --run > $R/zoo-$m.log 2>&1
  echo "GPU $gpu $m zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  CUDA_VISIBLE_DEVICES=$gpu python3 -m evo zoo experiments/models/$m.json $ZOO --collect >> $R/zoo-$m.log 2>&1
  mkdir -p $OUT/$m && cp runs/zoo/$m/${m}_kernels.py runs/zoo/$m/zoo.json $OUT/$m/ 2>/dev/null
}
tests() {  # tests GPU CORES NAME FILE...
  local gpu=$1 cores=$2 name=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu taskset -c $cores python3 -m tests.gpu.run_all --budget-s $(( 560 - ($(date +%s) - T0) )) \
    --out $R/$name "$@" > $R/$name.log 2>&1
  echo "GPU $gpu $name exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
H=$(( $(nproc) / 2 ))
( lane 0 0-$(( H - 1 )) llama-3-8b; tests 0 0-$(( H - 1 )) gpu-decode tests/gpu/test_decode_ops_gpu.py \
  tests/gpu/test_moe_gpu.py ) &
( lane 1 $H-$(( 2 * H - 1 )) llama-3.2-1b; tests 1 $H-$(( 2 * H - 1 )) gpu-gemm tests/gpu/test_gemm_sample.py \
  tests/gpu/test_gemm_epilogue_gpu.py tests/gpu/test_gemm_stream_k_gpu.py ) &
wait
cat $R/lanes.log
for m in llama-3-8b llama-3.2-1b; do echo "== $m"; grep -E "cache_attention" $R/zoo-$m.log | grep -E "done|best" | tail -2 | cut -c1-200
  grep -E "problems done|wrote" $R/zoo-$m.log | tail -2 | cut -c1-200; done
for t in gpu-gemm gpu-decode; do echo "== $t"; tail -8 $R/$t.log; done
cd $OUT && tar czf res.tgz res && rm -rf res
