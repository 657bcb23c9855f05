#!/bin/bash
# Call 1 on one GPU (issue 45 item 3; ~9 minutes): `evo zoo --dtype fp8` plans, searches and collects the kernels of
# Llama-3-8B with FP8 weights (every projection fp8_gemm+channel: e4m3 weights with a scale per output channel,
# activations quantized per token; norms, RoPE, attention and lm_head in bf16) at T = 1 and 2048 new tokens after a
# 4096-token context, then the layer bench (python -m evo.bench.zoo_layer; --weights fp8 from the zoo's roles) runs
# the FP8 layer four ways, on the per-call clock and under CUDA graphs: eager (torch._scaled_mm with row-wise scales,
# or dequantize + matmul where this torch cannot: the bench's first line says which), torch.compile
# (max-autotune-no-cudagraphs), the zoo's kernels patched in, and the zoo under torch.compile. Each T's tolerance is at
# least the FP8 layer's own error against the bf16 layer of its seed (fp8_quantization_error in zoo.json).
# ZOO_PCT % of LIMIT seconds go to the search, which SIGINT stops (what finished is kept; collect bundles it, and the
# bench runs torch's code for any role not searched, its line saying so), the rest to the bench, which writes zoo.json
# and zoo.md after every T (2048 first), then the zoo's report.html with the layer's results. Short searches (WALL s
# and EVALS evaluations a problem) are what a 10-minute call allows. TOKENS (the zoo's, default 1,2048) and LAYER_TOKENS
# (the layer bench's, default 2048,1) narrow a call to one T.
set -u
. "$(dirname "$0")/../setup.sh" || exit 1  # the wheels, the project, PYTHONPATH (once per machine call)
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s); LIMIT=${LIMIT:-555}; ZOO_PCT=${ZOO_PCT:-50}
python3 -c "import torch, triton;print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
M=llama-3-8b; Z=$M-fp8  # the FP8 zoo's name: the model's with -fp8 (runs/zoo/$Z/${Z}_kernels.py)
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
ZOO="experiments/models/$M.json --dtype fp8 --tokens ${TOKENS:-1,2048} --context 4096 --wall-s ${WALL:-5} --evaluations ${EVALS:-12} -o runs/zoo"
timeout -s INT $(( $(left) * ZOO_PCT / 100 )) python3 -m evo zoo $ZOO --run > $R/zoo.log 2>&1
echo "zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
python3 -m evo zoo $ZOO --collect >> $R/zoo.log 2>&1
mkdir -p $R/$Z && cp runs/zoo/$Z/${Z}_kernels.py $R/$Z/ 2>/dev/null
timeout $(( $(left) - 20 )) python3 -m evo.bench.zoo_layer runs/zoo/$Z/${Z}_kernels.py experiments/models/$M.json \
  --context 4096 --tokens ${LAYER_TOKENS:-2048,1} --out $R/$Z > $R/layer.log 2>&1
echo "layer exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
python3 -m evo zoo $ZOO --report --layer-results $R/$Z/zoo.json >> $R/zoo.log 2>&1 && cp runs/zoo/$Z/report.html $R/$Z/
cat $R/lanes.log
grep -E "^evo zoo layer bench: " $R/layer.log | cut -c1-700
sed -n '/^FP8 weights/p;/^| T | eager/,/^$/p' $R/$Z/zoo.md 2>/dev/null; grep -E "^- T=" $R/$Z/zoo.md 2>/dev/null | cut -c1-200
grep -A5 "^## The zoo's best" $R/$Z/zoo.md 2>/dev/null | tail -3; tail -2 $R/layer.log | cut -c1-300
grep -E "problems done|wrote|not served|Error" $R/zoo.log | tail -6 | cut -c1-240
cd $OUT && tar czf res.tgz res && rm -rf res
