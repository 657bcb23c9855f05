#!/bin/bash
# Call 1 on one GPU (issue 45 item 4; ~9 minutes): `evo zoo` plans, searches and collects the kernels of a MoE model
# (Mixtral-8x7B) and of Gemma-2-9B at T = 1 and 2048 new tokens after a 4096-token context, then the layer bench
# (python -m evo.bench.zoo_layer) runs each model's layer four ways, on the per-call clock and under CUDA graphs:
# eager, torch.compile (max-autotune-no-cudagraphs), the zoo's kernels patched in, and the zoo under torch.compile.
# Mixtral's torch layer runs its experts through torch._grouped_mm (--experts auto on a GPU: transformers 5's
# grouped_mm way, which torch compiles and captures); Gemma 2's layer is a sliding one (layer 0: its 4096-key
# window hides keys at 4096 + 2048), torch's attention there transformers' eager path (SDPA cannot cap). If time is
# left: Gemma's layer at T = 2048 with torch's attention as FlexAttention (the stronger torch way, compiled), then
# Mixtral's at T = 1 with transformers' eager expert loop (its compile and graph ways fail with their reason).
# Each model gets an equal share of LIMIT seconds: ZOO_PCT % of it for the search, which SIGINT stops (what finished
# is kept; collect bundles it, and the bench runs torch's code for any role not searched, its line saying so), the
# rest for the bench, which writes zoo.json and zoo.md after every T (2048 first). Short searches (WALL s and EVALS
# evaluations a problem) are what a 10-minute call allows; MODELS=mixtral-8x7b (then gemma-2-9b) in two calls with
# WALL=10 gives each model's zoo better kernels.
set -u
. "$(dirname "$0")/../setup.sh" || exit 1  # the wheels, the project, PYTHONPATH (once per machine call)
R=$OUT/res; mkdir -p $R; nvidia-smi -L; T0=$(date +%s); LIMIT=${LIMIT:-555}; ZOO_PCT=${ZOO_PCT:-50}
python3 -c "import torch, triton;print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
MODELS=${MODELS:-"mixtral-8x7b gemma-2-9b"}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
ZOO="--tokens 1,2048 --context 4096 --wall-s ${WALL:-5} --evaluations ${EVALS:-12} -o runs/zoo"
zoo() {  # zoo MODEL SECONDS: search (stopped by SIGINT at SECONDS), then collect what there is
  timeout -s INT $2 python3 -m evo zoo experiments/models/$1.json $ZOO --run > $R/zoo-$1.log 2>&1
  echo "$1 zoo exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
  python3 -m evo zoo experiments/models/$1.json $ZOO --collect >> $R/zoo-$1.log 2>&1
  mkdir -p $R/$1 && cp runs/zoo/$1/$1_kernels.py $R/$1/ 2>/dev/null
}
layer() {  # layer MODEL OUT SECONDS ARGS...: the layer bench
  local m=$1 out=$2 s=$3; shift 3
  timeout $s python3 -m evo.bench.zoo_layer runs/zoo/$m/${m}_kernels.py experiments/models/$m.json --context 4096 \
    --out $R/$out "$@" > $R/layer-$out.log 2>&1
  echo "$out layer exit $? at $(( $(date +%s) - T0 )) s" >> $R/lanes.log
}
n=$(echo $MODELS | wc -w)
for m in $MODELS; do
  end=$(( $(date +%s) + $(left) / n )); n=$(( n - 1 ))
  zoo $m $(( ($(left) / (n + 1)) * ZOO_PCT / 100 ))
  layer $m $m $(( end - $(date +%s) - 5 )) --tokens 2048,1
done
[ $(left) -gt 80 ] && case " $MODELS " in *" gemma-2-9b "*)
  layer gemma-2-9b gemma-2-9b-flex $(( $(left) - 5 )) --tokens 2048 --gemma-attention flex;; esac
[ $(left) -gt 70 ] && case " $MODELS " in *" mixtral-8x7b "*)
  layer mixtral-8x7b mixtral-8x7b-loop $(( $(left) - 5 )) --tokens 1 --experts loop;; esac
cat $R/lanes.log
for out in $MODELS gemma-2-9b-flex mixtral-8x7b-loop; do [ -f $R/layer-$out.log ] || continue; echo "== $out"
  grep -E "^evo zoo layer bench: " $R/layer-$out.log | cut -c1-600
  sed -n '/^| T | eager/,/^$/p' $R/$out/zoo.md 2>/dev/null; grep -E "^- T=" $R/$out/zoo.md 2>/dev/null | cut -c1-200
  grep -A5 "^## The zoo's best" $R/$out/zoo.md 2>/dev/null | tail -3; tail -2 $R/layer-$out.log | cut -c1-300; done
for m in $MODELS; do echo "== zoo $m"; grep -E "problems done|wrote|Error" $R/zoo-$m.log | tail -3 | cut -c1-240; done
cd $OUT && tar czf res.tgz res && rm -rf res
