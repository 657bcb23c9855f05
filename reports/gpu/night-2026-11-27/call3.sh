#!/bin/bash
# ONE GPU, carry [".whl-hf"] (transformers 5.24 and its needs; the GPU image has 5.17, the project needs >= 5.24, and
# the Ray wheels do not fit beside it): the files call 2 failed or that changed after it, none of which needs Ray.
#   first, alone: test_clocks_gpu.py (call 2's failure was a timing assertion with two other lanes on the GPU);
#   then lane 0: test_gemm_sample.py (after the ws_b_tile rule); lane 1: test_zoo_decode_roles_gpu.py (cache_attention
#   is a decode role now), test_generate_compile_gpu.py (with transformers 5.24).
#   run(command="bash reports/gpu/night-2026-11-27/call3.sh", carry=[".whl-hf"])
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-hf/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip install -e . failed"
python3 -c "import transformers; print('transformers', transformers.__version__)"
R=$OUT/res; mkdir -p $R; nvidia-smi -L
python3 -m tests.gpu.run_all --budget-s 60 --out $R/alone tests/gpu/test_clocks_gpu.py > $R/alone.log 2>&1
LANES=2 . "$(dirname "$0")/../lanes.sh"
lane 0 tests/gpu/test_gemm_sample.py &
lane 1 tests/gpu/test_zoo_decode_roles_gpu.py tests/gpu/test_generate_compile_gpu.py &
wait
cat $R/lanes.log
for f in $R/alone.log $R/lane0.log $R/lane1.log; do echo "== $f"; grep -E "^test_\S+\s+(passed|failed|timeout|error|skipped|not run)" $f; done
grep -A8 "^GEMM genome sample" $R/lane0/test_gemm_sample.log
cd $OUT && tar czf res.tgz res && rm -rf res
