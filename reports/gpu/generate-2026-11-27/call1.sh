#!/bin/bash
# Call 1 (one GPU): where zoo_compile's untracked pool tensors come from (pool_probe.py), then the generate bench of
# Llama-3.2-1B (16 layers) as main has it.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
Z=reports/zoo/llama-3.2-1b-nvidia-h200/llama-3.2-1b_kernels.py; M=experiments/models/llama-3.2-1b.json
timeout 200 python3 reports/gpu/generate-2026-11-27/pool_probe.py $Z $M 2 > $R/probe.log 2>&1; echo "probe exit $?"
#timeout 300 python3 -m evo.bench.generate $Z $M --reps 3 --out $R/generate-1b > $R/generate-1b.log 2>&1; echo "gen exit $?"
sed -n '/== block/,$p' $R/probe.log | head -150
grep -m3 "Detected\|no error" $R/probe.log
cd $OUT && tar czf res.tgz res && rm -rf res
