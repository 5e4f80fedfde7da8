"""``lower``: schedule -> loop IR. The pipeline is the data below, read top to bottom.

1. ``build_model``: inlining, statements, iteration domains, accesses, attach footprints
   (``model.py``), with argument and bounds checks; ``limit_unrolls`` bounds the code
   unrolling may emit (``limits.py``);
2. ``check_legality``: dependences of every stage on program order, and each
   reorder/fuse/parallel/vectorize checked against them (``deps.py``);
3. ``lower_nodes``: the isl schedule tree (``tree.py``), isl AST generation checked against
   the domains (``ast_check.py``, with fallbacks where isl is wrong), converted at once into
   loop IR (``astgen.py``);
4. the loop-IR passes of ``PASSES``; then ``allocate_intermediates``.

``finalize`` applies the target-independent steps code generators need after that
(storage flattening).
"""

from __future__ import annotations

import logging
import time

from polytile.te.depth import deep
from polytile.te.expr import Var
from polytile.te.visitor import collect

from .astgen import lower_nodes
from .deps import check_legality
from .gpu import check_shared_memory, kernels
from .loop_ir import KernelLaunch, PrimFunc, seq, stmt_exprs, walk_stmts
from .limits import limit_unrolls
from .model import build_model
from .passes.loops import (dedup_syncs, legalize_vector_loops, serialize_nested_parallel,
                           unroll)
from .passes.simplify import simplify
from .passes.storage import allocate_intermediates, flatten_storage
from .rfactor import lower_cross_thread_reductions
from .schedule import Schedule
from .validate import check_lower_inputs, validate_schedule

log = logging.getLogger("polytile.lower")

#: Loop-IR passes run after AST generation, in order: (name, function).
PASSES = (
    ("simplify", simplify),
    ("legalize_vector_loops", legalize_vector_loops),
    ("unroll", unroll),
    ("simplify", simplify),
    ("serialize_nested_parallel", serialize_nested_parallel),
    ("dedup_syncs", dedup_syncs),
)


@deep("lower")
def lower(sch: Schedule, args, name: str = "main", simple_mode: bool = False) -> PrimFunc:
    """Lower schedule ``sch`` to a loop-IR function with parameters ``args``.

    Parameters
    ----------
    sch : Schedule
    args : list of Tensor or te.var
        Function parameters in order: every placeholder read and every output of the
        schedule, plus scalar ``te.var`` parameters.
    name : str
        Function name.
    simple_mode : bool
        Accepted for TVM compatibility; the printed form is always the simple one.

    Returns
    -------
    PrimFunc
        ``str()`` of it is the readable loop nest (multi-dimensional indices, allocations
        shown).

    Raises
    ------
    TypeError
        When ``sch`` is not a Schedule or ``args`` is not a list.
    ScheduleError
        For an illegal schedule or arguments that do not match it.
    LoweringError
        For a legal construct this version cannot lower.
    """
    t0 = time.perf_counter()
    check_lower_inputs(sch, args)
    validate_schedule(sch)
    gpu = uses_gpu(sch)
    if gpu:
        sch = lower_cross_thread_reductions(sch)
    model = build_model(sch, args, padded=gpu)
    model.rolled = limit_unrolls(model)
    check_legality(model)
    if gpu:
        body = seq(*[_lower_kernel(model, k, f"{name}_kernel{i}")
                     for i, k in enumerate(kernels(model))])
    else:
        body = _passes(lower_nodes(model))
    _check_free_vars(body, model.params)
    func = allocate_intermediates(PrimFunc(name, tuple(model.params), body))
    log.debug("lowered %s in %.3f s", name, time.perf_counter() - t0)
    return func


def _passes(body):
    for pname, fn in PASSES:
        body = fn(body)
        log.debug("after %s:\n%s", pname, body)
    return body


def uses_gpu(sch: Schedule) -> bool:
    """True when some loop is bound to a GPU index: the program is lowered to kernels."""
    return any(kind.startswith("bind:") for st in sch.stages for kind in st.annotations.values())


def _lower_kernel(model, kernel, name: str) -> KernelLaunch:
    check_shared_memory(model, kernel)
    env = kernel.thread_vars()
    body = _passes(lower_nodes(model, kernel.nodes, kernel.context(), env))
    used = {id(v) for x in walk_stmts(body) for e in stmt_exprs(x) for v in collect(e, Var)}
    tvars = tuple((v, v.name) for v in env.values() if id(v) in used)
    return KernelLaunch(name, kernel.grid, kernel.block, tvars, body)


@deep("build")
def finalize(func: PrimFunc) -> PrimFunc:
    """Target-independent lowering after ``lower``: flatten storage to 1-D offsets, then
    fold the constant index arithmetic that flattening creates."""
    flat = flatten_storage(func)
    return PrimFunc(flat.name, flat.params, simplify(flat.body), flat.attrs)


def _check_free_vars(body, params) -> None:
    from polytile.errors import ScheduleError, format_error

    bound = {id(p) for p in params if isinstance(p, Var)}
    for s in walk_stmts(body):
        v = getattr(s, "var", None)
        if isinstance(v, Var):
            bound.add(id(v))
        if isinstance(s, KernelLaunch):
            bound.update(id(v) for v, _ in s.thread_vars)
    for s in walk_stmts(body):
        for e in stmt_exprs(s):
            for v in collect(e, Var):
                if id(v) not in bound:
                    raise ScheduleError(format_error(
                        "lower", f"te.var {v.name!r} is used but not in args",
                        "add it to args so the built function receives it"))
