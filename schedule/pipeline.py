"""The lowering pipeline, schedule -> loop IR, as a table of named phases.

``PHASES`` below reads top to bottom as the table of contents of lowering (the way
Halide's ``Lower.cpp`` does); every phase is one call into the module that owns the step:

====================  =====================================================================
phase                 what it does (module)
====================  =====================================================================
inputs                argument kinds, loop annotations, target/schedule agreement
                      (``validate.py``)
cross_thread          GPU only: ``rfactor`` reductions bound to threads become a
                      shared-memory tree (``rfactor.py``)
model                 inlining, statements, iteration domains, accesses, attach
                      footprints; unroll code-size limits (``model.py``, ``attach.py``,
                      ``limits.py``)
legality              dependences, and each reorder/fuse/parallel/vectorize checked
                      against them (``deps.py``)
tensorize             tensorized loop nests matched against their intrinsics with isl,
                      their statements cut to one instance per call (``tensorize.py``)
kernels               GPU only: one kernel per root stage, launch shapes and shared memory
                      checked against the target's ``DeviceLimits`` (``gpu.py``)
ast                   the isl schedule tree of the program or of each kernel (``tree.py``),
                      isl AST generation checked against the domains (``ast_check.py``,
                      with fallbacks where isl is wrong), converted at once into loop IR
                      (``astgen.py``)
loop_passes           ``LOOP_PASSES``: bfloat16 arithmetic in float32, int4 in int8, simplify,
                      vector-loop legalisation, unroll, ..., software pipelines
                      (``Stage.pipeline``) and asynchronous 16-byte global -> shared
                      copies (``cp.async``), and last the sharing of common
                      subexpressions through let-bindings (``passes/``)
kernel_launch         the bodies assembled: one ``KernelLaunch`` per kernel on GPUs
allocation            an ``Allocate`` for every intermediate, its scope chosen within the
                      target's stack limits (``passes/storage.py``)
storage_flattening    int4 buffers packed two elements per byte (``passes/int4.py``),
                      multi-dimensional accesses become row-major offsets
                      (``passes/storage.py``)
backend_passes        the target backend's own passes (``Backend.passes``: index
                      narrowing on GPUs)
====================  =====================================================================

``lower`` stops after ``allocation`` by default: that function prints as the readable loop
nest (one index per dimension). ``build`` runs every phase (``stop_after=None``).

Debugging: each phase is logged (logger ``polytile.lower``, level DEBUG: its time, and
its output at level DEBUG-1; ``POLYTILE_LOG`` sets the level, see :mod:`polytile.logconfig`),
and ``lower(..., dump=True)`` prints what each phase produced (``dump="ast"`` or a list of
names for some of them). ``describe()`` prints the table with a target's own passes.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from polytile.backend import Target, backends
from polytile.errors import ScheduleError, format_error
from polytile.te.depth import deep
from polytile.te.expr import Const, Expr, Var
from polytile.te.visitor import collect_many
from polytile.te.tensor import ComputeOp

from . import isl_util as iu
from .astgen import lower_nodes
from .deps import check_legality
from .gpu import (Kernel, check_shared_memory, check_store_predicate_threads, check_wavefronts,
                  is_extern, kernels)
from .injective import rewrite_fused_splits
from .kinds import PARAMS, AutoUnrollPragma, LoopKind, ThreadTag
from .limits import limit_unrolls
from .loop_ir import For, KernelLaunch, PrimFunc, Store, seq, stmt_exprs, walk_stmts
from .model import Model, build_model
from .passes.async_copy import async_copies
from .passes.bfloat16 import legalize_bfloat16
from .passes.int4 import legalize_int4, pack_int4
from .passes.barriers import sink_divergent_guards
from .passes.loops import (auto_unroll, dedup_syncs, legalize_vector_loops,
                           legalize_vector_loops_masked, serialize_nested_parallel,
                           guard_partial_unrolls, specialize_partial_unrolls, unroll)
from .passes.prefetch import strip_prefetch_pragmas
from .passes.share import share_subexpressions
from .passes.simplify import forget as forget_simplified
from .passes.simplify import Simplifier, simplify
from .passes.software_pipeline import (software_pipeline, software_pipeline_bounded,
                                       software_pipeline_synchronous)
from .passes.storage import allocate_intermediates, flatten_storage
from .passes.storage import forget as forget_buffers
from .rfactor import lower_cross_thread_reductions
from .schedule import Schedule
from .sizes import bind as bind_sizes
from .sizes import context as size_context
from .sizes import size_vars
from .tensorize import apply_tensorize
from .validate import (check_lower_inputs, check_store_predicates, hoist_out_of_vector_loops,
                       interchange_outer_vectorized, validate_schedule, vthreads_as_loops)

log = logging.getLogger("polytile.lower")

#: Loop-IR passes of the ``loop_passes`` phase, in order: (name, function).
LOOP_PASSES = (
    ("legalize_bfloat16", legalize_bfloat16),
    ("legalize_int4", legalize_int4),
    ("simplify", simplify),
    ("specialize_partial_unrolls", specialize_partial_unrolls),
    ("legalize_vector_loops", legalize_vector_loops),
    ("auto_unroll", auto_unroll),
    ("unroll", unroll),
    ("simplify", simplify),
    ("serialize_nested_parallel", serialize_nested_parallel),
    ("dedup_syncs", dedup_syncs),
    ("software_pipeline", software_pipeline),
    ("async_copies", async_copies),
    ("simplify", simplify),
    ("share_subexpressions", share_subexpressions),
)

#: The phase ``lower`` stops after unless told otherwise.
READABLE = "allocation"


@dataclass(eq=False)
class Lowering:
    """What the phases hand on: each phase reads some fields and sets others.

    ``units`` are the parts lowered separately (the kernels on a GPU; one ``None`` for the
    whole program on a CPU), ``bodies`` their loop IR, ``envs`` the variables of their
    hardware indices (isl parameter name -> ``Var``).
    """

    sch: Schedule
    args: list
    name: str
    target: Target
    who: str
    gpu: bool = False
    model: Model | None = None
    units: list = field(default_factory=list)
    bodies: list = field(default_factory=list)
    envs: list = field(default_factory=list)
    func: PrimFunc | None = None
    sizes: list = field(default_factory=list)    # size parameters (te.var in shapes)
    size_checks: list = field(default_factory=list)


@dataclass(frozen=True)
class Phase:
    """One step of lowering: ``run(state)`` updates the :class:`Lowering`; ``show(state)``
    is the text ``dump`` prints after it; ``gpu`` is True (GPU only), False (CPU only) or
    None (both)."""

    name: str
    run: Callable[[Lowering], None]
    show: Callable[[Lowering], str]
    gpu: bool | None = None

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


# ------------------------------------------------------------------------------ phases
def _inputs(s: Lowering) -> None:
    """argument kinds, loop annotations, target/schedule agreement"""
    check_lower_inputs(s.sch, s.args, s.who)
    s.sizes = size_vars(s.sch, s.args)
    iu.set_context(None, s.sizes)
    ctx, s.size_checks = size_context(s.sch, s.sizes)
    iu.set_context(ctx, s.sizes)
    s.sch = rewrite_fused_splits(s.sch)
    if not s.target.is_gpu:
        s.sch = vthreads_as_loops(s.sch)
    s.sch = interchange_outer_vectorized(hoist_out_of_vector_loops(s.sch))
    validate_schedule(s.sch)
    s.gpu = uses_gpu(s.sch) or (s.target.is_gpu and only_scalar_stages(s.sch))
    check_store_predicates(s.sch, s.gpu)
    if s.gpu != s.target.is_gpu:
        raise ScheduleError(format_error(
            s.who, f"target {str(s.target)!r} " + (
                "runs on the CPU, but the schedule binds loops to GPU indices" if s.gpu else
                "needs GPU kernels, but no loop of the schedule is bound to a GPU index"),
            f"build for target {_gpu_kind()!r}" if s.gpu else "bind loops with "
            "s[T].bind(axis, te.thread_axis('blockIdx.x')) and 'threadIdx.x'"))


def _cross_thread(s: Lowering) -> None:
    """GPU reductions bound to threads become a shared-memory tree"""
    s.sch = lower_cross_thread_reductions(s.sch)


def _model(s: Lowering) -> None:
    """polyhedral model: statements, domains, accesses, attach footprints"""
    s.model = build_model(s.sch, s.args, padded=s.gpu)
    s.model.rolled = limit_unrolls(s.model)


def _legality(s: Lowering) -> None:
    """dependences; reorder/fuse/parallel/vectorize checked against them"""
    check_legality(s.model)
    s.units = [None]


def _tensorize(s: Lowering) -> None:
    """tensorized nests matched against their intrinsics, one statement per call"""
    apply_tensorize(s.model)


def _kernels(s: Lowering) -> None:
    """kernels, launch shapes and shared memory within the device limits"""
    s.units = kernels(s.model, s.target.limits)
    for k in s.units:
        check_shared_memory(s.model, k, s.target.limits)
        check_wavefronts(k, s.target.limits)
        check_store_predicate_threads(s.model, k)


def _ast(s: Lowering) -> None:
    """schedule trees and checked isl ASTs, into loop IR (one per kernel on GPUs)"""
    s.envs = [{} if k is None else k.index_env() for k in s.units]
    s.bodies = [lower_nodes(s.model) if k is None else
                _bound_auto_unroll(k, sink_divergent_guards(
                    lower_nodes(s.model, k.nodes, k.context(), env),
                    [k.thread_vars()[PARAMS[t]] for t in PARAMS if t.is_thread],
                    f"{s.name}_kernel{i}"))
                for i, (k, env) in enumerate(zip(s.units, s.envs))]


def _bound_auto_unroll(k: Kernel, body):
    """``body`` of kernel ``k`` in the scope of an ``auto_unroll_max_step`` pragma that its
    stage puts on a loop bound to a thread index or outside the bound loops (TVM's
    ``kernel_scope``): such a loop is no loop of the kernel's code, its scope is the whole
    kernel."""
    st = k.plan.stage
    leaves = list(st.leaf_iter_vars)
    bound = [n for n, iv in enumerate(leaves) if isinstance(st.annotations.get(iv), ThreadTag)]
    steps = [v for iv, prs in st.pragmas.items() for key, v in prs
             if key == "auto_unroll_max_step" and bound and iv in leaves
             and leaves.index(iv) <= bound[-1]]
    if not steps:
        return body
    return For(Var("int64", "kernel_scope"), Const("int64", 0), Const("int64", 1),
               LoopKind.SERIAL, body, 1, (AutoUnrollPragma(steps[-1]),))


def loop_passes(target: Target) -> tuple:
    """``LOOP_PASSES`` for ``target``: on a device without asynchronous copies
    (``DeviceLimits.async_copy_bytes == 0``) no copy becomes one, and software pipelines
    copy synchronously; on ``llvm`` a ragged vector (extent ``min(C, X)``) stays vectorized,
    its memory accesses masked; on GPUs a ragged unrolled loop unrolls into guarded copies
    (:func:`~.passes.loops.guard_partial_unrolls`)."""
    passes = LOOP_PASSES
    if target.is_gpu:
        passes = tuple((n, guard_partial_unrolls if n == "specialize_partial_unrolls"
                        else f) for n, f in passes)
    if target.limits.async_copy_bytes:
        if target.attr("min_blocks"):     # a register bound: the copies first
            passes = tuple((n, software_pipeline_bounded if n == "software_pipeline" else f)
                           for n, f in passes)
        return passes
    passes = tuple((n, software_pipeline_synchronous if n == "software_pipeline" else f)
                   for n, f in passes if n != "async_copies")
    if target.kind == "llvm":
        # ragged vectors stay vectorized: the LLVM backend masks their memory accesses
        passes = tuple((n, legalize_vector_loops_masked if n == "legalize_vector_loops"
                        else f) for n, f in passes)
    return passes


def _loop_passes(s: Lowering) -> None:
    """loop-IR passes of LOOP_PASSES"""
    passes = loop_passes(s.target)
    s.bodies = [run_passes(b, passes) for b in s.bodies]


def _kernel_launch(s: Lowering) -> None:
    """the function: one KernelLaunch per kernel on GPUs"""
    if s.gpu:
        # the variables of each kernel, walked once for both the launch and the check below
        used = [collect_many(_all_exprs(b), Var) for b in s.bodies]
        body = seq(*[_launch(k, b, env, f"{s.name}_kernel{i}", vs)
                     for i, (k, b, env, vs) in enumerate(zip(s.units, s.bodies, s.envs,
                                                             used))])
        free = [v for vs in used for v in vs]
    else:
        (body,) = s.bodies
        free = None
    bound = bind_sizes(s.model.params, s.sizes, s.who)
    params = tuple(s.model.params) + tuple(v for v, _, _ in bound)
    _check_free_vars(body, params, free)
    imports = tuple((kind, text) for st in s.sch.stages for prs in st.pragmas.values()
                    for kind, text in prs if kind in ("import_llvm", "import_c"))
    attrs = {"imports": imports} if imports else {}
    if s.sizes:
        attrs.update(size_params=tuple(bound), size_checks=tuple(s.size_checks))
    s.func = PrimFunc(s.name, params, body, attrs)


def _allocation(s: Lowering) -> None:
    """an Allocate for every intermediate, within the stack limits"""
    s.func = allocate_intermediates(s.func, s.target.limits)


def _storage_flattening(s: Lowering) -> None:
    """row-major offsets instead of multi-dimensional indices"""
    s.func = finalize(s.func)
    if s.gpu:
        # a hint the CPU caches take (the llvm backend's insert_prefetches); GPU kernels go
        # without (see Stage.prefetch)
        s.func = strip_prefetch_pragmas(s.func)


def _backend_passes(s: Lowering) -> None:
    """the target backend's own passes"""
    s.func = run_backend_passes(s.func, s.target)


