# ---- evo launch runtime (imports only torch and triton; evo copies it into every rendered module) ----------
# A kernel is only as fast as its caller gets it. Triton's `kernel[grid](...)` binds the arguments, builds a
# specialisation key and looks up its cache on every call, and a host tensor descriptor made per call is encoded
# again per call: 18-20 us of host time before the GPU sees anything. `BoundKernel` pays that once per argument
# signature: its first call goes through the JIT (which compiles or loads the kernel), later calls hand the same
# positional arguments straight to the compiled kernel's own C launcher, on the current torch stream, with
# tensor descriptors encoded once per base address and global scratch allocated once. Where this Triton's
# compiled kernel does not expose those pieces (another version, the CPU interpreter, a profiler's launch hooks)
# every call goes through the JIT: slower, never wrong.

import torch
import triton

_DESCRIPTORS_KEPT = 8  # encoded descriptors kept per argument position (base addresses recur in a loop)


def _launch_pieces(compiled):
    """(raw C launcher, scratch bytes per program, scratch alignment, CTAs per program, cooperative, PDL) of a
    compiled kernel, or None where this Triton does not expose them."""
    import types

    from triton import knobs

    runner = getattr(compiled, "run", None)
    launch = getattr(runner, "launch", None)
    hook = knobs.runtime.launch_enter_hook  # None, or (3.6) a chain of hooks that profilers add to
    if launch is None or getattr(runner, "profile_scratch_size", 0) or (hook is not None and getattr(hook, "calls", 1)):
        return None  # a profiler's hooks see every launch only through the JIT (hooks added later are not seen)
    if isinstance(launch, types.FunctionType):  # Triton wrapped it to expand tensor descriptors: take what it wraps
        inner = [c.cell_contents for c in launch.__closure__ or () if type(c.cell_contents).__name__ ==
                 "builtin_function_or_method"]
        if len(inner) != 1:
            return None
        launch = inner[0]
    return (launch, runner.global_scratch_size, runner.global_scratch_align, getattr(runner, "num_ctas", 1),
            runner.launch_cooperative_grid, runner.launch_pdl)


class BoundKernel:
    """One @triton.jit kernel with its launch options, grid and argument signature fixed: `self(*args)` launches it
    with the kernel's parameters in order (constexprs included). `descriptors` maps a parameter's position to the
    (shape, strides, block) of a host tensor descriptor over the tensor passed there, or (shape, strides, block,
    shared layout) of a Gluon kernel's. The caller keeps one per signature (shapes, dtypes, strides, 16-byte
    alignment of each pointer: what Triton specialises on)."""

    jit_only = False  # True: every call through Triton's JIT (to compare the two paths)

    def __init__(self, kernel, grid, options, descriptors=None, scratch=False):
        self.kernel, self.options = kernel, dict(options)
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.descriptors = sorted((descriptors or {}).items(), reverse=True)  # spliced from the last position
        self.scratch = scratch  # the kernel makes tensor descriptors in device memory (Triton's allocator)
        self.device = None  # the CUDA device index once bound
        self._tried = False  # whether the first call tried to bind (a kernel that could not be: the JIT every call)
        self._raw = None  # (launch, fixed head after the stream) once bound
        self._encode = None  # host descriptors: (position, (shape, strides, block), metadata, cache) once bound

    def _jit(self, args):
        """A launch through Triton's JIT: returns the compiled kernel (None under the interpreter)."""
        if self.descriptors:
            args = list(args)
            for pos, spec in self.descriptors:
                args[pos] = _host_descriptor(args[pos], spec)
        if self.scratch:
            triton.set_allocator(_scratch_allocator)
        return self.kernel[self.grid](*args, **self.options)

    def _bind(self, compiled, args):
        bindable = compiled is not None and hasattr(compiled, "packed_metadata") and not self.jit_only
        pieces = _launch_pieces(compiled) if bindable else None
        if pieces is None:
            return
        launch, scratch_size, scratch_align, ctas, coop, pdl = pieces
        tensor = next(a for a in args if isinstance(a, torch.Tensor))
        self.device = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
        scratch = None
        if scratch_size:  # once per binding, not per call (Triton's launcher asks its allocator every call)
            programs = self.grid[0] * self.grid[1] * self.grid[2] * ctas
            scratch = _scratch_allocator(programs * scratch_size, scratch_align, None)
        if self.descriptors:
            from triton.backends.nvidia.driver import make_tensordesc_arg

            metas = getattr(compiled.metadata, "tensordesc_meta", None) or [None] * len(self.descriptors)
            ordered = sorted(pos for pos, _ in self.descriptors)
            meta_of = {pos: metas[i] for i, pos in enumerate(ordered)}
            self._encode = [(pos, spec, meta_of[pos], {}) for pos, spec in self.descriptors]
            self._make_desc = make_tensordesc_arg  # imported once, not per call
        # the head holds the scratch buffer: it lives as long as the binding
        head = (compiled.function, coop, pdl, scratch, None, compiled.packed_metadata, None, None, None)
        self._raw = (launch, head)

    @property
    def bound(self):
        """Whether calls skip the JIT (after the first)."""
        return self._raw is not None

    def _expanded(self, args):
        args = list(args)
        for pos, spec, meta, cache in self._encode:
            t = args[pos]
            ptr = t.data_ptr()
            flat = cache.get(ptr)
            if flat is None:
                if len(cache) >= _DESCRIPTORS_KEPT:
                    cache.clear()
                desc = _host_descriptor(t, spec)
                flat = cache[ptr] = tuple(self._make_desc(desc, meta))
            args[pos:pos + 1] = flat
        return args

    def __call__(self, *args):
        raw = self._raw
        if raw is None:  # the first call, or a kernel that could not be bound: through the JIT
            compiled = self._jit(args)
            if not self._tried:
                self._tried = True
                self._bind(compiled, args)
            return None
        launch, head = raw
        if self._encode is not None:
            args = self._expanded(args)
        g = self.grid
        launch(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(self.device), *head, *args)
        return None


