"""`evo zoo MODEL --collect`: one module holding a model's kernels, after its experiments have run.

Each operator's run (`<DIR>/<model>/<model>_<operator>`) is exported as `evo export --all` exports it (every
measured problem's elite behind a dispatcher that picks the measured shape, else the nearest one with one
warning), and the exports are bundled into `<DIR>/<model>/<model>_kernels.py`: standalone (torch, triton and
the standard library), importing it does no work, `op(role)` returns the entry function of a layer role
(`qkv`, `o_proj`, `gate_up`, `down`, ...), whose choice of elite follows the runtime token count through the
shapes of the inputs it is called with. `evo.api.load_zoo` wraps each role as a torch op.

Never slower than what it replaces: per role and token count, the module runs evo's elite only where it beat its
baseline side by side (evo.surface.kernel_choice); elsewhere torch's own op. The header lists each role and token
count with what runs it and why (the ratio).
"""

from __future__ import annotations

from pathlib import Path

from evo.experiment.rundir import RunDir
from evo.store.atomic_file import write_atomic
from evo.store.sqlite import Store
from evo.surface.export import IMPORT_SOURCE, NO_GPU_PREAMBLE, ExportError, export_all, is_smoke
from evo.surface.kernel_choice import KernelChoice, export_choices
from evo.zoo.model import ModelSpec
from evo.zoo.problems import layer_problems, run_name

__all__ = ["collect", "module_path", "CollectError"]


class CollectError(ValueError):
    """Nothing could be collected; one line saying why."""


def module_path(folder: Path, spec: ModelSpec) -> Path:
    return folder / f"{spec.name}_kernels.py"


def collect(spec: ModelSpec, tokens: list[int], dtype: str, folder: Path, context: int = 0, weights: str = "bf16"
            ) -> tuple[Path, dict[str, str], list[str]]:
    """Bundle the runs under `folder` into the model's module; returns (its path, role -> operator of the roles it
    serves, the operators left out with why). `weights` "fp8": the plan of FP8 weights (evo.zoo.fp8_problems).
    Raises CollectError when no operator has a correct kernel."""
    problems = [p for p in layer_problems(spec, tokens, dtype, context, weights=weights) if p.operator is not None]
    roles = {p.role: p.operator for p in problems}
    sources: dict[str, str] = {}
    choices: dict[str, KernelChoice] = {}  # problem key -> what the module runs for it
    missing: list[str] = []
    for operator in dict.fromkeys(roles.values()):
        rd = RunDir(folder / run_name(spec, operator))
        if not rd.exists():
            missing.append(f"{operator} (no run at {rd.path})")
            continue
        try:
            with Store(rd.store, readonly=True) as store:
                sources[operator], found = export_all(store)
                meta = store.all_meta()
                choices.update(export_choices(found, any(is_smoke(e.evaluation, meta) for e in found)))
        except ExportError as e:
            missing.append(f"{operator} ({e})")
    if not sources:
        raise CollectError(f"no run under {folder} has a correct kernel yet: {'; '.join(missing)}")
    served = {role: op for role, op in roles.items() if op in sources}
    path = module_path(folder, spec)
    uses = [_use_line(p, choices) for p in problems if p.operator in sources]
    write_atomic(path, _module_text(spec, served, sources, missing, uses))
    return path, served, missing


def _use_line(p: object, choices: dict[str, KernelChoice]) -> str:
    """`role T=t (operator shape): evo|baseline, why` for one kernel problem (evo.zoo.problems.KernelProblem)."""
    import operators

    key = operators.get(p.operator).problem(p.sizes, p.dtype).key  # type: ignore[attr-defined]
    c = choices.get(key)
    what = f"{c.use}: {c.why}" if c else "no correct kernel measured: the nearest measured shape's choice serves it"
    return f"  {p.role} T={p.tokens} ({p.operator} {p.shape_text}): {what}"  # type: ignore[attr-defined]


# The start of a zoo module's first line ('"""' before it), by which evo.api.load_zoo knows one before running it
ZOO_HEADER = "evo kernel zoo:"


def _module_text(spec: ModelSpec, roles: dict[str, str], sources: dict[str, str], missing: list[str],
                 uses: list[str]) -> str:
    head = [f"{ZOO_HEADER} {spec.name} (hidden {spec.hidden_size}, intermediate {spec.intermediate_size}, "
            f"{spec.mlp}; vocab {spec.vocab_size}).", "",
            "op(role) is the entry function of a layer role; it runs the elite measured for the shape of its inputs",
            "(the runtime token count), else the nearest measured one (with one warning). Roles and operators:"]
    head += [f"  {role}: {op}" for role, op in roles.items()]
    head += ["What runs each role and token count: evo's elite only where it beat its baseline side by side (timed in",
             "the same process, on the run's objective clock), else the baseline (torch's own op), and why:"] + uses
    if missing:
        head += ["Not served (their roles keep PyTorch):"] + [f"  {m}" for m in missing]
    head += ["Each operator's module is `evo export --all` of its run, with its own header and self-check;",
             "`python THIS_FILE.py` self-checks them all. evo.api.load_zoo(THIS_FILE) gives the roles as torch ops;",
             "runs_evo(role, sizes, dtype) says whether evo's elite or its baseline serves a measured problem."]
    lines = ['"""' + "\n".join(head) + '\n"""', "", NO_GPU_PREAMBLE,  # (imports os as _evo_os)
             f"ZOO_MODEL = {spec.name!r}", f"ROLES = {roles!r}  # role -> operator",
             "_ZOO_LOADED = {}", "# each operator's `evo export --all` module, one source line per item",
             "_ZOO_SOURCES = {"]
    for operator, text in sources.items():
        lines.append(f"    {operator!r}: [")
        lines += [f"        {line!r}," for line in text.split("\n")]
        lines.append("    ],")
    lines.append("}")
    return "\n".join(lines) + IMPORT_SOURCE + _TAIL


_TAIL = '''


def module(operator):
    """The `evo export --all` module of `operator`, imported once."""
    if operator not in _ZOO_LOADED:
        _ZOO_LOADED[operator] = _evo_import("\\n".join(_ZOO_SOURCES[operator]), "evo_zoo")
    return _ZOO_LOADED[operator]


def runs_evo(role, sizes, dtype):
    """True where evo's elite serves `role` at the measured problem `sizes` (e.g. (16, 4608, 3584)) in `dtype`
    ("bf16"), False where its baseline does (USES of the role's operator), None for a problem not measured."""
    if role not in ROLES:
        raise KeyError(f"no kernel for role {role!r}; this zoo serves {', '.join(ROLES)}")
    loaded = module(ROLES[role])
    choice = getattr(loaded, "USES", {}).get("x".join(str(int(s)) for s in sizes) + ":" + dtype)
    return None if choice is None else choice[0] == "evo"


def op(role):
    """The entry function serving `role` (a key of ROLES)."""
    if role not in ROLES:
        raise KeyError(f"no kernel for role {role!r}; this zoo serves {', '.join(ROLES)}")
    loaded = module(ROLES[role])
    return getattr(loaded, loaded._EVO_ENTRY)


if __name__ == "__main__":
    codes = [module(operator)._evo_selfcheck_all() for operator in _ZOO_SOURCES]
    raise SystemExit(1 if 1 in codes else max(codes))
'''
