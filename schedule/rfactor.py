"""``rfactor``: factor a reduction into partial reductions plus a final one (TVM semantics),
and its use for cross-thread reductions on GPUs.

``BF = s.rfactor(B, ki)`` for ``B[i] = sum_k A[i, k]`` with ``k`` split into ``ko, ki``:

    BF[ki, i] = sum_ko A[i, ko * f + ki]      (ki becomes a spatial axis of BF)
    B[i]      = sum_ki BF[ki, i]              (B now reduces over one new axis)

so the partial sums over ``ko`` can run in parallel over ``ki``. Exactness rules:

* Every loop of ``BF`` runs from 0 or from its reduce axis' minimum; a root axis
  ``k in [lo, hi)`` is rebuilt as ``lo + ...`` whichever loop is factored.
* A ragged split (``outer * f + inner`` past the parent's extent, at any depth: a split of
  a split's inner loop would otherwise visit points twice) adds a condition to the partial
  reduction (a ``where``, or a ``select`` when no reduce loop is left), before the user's
  ``where``; reads stay guarded, so window offsets past the window are never read.
* ``factor_axis`` counts from the end when negative (TVM, Python).
* The combiner must be *proven* commutative and associative with an identity
  (:func:`polytile.te.algebra.rfactor_violation`); otherwise rfactor refuses, saying
  whether the law fails or cannot be proven.
* Partials of a float16/bfloat16 reduction that rounds (all but max/min) are float32; the
  final reduction reads them unrounded and combines them in its accumulator.
* Stages computed at a reduction loop move with that loop into ``BF``.
* A tuple reduction (``te.comm_reducer`` over tuples) factors into a partial op with one
  output per element (``rfactor`` returns the list, TVM's rule) and a final tuple
  reduction over them; its combiner must be proven like any other (a ``(sum, sum of
  squares)`` pair is, argmax/argmin over ``(index, value)`` pairs are not: refused).

Reference: TVM's ``Schedule::rfactor``; Suriana et al., "Parallel associative reductions
in Halide" (CGO 2017).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polytile.errors import ScheduleError, fail, format_error
from polytile.te.algebra import PROVABLE, rfactor_violation
from polytile.te.reduction import accumulation_dtype, widened
from polytile.te.expr import (CommReducer, IterVar, Range, Reduce, TensorRead,
                              TupleCommReducer, Var, cast, logical_and, select)
from polytile.te.tensor import ComputeOp, Tensor
from polytile.te.visitor import substitute, substituter

from .cache import _replace_op
from .kinds import ThreadTag, annotation_name
from .loopmap import consumed_by
from .relations import Cyclic, Singleton, Split, Transform, symbolic_split
from .stage import Stage, thread_axis

if TYPE_CHECKING:
    from .schedule import Schedule  # a type hint only: schedule.py imports this module


def stage_of(sch: Schedule, tensor) -> Stage:
    """The stage of ``tensor``, refused in rfactor's words when it has none."""
    try:
        return sch[tensor]
    except ScheduleError:
        fail("rfactor", f"tensor {getattr(tensor, 'name', tensor)!r} is not part of this schedule",
              "rfactor a reduction reachable from the schedule's outputs")


def _root_values(stage: Stage, leaf_vals: dict) -> tuple[dict, list]:
    """Each root reduce axis as an expression of the reduce leaves, inverting split and
    fuse, and the conditions under which those values are real iterations.

    ``leaf_vals`` maps each reduce leaf to an expression of its *value* (a root axis runs
    over ``[dom.min, dom.min + extent)``, a derived one from 0). A ragged split lets
    ``outer * factor + inner`` pass the parent's extent; that value is no iteration of the
    parent (past a root's range, or a duplicate of another split's point), so it gets a
    condition ``value < min + extent``. Leaves are in range by construction, and fuse
    maps an in-range value to in-range parts, so ragged splits are the only source.
    """
    made_by = consumed_by(stage)
    conds: list = []
    memo: dict = {}

    def value(iv):
        if iv in leaf_vals:
            return leaf_vals[iv]
        if iv in memo:
            return memo[iv]
        rel = made_by[iv]
        lo = iv.dom.min
        if symbolic_split(rel) or getattr(rel, "sym", None) is True:
            how = (f"split by the symbolic factor {rel.sym}" if symbolic_split(rel) else
                   f"fused with {rel.inner.name!r} of symbolic extent {rel.inner.dom.extent}")
            fail("rfactor", f"the reduction axis {iv.name!r} of stage {stage.name!r} is {how}",
                 "reduction loops of constant-factor "
                 "splits and constant-extent fuses for rfactor and cross-thread reductions",
                 hint="split the reduction axis by a constant factor (or nparts) first")
        if isinstance(rel, Cyclic):
            v = value(rel.inner) * rel.parts + value(rel.outer)
            v = v + lo if lo else v
            conds.append(v < lo + stage.extent_of(iv))   # the last round may be ragged
        elif isinstance(rel, Split):
            f = rel.factor
            v = value(rel.outer) * f + value(rel.inner)
            v = v + lo if lo else v
            if stage.extent_of(rel.outer) * f != stage.extent_of(iv):
                conds.append(v < lo + stage.extent_of(iv))
        else:
            e_in = stage.extent_of(rel.inner)
            fused = value(rel.fused)
            v = fused // e_in if iv is rel.outer else fused % e_in
            v = v + lo if lo else v
        memo[iv] = v
        return v

    return {iv: value(iv) for iv in stage.op.reduce_axis}, conds