def _show_model(s: Lowering) -> str:
    return "\n".join(f"{st.name} ({st.plan.name}.{st.kind}): {st.domain}"
                     for st in s.model.stmts.values())


def _show_units(s: Lowering) -> str:
    return "\n".join(f"kernel of stage {k.plan.name!r}: grid {list(k.grid)}, block "
                     f"{list(k.block)}" for k in s.units if k is not None)


def _show_bodies(s: Lowering) -> str:
    return "\n\n".join(str(b) for b in s.bodies)


def _show_func(s: Lowering) -> str:
    return str(s.func)


def _show_schedule(s: Lowering) -> str:
    return "\n".join(f"stage {st.name}: loops {', '.join(v.name for v in st.leaf_iter_vars)}"
                     for st in s.sch.stages)


#: Every phase of lowering, in order (see the module docstring).
PHASES = (
    Phase("inputs", _inputs, _show_schedule),
    Phase("cross_thread", _cross_thread, _show_schedule, gpu=True),
    Phase("model", _model, _show_model),
    Phase("legality", _legality, lambda s: "legal"),
    Phase("tensorize", _tensorize, _show_model),
    Phase("kernels", _kernels, _show_units, gpu=True),
    Phase("ast", _ast, _show_bodies),
    Phase("loop_passes", _loop_passes, _show_bodies),
    Phase("kernel_launch", _kernel_launch, _show_func),
    Phase("allocation", _allocation, _show_func),
    Phase("storage_flattening", _storage_flattening, _show_func),
    Phase("backend_passes", _backend_passes, _show_func),
)
PHASE_NAMES = tuple(p.name for p in PHASES)


