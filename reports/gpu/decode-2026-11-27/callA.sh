#!/bin/bash
# Call A on one GPU: the new decode operators checked and timed (linear, its fused variants, rmsnorm+residual:
# tests/gpu/test_decode_ops_gpu.py), then the GPU tests touched by this session's changes (rope_cache, the decode
# loop, export/load, the bound launch, search and bench), a file at a time within a budget.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
nvidia-smi -L; python3 -c "import torch, triton;print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
export EVO_OUT=$OUT
timeout 330 python3 tests/gpu/test_decode_ops_gpu.py --budget-s 270 > $OUT/decode_ops.log 2>&1; echo "decode ops exit $?"
python3 -m tests.gpu.run_all --budget-s 230 --out $OUT/gpu-tests tests/gpu/test_rope_cache_gpu.py \
  tests/gpu/test_zoo_decode_gpu.py tests/gpu/test_user_surface_gpu.py tests/gpu/test_launch.py \
  tests/gpu/test_search_gpu.py tests/gpu/test_bench_gpu.py > $OUT/gpu_tests.log 2>&1; echo "gpu tests exit $?"
tail -40 $OUT/decode_ops.log; tail -15 $OUT/gpu_tests.log
cd $OUT && tar czf gpu-tests.tgz gpu-tests && rm -rf gpu-tests