def _normalise_factor_axis(stage: Stage, factor_axis, ndim: int) -> int:
    """``factor_axis`` in ``[0, ndim]``; negative values count from the end as in TVM
    (``-1`` puts the factored axis last)."""
    if isinstance(factor_axis, bool) or not isinstance(factor_axis, int):
        fail("rfactor", f"factor_axis={factor_axis!r} for stage {stage.name!r}", "expected an int")
    pos = factor_axis + ndim + 1 if factor_axis < 0 else factor_axis
    if not 0 <= pos <= ndim:
        fail("rfactor", f"factor_axis={factor_axis} is out of range for stage {stage.name!r}, whose "
              f"partial tensor has {ndim + 1} axes",
              f"expected {-(ndim + 1)} <= factor_axis <= {ndim}")
    return pos


def _check_combiner(stage: Stage, comb: CommReducer, primitive: str = "rfactor") -> None:
    why = rfactor_violation(comb)
    if why is None:
        return
    ctx = {"Combiner": f"f(x, y) = {comb.result}, identity {comb.identity}"}
    if why.refuted:
        raise ScheduleError(format_error(
            primitive, f"the combiner {comb.name!r} of stage {stage.name!r} is not a "
            f"commutative, associative reducer with an identity: {why}",
            "partial reductions are combined in another order and grouping than the "
            "sequential fold", **ctx,
            hint="keep this reduction sequential, or fix te.comm_reducer's fcombine/fidentity"))
    raise ScheduleError(format_error(
        primitive, f"polytile cannot prove that the combiner {comb.name!r} of stage "
        f"{stage.name!r} is a commutative, associative reducer with an identity: {why}",
        "partial reductions are combined in another order and grouping than the sequential "
        "fold, which is only exact for a proven combiner", **ctx,
        hint=f"keep this reduction sequential (no rfactor, cross-thread bind or reorder of "
        f"its reduction loops); the laws are proven for {PROVABLE}"))


