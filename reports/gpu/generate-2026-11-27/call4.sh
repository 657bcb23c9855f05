#!/bin/bash
# Call 4 (one GPU): decode_profile.py on Llama-3-8B: where a compiled generate() decode step's time goes.
set -u
H0=$PWD; mkdir -p /tmp/h && tar xzf .gpu-head.tgz -C /tmp/h && cp -r evo_kernels.egg-info /tmp/h/ && cd /tmp/h
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $H0/.whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=$OUT/res; mkdir -p $R; nvidia-smi -L
timeout 400 python3 $H0/reports/gpu/generate-2026-11-27/decode_profile.py \
  $H0/reports/zoo/llama-3-8b-nvidia-h200-generate/llama-3-8b_kernels.py experiments/models/llama-3-8b.json $R \
  > $R/profile.log 2>&1; echo "profile exit $?"
grep -E "^====|^\| " $R/profile.log; grep -B2 -A24 "==== zoo_compile" $R/profile.log | head -30
cd $R && gzip -f trace-*.json; cd $OUT && tar czf res.tgz res && rm -rf res
