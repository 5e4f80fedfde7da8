"""``tensorize``: matching a loop nest against a tensor intrinsic, and its lowering.

The ``tensorize`` phase (after ``legality``, so dependences were computed on the full
nest) decides, per tensorized stage, with isl on the model built from the *current* loops
(after every split, reorder and fuse: no stale region, the bug class TVM's interval
matching had):

1. *Correspondence.* The intrinsic's axes, in order, are the stage's axes that have a loop
   under the tensorized loop ``var``, in order; its reduce axes likewise. Their numbers
   must agree.
2. *Domain.* Let ``O(d)`` be the values of the loops outside ``var`` (attach prefix
   included) at instance ``d``, ``R = O^-1`` the instances of one *tile* and ``lo(o)`` the
   lexicographic minimum of tile ``o``. The map ``F(o, u) = lo(o) + P u`` (``P`` places
   the intrinsic's coordinates ``u`` on the corresponding axes) applied to the intrinsic's
   box must give exactly ``R``: every tile is the intrinsic's box, translated (extents,
   full tiles, unit steps). Otherwise: the extent that differs, or a tile that is partial.
3. *Accesses.* For every read paired with the intrinsic's read of the same position in
   the body (bodies must agree node for node: operations, dtypes, combiner), and for the
   write, ``access(F(o, u)) - E g(u)`` must not depend on ``u`` (``g`` is the intrinsic's
   access, ``E`` embeds its tensor as the trailing dimensions of the stage's buffer): the
   access is the intrinsic's up to an offset ``base(o)``, the start of the operand region.
4. *Reduction.* With reduce loops outside ``var`` the intrinsic's ``reset`` (on ``init``)
   and ``update`` run. Otherwise the whole reduction is in the tile and ``body`` runs once
   per tile (TVM's rule) and ``init`` disappears; where the output is in memory (not a
   fragment, nor shared memory) each call first stores the identity over its output region
   (:func:`lower_tensor_call`), so that a body which accumulates (TVM's tutorial kernel)
   still computes the definition. An intrinsic with no body of its own (None, or its update's code) runs
   ``reset`` then ``update``; one with neither is refused (ScheduleError naming the stage,
   the loop, the intrinsic and the missing parts), never left uninitialised.

Then each matched statement's domain is cut down to the tile corners ``F(o, 0)``: the
loops under ``var`` are left with one iteration, and the code generated for a corner is a
:class:`~polytile.schedule.loop_ir.TensorCall` whose operand starts are the accesses isl
builds at the corner (minus the intrinsic's own access at ``u = 0``). Storage flattening
(:func:`lower_tensor_call`) binds the regions to :class:`polytile.tir.BufferView` objects
and calls the intrinsic's ``fcompute``; the reference interpreter runs the intrinsic's
compute definition on the same regions instead
(:func:`polytile.schedule.tensor_call_eval.eval_tensor_call`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polytile.errors import LoweringError, fail
from polytile.te import symbolic as sym
from polytile.te.expr import Binary, Const, Expr, Reduce, TensorRead, Var, child_fields
from polytile.te.reduction import accumulation_dtype

from . import isl_util as iu
from polytile.te.tensor_intrin import EXTERN_KEY

from .kinds import FRAGMENT_SCOPES, fragment_tile
from .loop_ir import Buffer, TensorCall, seq
from .polymodel import Model, PolyStmt, StagePlan
from .relations import Cyclic, Fuse, Singleton, Split, Transform


@dataclass(eq=False)
class Operand:
    """One operand of the intrinsic at one statement: the access key of the statement
    (``"w"`` or a read node's id, ``None`` for inputs of ``reset``), the intrinsic's
    tensor, and its access at ``u = 0`` (subtracted from the corner's access)."""

    key: object
    tensor: object
    buffer: Buffer
    origin: tuple
    strides: tuple


@dataclass(eq=False)
class Tensorized:
    """What the ``tensorize`` phase decided for one stage."""

    plan: StagePlan
    position: int
    intrin: object
    parts: dict = field(default_factory=dict)      # statement name -> part
    operands: dict = field(default_factory=dict)   # statement name -> [Operand]


# ----------------------------------------------------------------------------- the phase
def apply_tensorize(model: Model) -> None:
    """Match every tensorized stage of ``model`` and cut its statements to tile corners
    (see the module docstring). Sets ``plan.tensorize``.

    Raises
    ------
    ScheduleError
        Naming the stage, the tensorized loop and what differs.
    """
    for p in model.plans:
        ext = p.stage.op.attrs.get(EXTERN_KEY)
        if ext is not None:
            _apply(model, p, _extern_stage(p, ext))
        elif p.stage.tensorized is not None:
            _apply(model, p, p.stage.tensorized)


def _extern_stage(p: StagePlan, intrin) -> tuple:
    """A ``te.extern`` stage is one call of its code over the whole output."""
    st = p.stage
    used = [name for name, done in (
        ("compute_at", p.attach is not None), ("tensorize", st.tensorized is not None),
        ("split/fuse", bool(st.relations)),
        (", ".join(sorted({getattr(k, "primitive", "bind") for k in st.annotations.values()})),
         bool(st.annotations))) if done]
    if used:
        fail(used[0], f"stage {p.name!r} is a te.extern (external code): it has no loops "
             "to split, reorder, annotate, tensorize or compute at another stage",
             "a te.extern stage at root, unscheduled")
    return p.leaves[0], intrin


def _apply(model: Model, p: StagePlan, spec: tuple) -> None:
    iv, intrin = spec
    where = f"stage {p.name!r} at loop {iv.name!r}"
    if not any(v is iv for v in p.leaves):
        fail("tensorize", f"loop {iv.name!r} of stage {p.name!r} is no longer a loop (it was "
             "split or fused after tensorize)", "tensorize a current loop, after the other "
             "primitives")
    if len(p.stage.op.outputs) > 1 and intrin.op is not p.stage.op:   # (a te.extern has any)
        fail("tensorize", f"{where}: the stage has {len(p.stage.op.outputs)} outputs",
             "a stage of one output, as the intrinsic's")
    q = next(k for k, v in enumerate(p.leaves) if v is iv)
    inner = p.leaves[q:]
    for v in inner:
        ann = p.stage.annotations.get(v)
        if ann is not None:
            fail("tensorize", f"loop {v.name!r} under the tensorized loop of {where} is "
                 f"annotated ({getattr(ann, 'value', ann)})", "no annotation inside the "
                 "region an intrinsic computes")
    for other in model.plans:
        if other.attach is not None and other.attach[0] is p and other.attach[1] >= q:
            fail("tensorize", f"stage {other.name!r} is computed at "
                 f"{p.leaves[other.attach[1]].name!r}, inside the tensorized region of "
                 f"{where}", "compute it at a loop outside the tensorized one")
    body, ibody = p.body, intrin.op.body[0]
    if p.accumulates_wide and (not isinstance(ibody, Reduce) or
                               accumulation_dtype(ibody) != accumulation_dtype(body)):
        fail("tensorize", f"{where}: the stage accumulates in {accumulation_dtype(body)} "
             f"but intrinsic {intrin.name!r} does not", "the intrinsic's accumulation",
             hint="sum in the wide dtype (te.sum(x.astype('float32')...)) and cast after")
    if isinstance(body, Reduce) and body.condition is not None:
        fail("tensorize", f"{where}: the reduction has a where= condition",
             "an unconditional reduction")
    pairs: list = []
    _match_expr(body, ibody, pairs, where, intrin)
    # 1. correspondence of axes
    covered = _covered_roots(p.stage, inner)
    op = p.stage.op
    sp = [k for k, a in enumerate(op.axis) if a in covered]
    rd = [k for k, a in enumerate(op.reduce_axis) if a in covered]
    names = ", ".join(repr(v.name) for v in inner)
    iop = intrin.op
    if len(sp) != len(iop.axis):
        fail("tensorize", f"{where}: the loops under it ({names}) run {len(sp)} axes of the "
             f"stage ({', '.join(repr(op.axis[k].var.name) for k in sp) or 'none'}), but "
             f"intrinsic {intrin.name!r} has {len(iop.axis)} axes "
             f"({', '.join(repr(a.var.name) for a in iop.axis)})",
             "the same number of axes under the tensorized loop")
    if len(rd) != len(iop.reduce_axis):
        have = ", ".join(repr(op.reduce_axis[k].var.name) for k in rd) or "none"
        want = ", ".join(f"{a.var.name!r} (extent {a.dom.extent})" for a in iop.reduce_axis)
        fail("tensorize", f"{where}: missing reduce axis: intrinsic {intrin.name!r} reduces "
             f"over {want or 'nothing'}, the loops under it ({names}) reduce over {have}",
             "the intrinsic's reduce axes under the tensorized loop")
    outer_reduce = [v.name for v in p.leaves[:q] if v.iter_type == "reduce"]
    tz = Tensorized(p, q, intrin)
    main = p.main_stmt()
    if p.is_reduction and outer_reduce:
        for part in ("reset", "update"):
            if part not in intrin.parts:
                fail("tensorize", f"{where}: reduce loop(s) {outer_reduce} are outside the "
                     f"tensorized region, so intrinsic {intrin.name!r} needs a {part!r} part",
                     "fcompute returning (body, reset, update), or every reduce loop under "
                     "the tensorized one")
        _reset_update(model, p, main, tz, sp, rd, where, pairs)
    elif p.is_reduction and _full_part(intrin) != "body":
        # the whole reduction is in the tile but the intrinsic has no body of its own
        # (None, or the update's own code, TVM's tutorial kernel): reset then one update
        # compute the same
        if not {"reset", "update"} <= set(intrin.parts):
            missing = [x for x in ("body", "reset", "update") if x not in intrin.parts]
            fail("tensorize", f"{where}: the whole reduction (reduce axes "
                 f"{', '.join(repr(op.reduce_axis[k].var.name) for k in rd)}) is inside the "
                 f"tensorized region, so intrinsic {intrin.name!r} needs a 'body' part (or "
                 f"'reset' and 'update'); fcompute gives no {', '.join(map(repr, missing))}",
                 "fcompute returning a body, or (body, reset, update)")
        _reset_update(model, p, main, tz, sp, rd, where, pairs)
    else:
        _match_stmt(model, p, main, tz, "body", sp, rd, where, pairs)
        for st in p.stmts:
            if st is not main:   # init: the body computes the whole reduction
                st.domain = st.exact = st.domain.subtract(st.domain)
                st.guard = None
    p.tensorize = tz


def _reset_update(model: Model, p: StagePlan, main: PolyStmt, tz: Tensorized, sp: list,
                  rd: list, where: str, pairs: list) -> None:
    """``init`` becomes the intrinsic's ``reset``, the update its ``update``."""
    _match_stmt(model, p, p.stmts[0], tz, "reset", sp, [], where, pairs)
    _match_stmt(model, p, main, tz, "update", sp, rd, where, pairs)
    for st in p.stmts[2:]:   # round: each call of the intrinsic rounds its output
        st.domain = st.exact = st.domain.subtract(st.domain)
        st.guard = None


def _full_part(intrin) -> str | None:
    """The part that runs a whole reduction inside one tile: ``"body"``, unless
    ``fcompute`` gives none, or gives as body the very code of its update next to a
    ``reset`` (TVM's tutorial declares ``gemv_update`` as both), then ``None``."""
    if "body" not in intrin.parts:
        return None
    if {"reset", "update"} <= set(intrin.parts):
        from polytile.tir import probe_statements   # tir builds on the loop IR

        stmts = probe_statements(intrin)
        if str(stmts["body"]) == str(stmts["update"]):
            return None
    return "body"


def _covered_roots(stage, inner: list) -> set:
    """Root axes (``IterVar``) from which some loop of ``inner`` derives."""
    parents: dict = {}
    for rel in stage.relations:
        if isinstance(rel, (Split, Cyclic)):
            parents[rel.outer] = parents[rel.inner] = [rel.parent]
        elif isinstance(rel, Fuse):
            parents[rel.fused] = [rel.outer, rel.inner]
        elif isinstance(rel, Singleton):
            parents[rel.iv] = []
        elif isinstance(rel, Transform):
            for c in rel.children:
                parents[c] = list(rel.parents)
    out: set = set()
    todo = list(inner)
    while todo:
        v = todo.pop()
        if v in parents:
            todo += parents[v]
        else:
            out.add(v)
    return out


# ------------------------------------------------------------------- the body, node by node
def _match_expr(a: Expr, b: Expr, pairs: list, where: str, intrin) -> None:
    """``a`` (the stage's body) and ``b`` (the intrinsic's) agree node for node; collects
    the pairs of reads."""
    def differ(what: str):
        fail("tensorize", f"{where}: {what}", f"the computation of intrinsic "
             f"{intrin.name!r}", Stage=str(a), Intrinsic=str(b))

    if type(a) is not type(b):
        differ(f"the body computes {a} where the intrinsic computes {b}")
    if a.dtype != b.dtype:
        differ(f"dtype {a.dtype} of {a} differs from the intrinsic's {b.dtype} ({b})")
    if isinstance(a, TensorRead):
        if a.tensor.dtype != b.tensor.dtype:
            differ(f"dtype {a.tensor.dtype} of {a.tensor.name!r} differs from "
                   f"{b.tensor.dtype} of the intrinsic's {b.tensor.name!r}")
        pairs.append((a, b))
        return
    if isinstance(a, Const):
        if a.value != b.value:
            differ(f"constant {a} differs from the intrinsic's {b}")
        return
    if isinstance(a, Var):
        differ(f"the body uses variable {a.name!r} outside a tensor index")
    if isinstance(a, Reduce):
        if a.combiner.name != b.combiner.name:
            differ(f"combiner {a.combiner.name!r} differs from the intrinsic's "
                   f"{b.combiner.name!r}")
        if a.init is not None or b.init is not None or b.condition is not None:
            differ("a reduction with init= or where= is not matched")
        _match_expr(a.source, b.source, pairs, where, intrin)
        return
    for f in ("op", "name"):
        if getattr(a, f, None) != getattr(b, f, None):
            differ(f"{a} differs from the intrinsic's {b}")
    for f in child_fields(a):
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, tuple):
            if len(x) != len(y):
                differ(f"{a} differs from the intrinsic's {b}")
            for xx, yy in zip(x, y):
                _match_expr(xx, yy, pairs, where, intrin)
        elif x is not None or y is not None:
            if x is None or y is None:
                differ(f"{a} differs from the intrinsic's {b}")
            _match_expr(x, y, pairs, where, intrin)


# --------------------------------------------------------------------------------- isl
def row_major(shape: tuple) -> tuple:
    """The element strides of a row-major array of ``shape``."""
    out, s = [], 1
    for e in reversed(shape):
        out.append(s)
        s *= e
    return tuple(reversed(out))


def _match_stmt(model: Model, p: StagePlan, st: PolyStmt, tz: Tensorized, part: str,
                sp: list, rd: list, where: str, pairs: list = ()) -> None:
    intrin = tz.intrin
    iop = intrin.op
    q = tz.position
    m = p.prefix_len
    na = len(p.axis_vars)
    loops = p.stmt_loops(st.kind)
    outer = [k for k in loops if k < q]
    o_exprs = st.dims[:m] + [f"({p.leaf_aff[p.leaves[k]]})" for k in outer]
    onames = [f"o{k}" for k in range(len(o_exprs))]
    iaxes = list(iop.axis) + (list(iop.reduce_axis) if part != "reset" else [])
    unames = [f"u{k}" for k in range(len(iaxes))]
    place = ["0"] * len(st.dims)
    for k, j in enumerate(sp):
        place[m + j] = unames[k]
    if part != "reset":
        for k, j in enumerate(rd):
            place[m + na + j] = unames[len(iop.axis) + k]
    ot, ut = iu.tuple_str("O", onames), iu.tuple_str("U", unames)
    R = iu.Map(f"{{ {st.tuple()} -> O[{', '.join(o_exprs)}] }}").intersect_domain(
        st.exact).reverse()
    lo = R.lexmin_pw_multi_aff()
    proj = iu.PwMultiAff(f"{{ [{ot} -> {ut}] -> {ot} }}")
    F = lo.pullback_pw_multi_aff(proj).add(
        iu.PwMultiAff(f"{{ [{ot} -> {ut}] -> {st.name}[{', '.join(place)}] }}"))
    ubox = iu.Set(f"{{ {ut} : {iu.box_str(unames, [(0, a.dom.extent) for a in iaxes])} }}")
    J = isl.Map.from_domain_and_range(R.domain(), ubox).wrap()
    Fm = isl.Map.from_pw_multi_aff(F).intersect_domain(J)
    C = Fm.curry().range_factor_range()
    if not C.is_equal(R):
        _explain_domain(p, st, R, C, tz, part, sp, rd, outer, where)
    # 3. accesses
    names_u = {a.var: u for a, u in zip(iaxes, unames)}
    ops: list[Operand] = []
    reads = {id(b): a for a, b in pairs} if part != "reset" else {}
    seen: dict = {}
    for t in intrin.inputs:
        ibs = [b for a, b in pairs if b.tensor is t]
        if part == "reset" or not ibs:
            buf = _input_buffer(model, p, pairs, t)
            ops.append(Operand(None, t, buf, (0,) * len(buf.shape), row_major(buf.shape)[
                len(buf.shape) - t.ndim:]))
            continue
        for b in ibs:
            a = reads[id(b)]
            if id(a) not in st.accesses:
                fail("tensorize", f"{where}: the read {a} is not affine",
                     "affine reads in a tensorized stage")
            buf, pma = st.accesses[id(a)]
            delta, origin = _offset(F, J, pma, b.indices, names_u, buf, t, ot, ut, a, b, where,
                                    intrin)
            if t in seen and not seen[t].is_equal(delta):
                fail("tensorize", f"{where}: intrinsic {intrin.name!r} reads {t.name!r} "
                     "twice, and the stage's reads are not at one region",
                     "one region per operand")
            seen[t] = delta
        ops.append(Operand(id(a), t, buf, origin, _strides(buf, t, where, intrin)))
    out = intrin.output
    buf, pma = st.accesses["w"]
    wb = TensorRead(out.dtype, out, tuple(a.var for a in iop.axis))
    _, origin = _offset(F, J, pma, wb.indices, names_u, buf, out, ot, ut,
                        f"{p.name}[...] (the write)", wb, where, intrin)
    ops.append(Operand("w", out, buf, origin, _strides(buf, out, where, intrin)))
    for k, t in enumerate(intrin.outputs[1:], 1):
        # the other outputs of a te.extern of several dtypes: stored at the same element
        ob = p.outs[k]
        ops.append(Operand(("w", k), t, ob, origin, _strides(ob, t, where, intrin)))
    corners = Fm.intersect_domain(J.intersect(isl.Set(
        f"{{ [{ot} -> {ut}] : {' and '.join(f'{u} = 0' for u in unames) or '1 = 1'} }}"))).range()
    st.exact = st.exact.intersect(corners)
    st.domain = st.exact
    st.guard = None
    tz.parts[st.name] = part
    tz.operands[st.name] = ops


def _input_buffer(model: Model, p: StagePlan, pairs: list, t) -> Buffer:
    for a, b in pairs:
        if b.tensor is t:
            main = p.main_stmt()
            if id(a) in main.accesses:
                return main.accesses[id(a)][0]
            return model.buffer_of(a.tensor)
    raise LoweringError(f"tensorize: intrinsic input {t.name!r} is never read")


def _operand_fail(intrin, t, buf: Buffer, where: str, what: str, expected: str,
                  hint: str | None = None, short: str = ""):
    """Refuse the region of ``buf`` as operand ``t`` of ``intrin``: ``what`` is wrong
    (``short``: the same in a few words). An intrinsic that documents how it reads ``t``
    (``TensorIntrin.layouts``) gets that as the cause and its fix as the hint."""
    if t.name in intrin.layouts:
        reads, fix = intrin.layouts[t.name]
        fail("tensorize", f"{where}: intrinsic {intrin.name!r} reads operand {t.name!r} "
             f"{reads}, but the stage's {buf.name!r} is in another layout ({short})",
             f"{buf.name!r} in the layout the intrinsic reads", hint=fix)
    fail("tensorize", f"{where}: {what}", expected, hint=hint)


def _strides(buf: Buffer, t, where: str, intrin) -> tuple:
    if t.ndim > len(buf.shape):
        _operand_fail(intrin, t, buf, where, f"operand {t.name!r} of intrinsic "
                      f"{intrin.name!r} has {t.ndim} dimensions, buffer {buf.name!r} only "
                      f"{len(buf.shape)}", "an operand of at most the buffer's rank",
                      short=f"{len(buf.shape)} dimensions, the intrinsic's {t.ndim}")
    strides = row_major(buf.shape)[len(buf.shape) - t.ndim:]
    decl = intrin.binds.get(t)
    declared = decl.strides if decl is not None else None
    if buf.scope in FRAGMENT_SCOPES:
        # an array of tiles (targets/cuda/tensor_core.py, targets/hip/mfma.py; tf32
        # operands 16x8 / 8x16, kinds.fragment_tile): any row-major shape whose rows hold
        # whole tiles, the region one tile
        th, tw = fragment_tile(buf.scope, buf.dtype, buf.shape[-1])
        if len(buf.shape) < 2 or buf.shape[-1] % tw or tuple(t.shape) != (th, tw):
            fail("tensorize", f"{where}: fragment {buf.name!r} ({buf.scope}) has shape "
                 f"{list(buf.shape)} and operand {t.name!r} of intrinsic {intrin.name!r} "
                 f"the shape {list(t.shape)}",
                 f"rows of whole {th}x{tw} tiles, one tile per intrinsic operand")
        return strides
    if declared is None:
        compact = row_major(t.shape)
        # symbolic extents (a te.extern of symbolic shapes): strides compared as
        # expressions of the sizes
        if any(not sym.same(s, c) for s, c, e in zip(strides, compact, t.shape)
               if not sym.is_static(e) or sym.static(e) > 1):
            _operand_fail(intrin, t, buf, where, f"operand {t.name!r} of intrinsic "
                          f"{intrin.name!r} is declared compact (strides {list(compact)}), "
                          f"but its region of {buf.name!r} has strides {list(strides)}",
                          "a compact region, or declared strides",
                          hint=f"binds={{{t.name}: polytile.tir.decl_buffer({t.name}.shape, "
                               f"{t.dtype!r}, strides=[te.var('s'), 1])}}",
                          short=f"strides {list(strides)}, not compact")
    else:
        for k, (s, d) in enumerate(zip(strides, declared)):
            if isinstance(d, int) and d != s and t.shape[k] > 1:
                _operand_fail(intrin, t, buf, where, f"operand {t.name!r} of intrinsic "
                              f"{intrin.name!r} declares stride {d} in dimension {k}, but "
                              f"its region of {buf.name!r} has stride {s}",
                              "the declared strides, or te.var",
                              short=f"stride {s} in dimension {k}, declared {d}")
    return strides


def _offset(F, J, pma, iidx, names_u, buf, t, ot, ut, a, b, where, intrin):
    """``access(F(o, u)) - E g(u)`` as a map ``o -> offset`` (refused unless single valued)
    and ``g(0)`` embedded in the buffer's rank."""
    rank = len(buf.shape)
    gs = [iu.affine_str(i, names_u) for i in iidx]
    if any(g is None for g in gs):
        fail("tensorize", f"intrinsic {intrin.name!r}: the access {b} is not affine",
             "affine accesses in the intrinsic's compute")
    if t.ndim > rank:
        _strides(buf, t, where, intrin)
    g = ["0"] * (rank - t.ndim) + gs
    comp = iu.name_range(pma.pullback_pw_multi_aff(F), "B")
    G = iu.PwMultiAff(f"{{ [{ot} -> {ut}] -> B[{', '.join(g)}] }}")
    dm = isl.Map.from_pw_multi_aff(comp.sub(G)).intersect_domain(J).curry().range_factor_range()
    if not dm.is_single_valued():
        _operand_fail(intrin, t, buf, where, f"access differs: the stage's {a} does not "
                      f"follow the intrinsic's {b} up to an offset (each of the intrinsic's "
                      f"indices must move the same dimension of {buf.name!r}, the trailing "
                      "ones, with step 1)", "accesses equal to the intrinsic's plus an "
                      "offset that depends only on the loops outside the tensorized one",
                      hint="reorder the stage's axes or declare the intrinsic with the "
                           "operand transposed", short=f"it reads {a} where the intrinsic "
                                                       f"reads {b}")
    zero = iu.Set(f"{{ {ut} : {' and '.join(f'{u} = 0' for u in names_u.values()) or '1 = 1'} }}")
    g0 = iu.Map(f"{{ {ut} -> B[{', '.join(g)}] }}").intersect_domain(zero).range()
    origin = tuple(g0.plain_get_val_if_fixed(isl.dim_type.set, k).to_python()
                   for k in range(rank))
    return dm, origin


def _explain_domain(p, st, R, C, tz, part, sp, rd, outer, where) -> None:
    intrin = tz.intrin
    iop = intrin.op
    m = p.prefix_len
    na = len(p.axis_vars)
    same = R.reverse().apply_range(R).deltas()
    pairs = [(m + j, a, p.stage.op.axis[j]) for j, a in zip(sp, iop.axis)]
    if part != "reset":
        pairs += [(m + na + j, a, p.stage.op.reduce_axis[j]) for j, a in zip(rd, iop.reduce_axis)]
    for dim, ia, sa in pairs:
        top = same.dim_max_val(dim)
        ext = top.to_python() + 1 if top.is_int() else None
        if ext != ia.dom.extent:
            fail("tensorize", f"{where}: extent differs: the loops under it run axis "
                 f"{sa.var.name!r} of the stage over {ext} values per tile, intrinsic "
                 f"{intrin.name!r} has extent {ia.dom.extent} for {ia.var.name!r}",
                 "loops under the tensorized one that cover the intrinsic's extents",
                 hint="split by the intrinsic's extent and tensorize the inner loop")
    bad = R.subtract(C).domain().union(C.subtract(R).domain())
    at = ""
    if not bad.is_empty():
        pt = iu.point_coords(bad.sample_point(), bad.dim(isl.dim_type.set))
        names = [f"p{k}" for k in range(m)] + [p.leaves[k].name for k in outer]
        at = " at " + ", ".join(f"{n}={v}" for n, v in zip(names, pt))
    fail("tensorize", f"{where}: the tile{at} is not the intrinsic's full box (a partial "
         "tile of a split whose factor does not divide the extent, or a strided loop)",
         "expected every tile to be the intrinsic's full box",
         hint="choose sizes that the split factors divide")


# ------------------------------------------------------------------ code: calls and views
def make_tensor_call(st: PolyStmt, idx: dict) -> TensorCall:
    """The :class:`TensorCall` of tile corner ``st`` given isl's index expressions
    ``idx`` of its accesses (see :func:`polytile.schedule.astgen.make_store`)."""
    tz = st.plan.tensorize
    ops = tz.operands[st.name]
    indices: list = []
    for o in ops:
        if o.key is None:
            indices += [Const("int64", 0)] * len(o.buffer.shape)
            continue
        for e, g in zip(idx["w" if isinstance(o.key, tuple) else o.key], o.origin):
            indices.append(e if g == 0 else Binary("int64", "sub", e, Const("int64", g)))
    return TensorCall(tz.intrin, tz.parts[st.name], tuple(o.buffer for o in ops),
                      tuple(tuple(o.tensor.shape) for o in ops),
                      tuple(o.strides for o in ops), tuple(indices), seq())


def lower_tensor_call(s: TensorCall, flat: tuple) -> TensorCall:
    """``s`` with flat operand offsets ``flat`` and its code: the intrinsic's ``fcompute``
    called on :class:`polytile.tir.BufferView` objects of the regions."""
    from polytile.tir import BufferView, code_of   # polytile.tir builds on the loop IR

    intrin = s.intrin
    starts = s.operand_indices()
    views = [BufferView(b, shape, strides, off, name=t.name,
                        indices=ix if len(ix) == len(b.shape) else None)
             for b, shape, strides, off, t, ix in zip(
                 s.buffers, s.shapes, s.strides, flat,
                 list(intrin.inputs) + list(intrin.outputs), starts)]
    n = len(intrin.inputs)
    body = code_of(intrin, views[:n], views[n:], s.part)
    # not on fragments (no scalar address per element) nor on shared memory (a body run
    # by a warp together would race with every thread's fill)
    # nor on a te.extern: its outputs are its code's to write (its reduction body only
    # tells the schedule what is read)
    if (s.part == "body" and intrin.is_reduction and s.buffers[-1].scope not in FRAGMENT_SCOPES
            and not s.buffers[-1].scope.startswith("shared")
            and intrin.op.attrs.get(EXTERN_KEY) is not intrin):
        body = seq(_fill_identity(views[-1], intrin.op.body[0]), body)
    return TensorCall(intrin, s.part, s.buffers, s.shapes, s.strides, tuple(flat), body)


def _fill_identity(view, body: Reduce):
    """Store the identity of ``body``'s combiner over the region ``view``: before a
    ``body`` call, so that a body that accumulates into its output (``c[i] += ...``,
    TVM's tutorial ``gemv_update``, a common way to write one) starts from the identity
    rather than from uninitialised memory. A body that overwrites its output is unaffected;
    the cost is one store per output element per call."""
    from polytile.tir import ir_builder

    ident = body.combiner.identity
    ib = ir_builder.create()

    def nest(idx: tuple, dims: list):
        if not dims:
            ib.emit(view.vstore(idx, ident))
            return
        with ib.for_range(0, dims[0], name=f"fill{len(idx)}") as v:
            nest(idx + (v,), dims[1:])

    nest((), list(view.shape))
    return ib.get()