def _partial_combiner(red: Reduce) -> CommReducer:
    """The combiner of the partial reductions: that of the accumulation dtype (float32 for a
    float16 reducer that rounds, see :mod:`polytile.te.dtype`), so partials are not rounded
    before the final reduction."""
    wide = accumulation_dtype(red)
    return red.combiner if wide == red.dtype else widened(red.combiner, wide)


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
    """Factor the reduction of ``tensor`` over its reduce loop ``axis``; see the module
    docstring. Returns the partial-reduction tensor ``<name>.rf``, whose axis
    ``factor_axis`` (negative: counted from the end) runs over ``axis``'s loop;
    ``tensor`` then reduces over ``s[tensor].op.reduce_axis[0]``.

    Partials of a float16/bfloat16 reduction other than max/min are float32 (the final
    reduction reads them unrounded). The factored loop runs from 0; the loop of a root
    reduce axis ``k`` in ``[lo, hi)`` stands for ``k = lo + v``.

    Raises
    ------
    ScheduleError
        If ``axis`` is not a reduce loop of the stage, the stage is not a reduction, its
        reduce loops are already annotated, ``factor_axis`` is out of range, or the
        combiner is not commutative and associative with an identity; each message names
        rfactor, the stage and the loop or combiner.
    """
    stage = stage_of(sch, tensor)
    if "te.extern" in stage.op.attrs:
        fail("rfactor", f"{stage.name!r} is a te.extern, whose reduction is not polytile's",
             "a te.sum compute")
    op = stage.op
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        fail("rfactor", f"stage {stage.name!r} is not a reduction", "rfactor a te.sum/max/min stage")
    if not isinstance(axis, IterVar):
        fail("rfactor", f"axis {axis!r} of stage {stage.name!r} is not an IterVar",
              "pass one of its reduction loops, such as s[B].op.reduce_axis[0] or a result "
              "of split")
    stage._leaf("rfactor", axis)
    if axis.iter_type != "reduce":
        fail("rfactor", f"{axis.name!r} is a spatial loop of stage {stage.name!r}",
              "pass one of its reduction loops")
    red_leaves = [iv for iv in stage.leaf_iter_vars if iv.iter_type == "reduce"]
    for iv in red_leaves:
        if iv in stage.annotations:
            fail("rfactor", f"reduction loop {iv.name!r} of stage {stage.name!r} is annotated "
                 f"{annotation_name(stage.annotations[iv])!r}",
                 "rfactor before annotating the reduction loops")
    # stages computed at a reduction loop follow the loop into the partial stage
    moved = [(st, iv) for iv in red_leaves for st in stage._attached_at(iv)]
    ndim = len(op.axis)
    factor_axis = _normalise_factor_axis(stage, factor_axis, ndim)
    body: Reduce = op.body[0]
    _check_combiner(stage, body.combiner)
    bodies: tuple = op.body
    part = _partial_combiner(body)
    pdts = ([r.dtype for r in bodies] if isinstance(part, TupleCommReducer)
            else [part.result.dtype])
    # the partial-reduction op: spatial axes (copies) with `axis` inserted, other leaves reduce
    spatial = [IterVar(Var("int32", iv.var.name, True), iv.dom, "data_par") for iv in op.axis]
    fax = IterVar(Var("int32", axis.name, True), Range(0, stage.extent_of(axis)), "data_par")
    spatial.insert(factor_axis, fax)
    others = [iv for iv in red_leaves if iv is not axis]
    new_red = tuple(IterVar(Var("int32", iv.name, True), Range(iv.dom.min, stage.extent_of(iv)),
                            "reduce") for iv in others)
    leaf_vals = {axis: fax.var + axis.dom.min if axis.dom.min else fax.var}
    leaf_vals.update({iv: nr.var for iv, nr in zip(others, new_red)})
    roots, conds = _root_values(stage, leaf_vals)
    mapping = {iv.var: e for iv, e in roots.items()}
    mapping.update({a.var: b.var for a, b in
                    zip(op.axis, [s for s in spatial if s is not fax])})
    if body.condition is not None:
        # after the range conditions: the where= may read only in-range iterations
        conds.append(substitute(body.condition, mapping))
    cond = logical_and(*conds) if conds else None
    ident = part.identity if isinstance(part, TupleCommReducer) else (part.identity,)
    rf_bodies = []
    sub = substituter(mapping)   # one walker: a node the tuple's sources share stays shared
    for k, (b, pdt) in enumerate(zip(bodies, pdts)):
        source = cast(sub.visit(b.source), pdt)
        if new_red:   # one condition object shared by a tuple's elements (te's rule)
            rf_bodies.append(Reduce(pdt, part, source, new_red, cond, None, k))
        elif cond is not None:
            rf_bodies.append(select(cond, source, ident[k]))
        else:
            rf_bodies.append(source)
    rf = ComputeOp(name=f"{op.name}.rf", tag=op.tag, attrs=op.attrs, axis=tuple(spatial),
                   reduce_axis=new_red, body=tuple(rf_bodies))
    # the final reduction over the factored axis; it reads the partials in their own
    # (possibly wider) dtype and combines them in the accumulator's
    r = IterVar(Var("int32", f"{axis.name}.v", True), Range(0, stage.extent_of(axis)), "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, r.var)
    idx = tuple(idx)
    raxis = (r,)
    finals = tuple(Reduce(b.dtype, b.combiner, TensorRead(pdt, rf.output(k), idx), raxis,
                          None, b.init, k) for k, (b, pdt) in enumerate(zip(bodies, pdts)))
    new_op = ComputeOp(name=op.name, tag=op.tag, attrs=op.attrs, axis=op.axis,
                       reduce_axis=raxis, body=finals)
    _replace_op(sch, stage, new_op)
    first = min(stage.leaf_iter_vars.index(iv) for iv in red_leaves)
    stage.leaf_iter_vars = [iv for iv in stage.leaf_iter_vars if iv.iter_type != "reduce"]
    stage.leaf_iter_vars.insert(first, r)
    stage.relations = [rel for rel in stage.relations
                       if isinstance(rel, (Singleton, Transform)) or (
                           rel.parent if isinstance(rel, (Split, Cyclic)) else rel.outer
                       ).iter_type
                       != "reduce"]
    stage.all_iter_vars = [iv for iv in stage.all_iter_vars if iv.iter_type != "reduce"] + [r]
    rst = sch._add_stage(rf, before=stage)
    loop_of = dict(zip(others, new_red))
    loop_of[axis] = fax
    for st, iv in moved:
        st.attach_stage, st.attach_ivar = rst, loop_of[iv]
    outs = [rf.output(k) for k in range(rf.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def lower_cross_thread_reductions(sch: Schedule) -> Schedule:
    """Rewrite every reduction whose reduce loop is bound to ``threadIdx.*`` (TVM's
    all-reduce) into a per-thread partial reduction in shared memory (``rfactor`` on that
    loop, bound to the same index) and a final reduction run by thread 0 of the index.
    Works on a copy; the user's schedule is unchanged.

    Both of TVM's forms work: binding a loop of the reduction itself (``split(k)``, bind
    ``k.inner``), and the explicit one, ``BF = s.rfactor(B, ki)``, binding
    ``s[B].op.reduce_axis[0]`` and ``s[BF].compute_at(s[B], s[B].op.reduce_axis[0])``:
    ``BF`` then moves with the bound loop into the shared partial stage, so each thread
    computes its own partial in registers.

    Spatial loops of the reduction may be bound to other thread indices too (TVM's
    tutorial: rows on ``threadIdx.y``, the reduction on ``threadIdx.x``): the shared
    partial stage is then computed outside those loops, one buffer for the block's rows,
    and binds its own row axes to the same indices.

    Raises
    ------
    ScheduleError
        When the reduction loops are not innermost, a spatial loop bound to a thread
        index is not one of the innermost spatial loops or is neither an axis nor the
        inner loop of a constant split of one (:func:`_thread_rows`), the combiner is not
        commutative and associative, or another reduction loop is annotated.
    """
    targets = []
    for st in sch.stages:
        for iv, kind in st.annotations.items():
            if _on_thread(kind) and iv.iter_type == "reduce" and st.name not in targets:
                targets.append(st.name)
    if not targets:
        return sch
    sch = sch.copy()
    for name in targets:
        st = next(s for s in sch.stages if s.name == name and s.op.reduce_axis)
        _fuse_thread_reductions(sch, st)
        iv, tag = next((iv, k) for iv, k in st.annotations.items()
                       if _on_thread(k) and iv.iter_type == "reduce")
        leaves = st.leaf_iter_vars
        first_red = min(k for k, v in enumerate(leaves) if v.iter_type == "reduce")
        # a spatial loop bound to a block index is the grid, outside every loop of the
        # kernel, wherever it stands: moved out of the reduction loops, it keeps the order
        # of each element's updates (fuzz seed cuda 90204 was refused)
        late = [v for v in leaves[first_red:] if v.iter_type != "reduce"
                and isinstance(st.annotations.get(v), ThreadTag)
                and st.annotations[v].is_block]
        if late:
            st.reorder(*(leaves[:first_red] + late
                         + [v for v in leaves[first_red:] if all(v is not b for b in late)]))
            leaves = st.leaf_iter_vars
            first_red += len(late)
        if any(v.iter_type != "reduce" for v in leaves[first_red:]):
            raise ScheduleError(format_error(
                "bind", f"the reduction loop {iv.name!r} of stage {name!r} is bound to {tag.value!r} "
                f"but spatial loops run inside the reduction loops",
                "reorder the reduction loops innermost for a cross-thread reduction"))
        rows = _thread_rows(st, leaves[:first_red], iv, tag)
        if first_red == 0:
            raise ScheduleError(format_error(
                "bind", f"stage {name!r} has no spatial loop around its cross-thread "
                f"reduction", "keep at least one spatial loop (bound to blockIdx)"))
        _check_combiner(st, st.op.body[0].combiner, "bind")
        around = _thread_loop_around(st)
        if around is not None:
            at, loop, at_tag = around
            raise ScheduleError(format_error(
                "compute_at", f"stage {name!r} is a cross-thread reduction over {iv.name!r} "
                f"(bound to {tag.value!r}) computed inside loop {loop.name!r} of stage "
                f"{at.name!r}, which is bound to {at_tag.value!r}: each thread there would "
                f"run the whole block's reduction", "compute it at a loop outside the "
                "threadIdx loops (the row loop bound to blockIdx)",
                hint=f"bind {name!r}'s own row loops to thread indices instead (TVM's rows "
                     f"on threadIdx.y)"))
        del st.annotations[iv]
        try:
            rf = rfactor(sch, st.op.output(0), iv, 0)
        except ScheduleError as ex:
            raise ScheduleError(format_error(
                "bind", f"the cross-thread reduction of stage {name!r} over {iv.name!r} "
                f"(bound to {tag.value!r}) cannot be lowered: {ex}")) from None
        rst = sch[rf[0] if isinstance(rf, list) else rf]
        rst.scope = "shared"
        # the partials of a block live in one shared buffer: computed outside the thread
        # loops of B's rows, with those rows on the same thread indices (so each thread
        # computes the partial its own final reduction reads)
        pos = first_red - 1 - len(rows)
        if pos < 0:   # every spatial loop is a thread row: one block of one iteration
            pos = 0
            st.bind(st.fuse(), thread_axis("blockIdx.x"))
        rst.compute_at(st, st.leaf_iter_vars[pos])
        rst.bind(rst.op.axis[0], thread_axis(tag.value))
        for q, factor, row_tag in rows:
            ax = rst.op.axis[q + 1]
            if factor:   # the same extent as B's thread loop, even past a short tensor
                _, ax = rst.split(ax, factor=factor)
            rst.bind(ax, thread_axis(row_tag.value))
        if rows:   # stages computed at the partial's loop then run once per row, not for all
            # the partial's loop inside the rows but outside the reduction loops: a local
            # copy computed at a reduction loop then holds this thread's elements only
            # (with the partial innermost, its footprint spanned every thread's: a 2048-
            # element register array per thread for 256 threads of 8-wide vectors)
            part = rst.op.axis[0]
            leaves = [v for v in rst.leaf_iter_vars if v is not part]
            rst.reorder(*[v for v in leaves if v.iter_type != "reduce"], part,
                        *[v for v in leaves if v.iter_type == "reduce"])
        st.thread_predicate = {tag: 0}
    return sch


def _fuse_thread_reductions(sch: Schedule, st: Stage) -> None:
    """Several reduction loops of ``st`` bound to different ``threadIdx`` indices (TVM's
    ``test_crossthread_reduction2``: ``k0.outer`` on ``threadIdx.x``, ``k1.outer`` on
    ``threadIdx.y``) become one: the loops are moved outermost among the reduction loops
    (any order of a commutative, associative reduction sums the same terms), fused, and
    the fused loop is bound to the first of their indices, so the block runs their product
    of threads along that index. Changes nothing for one bound reduction loop.

    Raises
    ------
    ScheduleError
        When one of the indices also binds a spatial loop of the stage, or a stage is
        computed at one of the loops.
    """
    bound = [(iv, k) for iv, k in st.annotations.items()
             if _on_thread(k) and iv.iter_type == "reduce"]
    if len(bound) < 2:
        return
    names = ", ".join(f"{iv.name!r} on {k.value!r}" for iv, k in bound)
    tags = {k for _, k in bound}
    if len(tags) < len(bound):
        fail("bind", f"stage {st.name!r} binds the reduction loops {names}",
             "each reduction loop on its own thread index")
    _check_combiner(st, st.op.body[0].combiner, "bind")
    for iv, k in st.annotations.items():
        if iv.iter_type != "reduce" and k in tags:
            fail("bind", f"stage {st.name!r} binds the reduction loops {names} and its "
                 f"spatial loop {iv.name!r} to {k.value!r}", "the thread indices of a "
                 "cross-thread reduction over several loops used by those loops only")
    for other in sch.stages:
        if other.attach_stage is st and any(other.attach_ivar is iv for iv, _ in bound):
            fail("compute_at", f"stage {other.name!r} is computed at "
                 f"{other.attach_ivar.name!r} of {st.name!r}, one of the reduction loops "
                 f"{names}", "compute_at a loop outside a cross-thread reduction over "
                 "several loops")
    bound.sort(key=lambda x: x[1].value)
    loops = [iv for iv, _ in bound]
    for iv in loops:
        del st.annotations[iv]
        st.thread_extents.pop(iv, None)
        st.bound_vars.pop(iv, None)
        st.bound_axes.pop(iv, None)
    leaves = list(st.leaf_iter_vars)
    first = min(k for k, v in enumerate(leaves) if v.iter_type == "reduce")
    rest = [v for v in leaves[first:] if not any(v is x for x in loops)]
    st.reorder(*leaves[:first], *loops, *rest)
    st.bind(st.fuse(*loops), thread_axis(bound[0][1].value))


def _thread_rows(st: Stage, spatial: list, iv, tag) -> list[tuple[int, int, ThreadTag]]:
    """The spatial loops of cross-thread reduction ``st`` bound to thread indices (TVM's
    tutorial binds the rows of a row sum to ``threadIdx.y``), as ``(root axis position,
    split factor or 0, thread tag)``: each must be innermost among the spatial loops, and
    a root axis or the inner loop of a constant split of one whose outer loop stays
    outside (maybe split again, e.g. into blocks and ``vthread``, :func:`_outside`), so
    that the shared partial stage can bind the same rows to the same index.

    Raises
    ------
    ScheduleError
        Naming the stage, the loop and the alternative (blockIdx on the spatial loops).
    """
    rows: list = []
    outer_seen = False
    for v in reversed(spatial):
        k = st.annotations.get(v)
        if not _on_thread(k):
            outer_seen = True
            continue
        why = None
        if outer_seen:
            why = "around a spatial loop that is not bound to a thread index"
        elif k == tag:
            why = f"to the same index {tag.value!r} as the reduction loop {iv.name!r}"
        elif _index(st.op.axis, v) >= 0:
            rows.append((_index(st.op.axis, v), 0, k))
            continue
        else:
            rel = next((r for r in st.relations if isinstance(r, Split) and r.inner is v),
                       None)
            if (rel is not None and _index(st.op.axis, rel.parent) >= 0 and rel.factor
                    and not rel.nparts and _outside(st, rel.outer, spatial)):
                rows.append((_index(st.op.axis, rel.parent), rel.factor, k))
                continue
            why = "and that loop is neither an axis nor the inner loop of a split of one"
        raise ScheduleError(format_error(
            "bind", f"stage {st.name!r} binds its spatial loop {v.name!r} to "
            f"{k.value!r} {why}, with its reduction loop {iv.name!r} on {tag.value!r}",
            "bind the innermost spatial loops of a cross-thread reduction to other thread "
            "indices (an axis, or the inner loop of a split), or bind its spatial loops to "
            "blockIdx only"))
    return rows[::-1]


def _outside(st: Stage, loop, spatial: list) -> bool:
    """Whether ``loop`` of ``st`` is one of the ``spatial`` loops, or split (again and
    again) into such loops only, none of them bound to a thread index: the outer loop of
    a thread row, whose iterations (blocks, virtual threads, serial steps) the row's
    threads do not span."""
    if _index(spatial, loop) >= 0:
        return not _on_thread(st.annotations.get(loop))
    rel = next((r for r in st.relations if isinstance(r, Split) and r.parent is loop), None)
    return rel is not None and all(_outside(st, x, spatial) for x in (rel.outer, rel.inner))


def _thread_loop_around(st: Stage):
    """The innermost loop bound to a ``threadIdx`` index that stage ``st`` is computed
    inside (through ``compute_at``, transitively), as ``(stage, loop, tag)``, or None."""
    at, ivar, seen = st.attach_stage, st.attach_ivar, set()
    while st.attach_type == "scope" and at is not None and id(at) not in seen:
        seen.add(id(at))
        leaves = at.leaf_iter_vars
        pos = _index(leaves, ivar)
        for v in reversed(leaves[:pos + 1] if pos >= 0 else []):
            if _on_thread(at.annotations.get(v)):
                return at, v, at.annotations[v]
        st, at, ivar = at, at.attach_stage, at.attach_ivar
    return None


def _index(seq, iv) -> int:
    """The position of ``iv`` in ``seq`` by identity (``==`` builds an expression), or -1."""
    return next((k for k, x in enumerate(seq) if x is iv), -1)


def _on_thread(annotation) -> bool:
    """Is a loop with this annotation bound to a ``threadIdx`` index?"""
    return isinstance(annotation, ThreadTag) and annotation.is_thread