# ------------------------------------------------------------------------------ driver
@deep("lower")
def lower(sch: Schedule, args, name: str = "main", target: str | Target | None = None,
          simple_mode: bool = False, *, stop_after: str | None = READABLE,
          dump: bool | str | Iterable[str] = False, who: str = "lower",
          timings: dict | None = None) -> PrimFunc:
    """Lower schedule ``sch`` to a loop-IR function with parameters ``args``.

    Parameters
    ----------
    sch : Schedule
    args : list of Tensor or te.var
        Function parameters in order: every placeholder read and every output of the
        schedule, plus scalar ``te.var`` parameters.
    name : str
        Function name.
    target : str or Target, optional
        The target whose device limits apply (launch shapes, shared memory, stack
        budgets) and whose passes run last. Default: ``"cuda"`` for a schedule with loops
        bound to GPU indices, else ``"llvm"``.
    simple_mode : bool
        Accepted for TVM compatibility; the printed form is always the simple one.
    stop_after : str or None
        The last phase to run, one that yields a function (``kernel_launch`` or later);
        default ``"allocation"``, whose result prints as the readable loop nest. None runs
        every phase (what ``build`` compiles).
    dump : bool, str or iterable of str
        Print what each phase (True) or the named phases produced, to stdout.
    who : str
        The primitive error messages name (``build`` when called by it).
    timings : dict, optional
        Filled with the wall time of each phase that ran, in seconds, by phase name
        (``benchmarks/build_time.py`` reads it).

    Returns
    -------
    PrimFunc
        ``str()`` of it is the loop nest.

    Raises
    ------
    TypeError
        When ``sch`` is not a Schedule or ``args`` is not a list.
    ScheduleError
        For an illegal schedule, arguments that do not match it, or a schedule that does
        not fit the target (GPU bindings for a CPU target, launch shapes or shared memory
        beyond the device limits).
    LoweringError
        For a legal construct this version cannot lower.
    TargetError
        For an unknown target.
    ValueError
        For an unknown phase name in ``stop_after`` or ``dump``.
    """
    tgt = Target.parse(target) if target is not None else _default_target(sch)
    last = _phase_index(stop_after)
    show = _dump_set(dump)
    if isinstance(args, (list, tuple)):   # vector-dtype tensors lower as their lanes view
        from polytile.te.vector import unwrap

        args = type(args)(unwrap(a) for a in args)
    state = Lowering(sch, args, name, tgt, who)
    t_all = time.perf_counter()
    try:
        with iu.parameter_context(None):
            _run_phases(state, PHASES[:last + 1], show, name, timings)
    finally:
        forget_simplified()
        forget_buffers()
    log.debug("lowered %s for %s in %.3f s", name, tgt, time.perf_counter() - t_all)
    return state.func


