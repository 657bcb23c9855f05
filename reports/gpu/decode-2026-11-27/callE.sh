#!/bin/bash
# Call E on one GPU, after the first-call thread binds its CUDA context: Llama-3-8B's layer again (T = 2048's
# zoo_compile had failed there), generate() of the 1B model with CUDA-graph-tree allocation history (where the
# untracked tensors of zoo_compile come from), then Mistral-7B's layer.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-hf/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip -e failed: using the carried egg-info"
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s)
layer() { timeout $(( 560 - ($(date +%s) - T0) )) python3 -m evo.bench.zoo_layer reports/zoo/$1-nvidia-h200/$1_kernels.py \
  experiments/models/$1.json --tokens 1,16,2048 --context 4096 --decode-steps 128 --profile --out $R/$1 > $R/layer-$1.log 2>&1
  echo "$1 layer exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log; }
layer llama-3-8b
timeout 150 python3 -c "
import runpy, sys, torch._inductor.config as c
c.triton.cudagraph_trees_history_recording = True
sys.argv = ['generate', 'reports/zoo/llama-3.2-1b-nvidia-h200/llama-3.2-1b_kernels.py', 'experiments/models/llama-3.2-1b.json',
            '--layers', '4', '--reps', '1', '--new-tokens', '16', '--out', '$R/generate-1b-history']
runpy.run_module('evo.bench.generate', run_name='__main__')" > $R/generate-history.log 2>&1
echo "generate history exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
layer mistral-7b
cat $R/lanes.log; grep -E "^\| (1|16|2048) \|.*x (met|not met)" $R/*/zoo.md | cut -d'|' -f1,2,7-12
grep -o "Detected.\{0,3000\}" $R/generate-1b-history/generate.json | head -c 3000
cd $OUT && tar czf res.tgz res && rm -rf res