def _host_descriptor(t, spec):
    """A host tensor descriptor over tensor `t`: spec (shape, strides, block) for a tl kernel, or (shape, strides,
    block, layout) for a Gluon kernel, whose descriptors carry their shared-memory layout."""
    shape, strides, block, *layout = spec
    if layout:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

        return GluonDescriptor(t, list(shape), list(strides), list(block), layout[0])
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, list(shape), list(strides), list(block))


def _scratch_allocator(size, alignment, stream):
    # in-kernel tensor descriptors live in global scratch memory that Triton asks its allocator for
    return torch.empty(size, dtype=torch.int8, device="cuda")


class PlanCache(dict):
    """Plans keyed by argument signature; cleared when it grows past `limit` (shapes that change every call)."""

    def __init__(self, limit=256):
        super().__init__()
        self.limit = limit

    def add(self, key, plan):
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan
        return plan


def programs_per_sm(n_regs, shared, num_warps, props):
    """Programs of one kernel that are resident on one SM at once, by CUDA's occupancy rules: threads, registers
    (allocated per warp in units of 256; 255 per thread when unknown), shared memory (1 KiB more per program is
    reserved by the driver) and the hardware's programs per SM (32 on sm_80/sm_90/sm_100, else 16, the lowest of
    recent GPUs). `props` is torch.cuda.get_device_properties(...) or a stand-in with the same fields."""
    threads = 32 * num_warps
    by_threads = props.max_threads_per_multi_processor // threads
    warp_regs = -(-(n_regs or 255) * 32 // 256) * 256
    by_regs = getattr(props, "regs_per_multiprocessor", 65536) // warp_regs // num_warps
    by_smem = getattr(props, "shared_memory_per_multiprocessor", 233472) // (shared + 1024)
    by_hardware = 32 if (props.major, props.minor) in ((8, 0), (9, 0), (10, 0)) else 16
    return max(0, min(by_threads, by_regs, by_smem, by_hardware))


def resident_programs(kernel, args, options, device):
    """How many programs of `kernel` fit on the GPU at once when compiled for `args` (its parameters in order,
    constexprs included) with launch `options`: programs per SM times SMs. Compiles the kernel (or finds it in
    Triton's cache) without launching it; the first launch then finds it compiled."""
    compiled = kernel.warmup(*args, grid=(1,), **options)
    compiled._init_handles()  # loads it: registers are known only then
    props = torch.cuda.get_device_properties(device)
    per_sm = programs_per_sm(compiled.n_regs, compiled.metadata.shared, compiled.metadata.num_warps, props)
    return per_sm * props.multi_processor_count


def cooperative_groups(fits, split, n_rows):
    """Program groups of a cooperative split launch: each group is `split` programs working on one row at a time, and
    every program of the grid must be resident at once (`fits` of them can be), so at most fits // split groups,
    and no more groups than rows. Refuses (ValueError) a GPU on which one group does not fit."""
    if fits < split:
        raise ValueError(f"a cooperative split of {split} programs per row needs them all resident at once; "
                         f"{fits} fit on this GPU")
    return max(1, min(fits // split, n_rows))


def signature(t):
    """What a launch plan depends on for one tensor argument (Triton specialises pointers on 16-byte alignment);
    None for anything else (the plan refuses it). get_device() is the cheapest device key (-1 on the CPU)."""
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() % 16) if isinstance(t, torch.Tensor) else None

# ---- end of the evo launch runtime -----------------------------------------------------------------------------