def _run_phases(state: Lowering, phases, show, name: str, timings: dict | None) -> None:
    for phase in phases:
        if phase.gpu is not None and phase.gpu != state.gpu:
            continue
        t0 = time.perf_counter()
        phase.run(state)
        ms = (time.perf_counter() - t0) * 1e3
        if timings is not None:
            timings[phase.name] = ms / 1e3
        log.debug("%s: %s %.2f ms", name, phase.name, ms)
        if log.isEnabledFor(logging.DEBUG - 1):
            log.log(logging.DEBUG - 1, "%s after %s:\n%s", name, phase.name, phase.show(state))
        if show is True or phase.name in show:
            print(f"# {name}: after {phase.name} ({ms:.2f} ms)\n{phase.show(state)}\n",
                  file=sys.stdout)


def run_passes(body, passes: tuple):
    """Apply ``(name, function)`` passes in order, logging each result at DEBUG-1."""
    for pname, fn in passes:
        body = fn(body)
        if log.isEnabledFor(logging.DEBUG - 1):
            log.log(logging.DEBUG - 1, "after %s:\n%s", pname, body)
    return body


def run_backend_passes(func: PrimFunc, target: Target) -> PrimFunc:
    """The ``backend_passes`` phase alone: the passes of ``target``'s backend on a lowered
    and flattened function (``build`` applies them to a ``PrimFunc`` it is given)."""
    return run_passes(func, target.backend.passes(target))


