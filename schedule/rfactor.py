"""``rfactor``: factor a reduction into partial reductions plus a final one (TVM semantics),
and its use for cross-thread reductions on GPUs.

``BF = s.rfactor(B, ki)`` for ``B[i] = sum_k A[i, k]`` with ``k`` split into ``ko, ki``:

    BF[ki, i] = sum_ko A[i, ko * f + ki]      (ki becomes a spatial axis of BF)
    B[i]      = sum_ki BF[ki, i]              (B now reduces over one new axis)

so the partial sums over ``ko`` can run in parallel over ``ki``. When the split leaves a
ragged tail, the partial reduction keeps only the in-range ``k`` (a ``where`` condition).
Reference: TVM's ``Schedule::rfactor``; Suriana et al., "Parallel associative reductions
in Halide" (CGO 2017).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polytile.errors import ScheduleError, format_error
from polytile.te.expr import IterVar, Range, Reduce, TensorRead, Var, logical_and
from polytile.te.tensor import ComputeOp, Tensor
from polytile.te.visitor import substitute

from .loopmap import consumed_by
from .relations import Split

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage


def _fail(what: str, expected: str | None = None, **ctx):
    raise ScheduleError(format_error("rfactor", what, expected, **ctx))


def _root_values(stage: Stage, leaf_vars: dict) -> dict:
    """Each root reduce axis as an expression of the reduce leaves (``leaf_vars``: leaf
    IterVar -> expression), inverting split and fuse."""
    made_by = consumed_by(stage)

    def value(iv):
        if iv in leaf_vars:
            return leaf_vars[iv]
        rel = made_by[iv]
        lo = iv.dom.min if iv in stage.op.reduce_axis else 0
        if isinstance(rel, Split):
            return value(rel.outer) * stage.extent_of(rel.inner) + value(rel.inner) + lo
        e_in = stage.extent_of(rel.inner)
        fused = value(rel.fused)
        return (fused // e_in if iv is rel.outer else fused % e_in) + lo

    return {iv: value(iv) for iv in stage.op.reduce_axis}


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
    """Factor the reduction of ``tensor`` over its reduce loop ``axis``; see the module
    docstring. Returns the partial-reduction tensor, whose axis ``factor_axis`` is
    ``axis``; ``tensor`` then reduces over ``s[tensor].op.reduce_axis[0]``.

    Raises
    ------
    ScheduleError
        If ``axis`` is not a reduce loop of the stage, the stage is not a reduction, or
        its reduce loops are already annotated or have stages attached.
    """
    stage = sch[tensor]
    op = stage.op
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        _fail(f"stage {stage.name!r} is not a reduction", "rfactor a te.sum/max/min stage")
    stage._leaf("rfactor", axis)
    if axis.iter_type != "reduce":
        _fail(f"{axis.name!r} is a spatial loop of stage {stage.name!r}",
              "pass one of its reduction loops")
    red_leaves = [iv for iv in stage.leaf_iter_vars if iv.iter_type == "reduce"]
    for iv in red_leaves:
        if iv in stage.annotations or stage._attached_at(iv):
            _fail(f"reduction loop {iv.name!r} of stage {stage.name!r} is annotated or has "
                  f"a stage computed at it", "rfactor before annotating the reduction loops")
    ndim = len(op.axis)
    if not 0 <= factor_axis <= ndim:
        _fail(f"factor_axis={factor_axis}", f"0 <= factor_axis <= {ndim}")
    body: Reduce = op.body[0]
    # the partial-reduction op: spatial axes (copies) with `axis` inserted, other leaves reduce
    spatial = [IterVar(Var("int32", iv.var.name, True), iv.dom, "data_par") for iv in op.axis]
    fax = IterVar(Var("int32", axis.name, True), Range(0, stage.extent_of(axis)), "data_par")
    spatial.insert(factor_axis, fax)
    others = [iv for iv in red_leaves if iv is not axis]
    new_red = [IterVar(Var("int32", iv.name, True),
                       Range(iv.dom.min if iv in op.reduce_axis else 0, stage.extent_of(iv)),
                       "reduce") for iv in others]
    leaf_vars = {axis: fax.var}
    leaf_vars.update({iv: nr.var for iv, nr in zip(others, new_red)})
    roots = _root_values(stage, leaf_vars)
    mapping = {iv.var: e for iv, e in roots.items()}
    mapping.update({a.var: b.var for a, b in
                    zip(op.axis, [s for s in spatial if s is not fax])})
    source = substitute(body.source, mapping)
    conds = [] if body.condition is None else [substitute(body.condition, mapping)]
    for iv, e in roots.items():
        if iv not in leaf_vars:  # derived: may overshoot the range on a ragged tail
            conds += [e >= iv.dom.min, e < iv.dom.min + iv.dom.extent]
    cond = logical_and(*conds) if conds else None
    if new_red:
        rf_body = Reduce(body.dtype, body.combiner, source, tuple(new_red), cond, None)
    elif cond is not None:
        from polytile.te.expr import select

        rf_body = select(cond, source, body.combiner.identity)
    else:
        rf_body = source
    rf = ComputeOp(name=f"{op.name}.rf", tag=op.tag, attrs=op.attrs, axis=tuple(spatial),
                   reduce_axis=tuple(new_red), body=(rf_body,))
    rf_t = rf.output(0)
    # the final reduction over the factored axis
    r = IterVar(Var("int32", f"{axis.name}.v", True), Range(0, stage.extent_of(axis)), "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, r.var)
    final = Reduce(body.dtype, body.combiner, TensorRead(body.dtype, rf_t, tuple(idx)), (r,),
                   None, body.init)
    new_op = ComputeOp(name=op.name, tag=op.tag, attrs=op.attrs, axis=op.axis,
                       reduce_axis=(r,), body=(final,))
    from .cache import _replace_op

    _replace_op(sch, stage, new_op)
    first = min(stage.leaf_iter_vars.index(iv) for iv in red_leaves)
    stage.leaf_iter_vars = [iv for iv in stage.leaf_iter_vars if iv.iter_type != "reduce"]
    stage.leaf_iter_vars.insert(first, r)
    stage.relations = [rel for rel in stage.relations
                       if (rel.parent if isinstance(rel, Split) else rel.outer).iter_type
                       != "reduce"]
    stage.all_iter_vars = [iv for iv in stage.all_iter_vars if iv.iter_type != "reduce"] + [r]
    sch._add_stage(rf, before=stage)
    return rf_t


def lower_cross_thread_reductions(sch: Schedule) -> Schedule:
    """Rewrite every reduction whose reduce loop is bound to ``threadIdx.*`` (TVM's
    all-reduce) into a per-thread partial reduction in shared memory (``rfactor`` on that
    loop, bound to the same index) and a final reduction run by thread 0 of the index.
    Works on a copy; the user's schedule is unchanged.

    Raises
    ------
    ScheduleError
        When the reduction loops are not innermost, or a spatial loop of the stage is bound
        to a thread index too (only block indices may map its spatial loops).
    """
    targets = []
    for st in sch.stages:
        for iv, kind in st.annotations.items():
            if (kind.startswith("bind:threadIdx") and iv.iter_type == "reduce"):
                targets.append(st.name)
    if not targets:
        return sch
    sch = sch.copy()
    from .stage import thread_axis

    for name in targets:
        st = next(s for s in sch.stages if s.name == name and s.op.reduce_axis)
        iv, kind = next((iv, k) for iv, k in st.annotations.items()
                        if k.startswith("bind:threadIdx") and iv.iter_type == "reduce")
        tag = kind[5:]
        leaves = st.leaf_iter_vars
        first_red = min(k for k, v in enumerate(leaves) if v.iter_type == "reduce")
        if any(v.iter_type != "reduce" for v in leaves[first_red:]):
            raise ScheduleError(format_error(
                "bind", f"the reduction loop {iv.name!r} of stage {name!r} is bound to {tag!r} "
                f"but spatial loops run inside the reduction loops",
                "reorder the reduction loops innermost for a cross-thread reduction"))
        for v, k in st.annotations.items():
            if v.iter_type != "reduce" and k.startswith("bind:threadIdx"):
                raise ScheduleError(format_error(
                    "bind", f"stage {name!r} binds its spatial loop {v.name!r} to a thread "
                    f"index and its reduction loop {iv.name!r} to {tag!r}",
                    "bind the spatial loops of a cross-thread reduction to blockIdx only"))
        if first_red == 0:
            raise ScheduleError(format_error(
                "bind", f"stage {name!r} has no spatial loop around its cross-thread "
                f"reduction", "keep at least one spatial loop (bound to blockIdx)"))
        del st.annotations[iv]
        rf = rfactor(sch, st.op.output(0), iv, 0)
        rst = sch[rf]
        rst.scope = "shared"
        rst.compute_at(st, st.leaf_iter_vars[first_red - 1])
        rst.bind(rst.op.axis[0], thread_axis(tag))
        st.thread_predicate = {tag: 0}
    return sch
