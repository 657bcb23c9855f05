"""Where zoo_compile's untracked CUDA-graph-pool tensors come from: generate() of the patched model compiled with
reduce-overhead, allocation history on; on the error, the full message and, per leaked data pointer, the live
tensors on it and who holds them (two levels of gc referrers)."""
import gc
import re
import sys
import traceback

import torch
import torch._inductor.config as c

c.triton.cudagraph_trees_history_recording = True
torch.cuda.memory._record_memory_history(max_entries=500000, stacks="python")
from evo.api import load_zoo  # noqa: E402
from evo.bench.generate import _generator, build_model, hf_config  # noqa: E402
from evo.zoo.hf_patch import patch_model  # noqa: E402

zoo, cfg, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
config, name = hf_config(cfg, layers)
model = build_model(config, "bf16", "cuda", 0)
ids = torch.randint(3, config.vocab_size, (1, 256), generator=torch.Generator().manual_seed(0)).cuda()
print(patch_model(model, load_zoo(zoo), quiet=True).line())
gen = _generator(model, ids, "zoo_compile", 8)


def describe(obj):
    if isinstance(obj, dict):
        return "dict keys=" + ",".join(map(str, list(obj)[:8]))
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} len={len(obj)}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


try:
    for _ in range(3):
        gen(9)
    print("zoo_compile: no error")
except RuntimeError as e:
    msg = str(e)
    print(msg[:12000])
    traceback.print_exc(limit=12)
    ptrs = {int(p) for p in re.findall(r"Data Pointer: (\d+)", msg)}
    gc.collect()
    snap = torch.cuda.memory._snapshot()
    for seg in snap["segments"]:
        addr = seg["address"]
        for blk in seg["blocks"]:
            if addr in ptrs:
                print(f"\n== block {addr} size {blk['size']} state {blk['state']}")
                for fr in (blk.get("frames") or [])[:25]:
                    print(f"   {fr.get('filename')}:{fr.get('line')} {fr.get('name')}")
            addr += blk["size"]
    found = {}
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and not isinstance(o, torch._subclasses.FakeTensor):
            try:
                p = o.untyped_storage().data_ptr()
            except Exception:
                continue
            if p in ptrs:
                found[id(o)] = o
    skip = {id(found), id(sys._getframe())}
    for t in list(found.values()):
        print(f"\n== leaked tensor {t.untyped_storage().data_ptr()}: shape {tuple(t.shape)} {t.dtype}")
        for r in gc.get_referrers(t):
            if id(r) in skip or r is found:
                continue
            if type(r).__name__ == "frame":
                print(f"   held by frame {r.f_code.co_filename}:{r.f_lineno} {r.f_code.co_name}")
                continue
            print("   held by", describe(r))
            for r2 in gc.get_referrers(r)[:6]:
                if type(r2).__name__ == "frame":
                    print(f"      held by frame {r2.f_code.co_filename}:{r2.f_lineno} {r2.f_code.co_name}")
                elif id(r2) not in skip:
                    print("      held by", describe(r2))