@deep("build")
def finalize(func: PrimFunc) -> PrimFunc:
    """The ``storage_flattening`` phase alone: pack int4 buffers two elements per byte,
    flatten storage to 1-D offsets, then fold the constant index arithmetic that
    flattening creates."""
    # share: past share_subexpressions, sharing no longer changes the code; one walker
    # builds the flat offsets simplified and then simplifies the rest around them
    walker = Simplifier(share=True)
    flat = flatten_storage(pack_int4(func), walker)
    return PrimFunc(flat.name, flat.params, simplify(flat.body, share=True, walker=walker),
                    flat.attrs)


def only_scalar_stages(sch: Schedule) -> bool:
    """True when every stage computed at the root is 0-rank (nothing to bind: on a GPU
    each runs as a kernel of one thread)."""
    roots = [st for st in sch.stages if isinstance(st.op, ComputeOp)
             and st.attach_type == "root"]
    return bool(roots) and all(not st.op.axis or is_extern(st.op) for st in roots)


def uses_gpu(sch: Schedule) -> bool:
    """True when some loop is bound to a GPU index: the program is lowered to kernels."""
    return any(isinstance(kind, ThreadTag) for st in sch.stages
               for kind in st.annotations.values())


def describe(target: str | Target | None = None) -> str:
    """The phase table as text, with the passes of ``target``'s backend when given."""
    lines = []
    for k, p in enumerate(PHASES, 1):
        only = {True: " (GPU only)", False: " (CPU only)", None: ""}[p.gpu]
        lines.append(f"{k:2d}  {p.name:<20s}{p.doc}{only}")
        if p.run is _loop_passes:
            lines += [f"      - {n}" for n, _ in LOOP_PASSES]
        if p.run is _backend_passes and target is not None:
            t = Target.parse(target)
            lines += [f"      - {n}" for n, _ in t.backend.passes(t)] or ["      (none)"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ helpers
def _default_target(sch) -> Target:
    if not isinstance(sch, Schedule):
        return Target.parse("llvm")  # the input check of the first phase reports it
    # loops bound to vthread alone run on the CPU too (unrolled: vthreads_as_loops)
    hardware = any(isinstance(kind, ThreadTag) and kind.is_hardware for st in sch.stages
                   for kind in st.annotations.values())
    return Target.parse(_gpu_kind() if hardware else "llvm")


def _gpu_kind() -> str:
    """The kind GPU-bound schedules default to: the first registered GPU backend."""
    return backends(lambda b: b.is_gpu)[0].kind


def _phase_index(stop_after: str | None) -> int:
    if stop_after is None:
        return len(PHASES) - 1
    ends = PHASE_NAMES[PHASE_NAMES.index("kernel_launch"):]
    if stop_after not in ends:
        raise ValueError(format_error("lower", f"stop_after={stop_after!r}",
                                      f"expected a phase that yields a function: "
                                      f"{', '.join(ends)} (or None for all)"))
    return PHASE_NAMES.index(stop_after)


def _dump_set(dump) -> bool | set:
    if dump is True or dump is False:
        return dump or set()
    names = {dump} if isinstance(dump, str) else set(dump)
    bad = sorted(names - set(PHASE_NAMES))
    if bad:
        raise ValueError(format_error("lower", f"unknown phase {bad[0]!r} in dump",
                                      f"expected names from {', '.join(PHASE_NAMES)}"))
    return names


def _launch(kernel: Kernel, body, env: dict, name: str, variables: list) -> KernelLaunch:
    used = {id(v) for v in variables}
    tvars = tuple((v, v.name) for v in kernel.thread_vars().values() if id(v) in used)
    stage = kernel.plan.stage
    blocks = [v for iv in stage.leaf_iter_vars for k, v in stage.pragmas.get(iv, ())
              if k == "min_blocks"]
    return KernelLaunch(name, kernel.grid, kernel.block, tvars, body, max(blocks, default=0))


def _all_exprs(body) -> list:
    """Every expression held by a statement of ``body``, statements in pre-order."""
    out: list = []
    for s in walk_stmts(body):
        if s.__class__ is Store:   # most statements of an unrolled kernel: stmt_exprs inline
            out += [e for e in (s.value, *s.indices) if isinstance(e, Expr)]
        else:
            out += stmt_exprs(s)
    return out


def _check_free_vars(body, params, variables: list | None = None) -> None:
    """Refuse a variable of ``body`` that no parameter or statement binds; ``variables``
    are those of ``body`` when the caller has them (its expressions' ``Var`` nodes in
    pre-order of statements, repeats allowed)."""
    bound = {id(p) for p in params if isinstance(p, Var)}
    for s in walk_stmts(body):
        v = getattr(s, "var", None)
        if isinstance(v, Var):
            bound.add(id(v))
        if isinstance(s, KernelLaunch):
            bound.update(id(v) for v, _ in s.thread_vars)
    for v in collect_many(_all_exprs(body), Var) if variables is None else variables:
        if id(v) not in bound:
            raise ScheduleError(format_error(
                "lower", f"te.var {v.name!r} is used but not in args",
                "add it to args so the built function receives it"))
