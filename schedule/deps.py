"""Exact dependences and the legality of loop transformations.

Dependences are computed once per stage on *program order* (the stage's axes in
definition order, the reduction's ``init`` before its ``update`` loop, then ``round``),
memory-based and exact: read-after-write, write-after-write and write-after-read between
every pair of instances that touch one element. Only dependences inside one stage matter
for its loops: stages are pure functions of their inputs, producers run before consumers
by construction, and the buffers of attached stages are private to each iteration of
their attach loop (their accesses are indexed by the attach prefix here, which models
that privatisation).

Checks, each failing with a ``ScheduleError`` that names a concrete violating pair:

* every dependence stays lexicographically positive in the scheduled loop nest
  (reorder, fuse, split, init placement);
* a ``parallel`` or ``vectorize`` loop carries no dependence: among dependent instance
  pairs that agree on all outer loops, the loop's value is equal (distance 0).

Reference: Feautrier, "Dataflow analysis of array and scalar references" (1991); the isl
manual, "Dependence Analysis"; ``shared/isl/NOTES.md`` §3.1.
"""

from __future__ import annotations

import islpy as isl

from polytile.errors import ScheduleError, format_error
from polytile.te.algebra import reorder_violation

from . import isl_util as iu
from .kinds import LoopKind
from .polymodel import LoopNode, Model, PolyStmt, StagePlan


def stage_dependences(p: StagePlan) -> isl.UnionMap | None:
    """Memory-based RAW, WAW and WAR dependences among the statements of ``p``: every pair
    of instances that touch the same element, at least one writing, in program order
    (``None`` for a stage without reduction, whose instances write distinct elements and
    read only other tensors).

    Memory-based rather than value-based (last writer): a parallel or vector loop must
    not have two iterations touching one element, even when other writes lie between them
    in program order."""
    if not p.is_reduction:
        return _self_dependences(p)
    m = p.prefix_len
    na, nr = len(p.axis_vars), len(p.reduce_vars)
    init, upd = p.stmts[:2]
    pre = [f"p{k}" for k in range(m)]
    ax = [f"d{k}" for k in range(na)]
    red = [f"d{na + k}" for k in range(nr)]
    elem = ", ".join(pre + ax)
    zeros = ["0"] * nr
    # ``B`` stands for the element of the stage (its accumulator and its buffer, which are
    # indexed alike): ``round`` reads one and writes the other
    writes = [f"{st.tuple()} -> B[{elem}]" for st in p.stmts]
    reads = [f"{st.tuple()} -> B[{elem}]" for st in p.stmts[1:]]
    times = [f"{st.tuple()} -> [{', '.join(pre + ax + [str(k)] + (red if st is upd else zeros))}]"
             for k, st in enumerate(p.stmts)]
    w = iu.UnionMap(f"{{ {'; '.join(writes)} }}")
    r = iu.UnionMap(f"{{ {'; '.join(reads)} }}")
    order = iu.UnionMap(f"{{ {'; '.join(times)} }}")
    dom = iu.union_set(init.exact)
    for st in p.stmts[1:]:
        dom = dom.union(iu.union_set(st.exact))
    w, r, order = w.intersect_domain(dom), r.intersect_domain(dom), order.intersect_domain(dom)
    touch = w.apply_range(w.reverse()).union(w.apply_range(r.reverse())).union(
        r.apply_range(w.reverse()))
    return iu.coalesce(touch.intersect(order.lex_lt_union_map(order)))


def _self_dependences(p: StagePlan) -> isl.UnionMap | None:
    """RAW, WAR and WAW dependences of a stage that reads its own buffer (``te.scan``: row
    ``t`` reads earlier rows), in the program order of its definition (its axes,
    lexicographically); ``None`` for a stage that does not read itself. Each read counts
    only where its guard lets it run (the update rows of a scan, not the ``init`` rows)."""
    own = [rd for rd in p.reads if rd.source is p.stage]
    if not own:
        return None
    st = p.stmts[0]
    for rd in own:
        if rd.indices is None or rd.guard is None:
            raise ScheduleError(format_error(
                "lower", f"stage {p.name!r} reads its own earlier values at {rd.node}, an "
                f"index or guard polytile cannot analyse", "affine reads of the state, "
                "such as state[t - 1, i]"))
    dom = st.exact
    axis = isl.Map.from_pw_multi_aff(st.axis_map).intersect_domain(dom)
    w = isl.Map.from_pw_multi_aff(st.accesses["w"][1]).intersect_domain(dom)
    reads = None
    for rd in own:
        r = isl.Map.from_pw_multi_aff(st.accesses[id(rd.node)][1]).intersect_domain(dom)
        if rd.guard:
            names = p.own_names(st.kind)
            g = isl.Set(iu.pfx(f"{{ {iu.tuple_str('AX', names)} : {rd.guard} }}"))
            r = r.intersect_domain(axis.intersect_range(g).domain())
        reads = r if reads is None else reads.union(r)
    # every value read must be written at an earlier step of the first axis (a scan's
    # update reads earlier rows, as in TVM); a read of the current row or a later one
    # would see stale memory, or depend on the order of the spatial loops
    names = p.own_names(st.kind)
    primed = [f"{x}'" for x in names]
    before = isl.Map(f"{{ {iu.tuple_str('AX', names)} -> {iu.tuple_str('AX', primed)} : "
                     f"{primed[0]} < {names[0]} }}")
    earlier = axis.apply_range(before).apply_range(axis.reverse())
    late = reads.apply_range(w.reverse()).subtract(earlier)
    if not late.is_empty():
        pt = late.wrap().lexmin().sample_point()
        n_in = late.dim(isl.dim_type.in_)
        c = iu.point_coords(pt, n_in + late.dim(isl.dim_type.out))
        raise ScheduleError(format_error(
            "scan", f"stage {p.name!r} reads a value it has not computed yet: "
            f"{_describe(st, c[:n_in])} reads the element written by "
            f"{_describe(st, c[n_in:])}", "reads of earlier rows of the state only, such "
            "as state[t - 1, i]"))
    touch = w.apply_range(w.reverse()).union(w.apply_range(reads.reverse())).union(
        reads.apply_range(w.reverse()))
    return iu.coalesce(isl.UnionMap.from_map(touch.intersect(axis.lex_lt_map(axis))))


def _loop_maps(st: PolyStmt, chain: list) -> isl.Map:
    """``st``'s instances -> the values of the loops ``chain`` at them. A loop that does
    not run ``st`` (a ``vthread`` loop around a stage its virtual threads share, such as
    the shared partials of a cross-thread reduction) takes any value: the instance runs
    once for all its iterations, so it agrees with every one of them."""
    vals = [f"({n.stmts[st]})" if st in n.stmts else f"any{k}" for k, n in enumerate(chain)]
    return iu.Map(f"{{ {st.tuple()} -> [{', '.join(vals)}] }}")


def _describe(st: PolyStmt, coords: list[int]) -> str:
    p = st.plan
    names = [f"p{k}" for k in range(p.prefix_len)]
    names += [v.name for v in p.axis_vars]
    if st.kind == "update":
        names += [v.name for v in p.reduce_vars]
    inner = ", ".join(f"{n}={c}" for n, c in zip(names, coords))
    return f"{p.name}.{st.kind}[{inner}]"


def _pair(viol: isl.UnionMap, stmts: dict) -> str:
    maps: list = []
    viol.foreach_map(maps.append)
    m = sorted(maps, key=str)[0]
    src_name = m.get_tuple_name(isl.dim_type.in_)
    dst_name = m.get_tuple_name(isl.dim_type.out)
    n_in, n_out = m.dim(isl.dim_type.in_), m.dim(isl.dim_type.out)
    pt = m.wrap().sample_point()
    c = iu.point_coords(pt, n_in + n_out)
    return f"{_describe(stmts[src_name], c[:n_in])} -> {_describe(stmts[dst_name], c[n_in:])}"


def _carried(deps: isl.UnionMap, inside: list, outer: list, loop: LoopNode
             ) -> isl.UnionMap:
    """Dependences between statements ``inside`` the loop that agree on the ``outer`` loops
    but not on ``loop``."""
    same_outer = None
    same_all = None
    for a in inside:
        for b in inside:
            ma = _loop_maps(a, outer)
            mb = _loop_maps(b, outer)
            eq_o = ma.apply_range(mb.reverse())
            ma2 = _loop_maps(a, outer + [loop])
            mb2 = _loop_maps(b, outer + [loop])
            eq_a = ma2.apply_range(mb2.reverse())
            u_o, u_a = isl.UnionMap.from_map(eq_o), isl.UnionMap.from_map(eq_a)
            same_outer = u_o if same_outer is None else same_outer.union(u_o)
            same_all = u_a if same_all is None else same_all.union(u_a)
    return deps.intersect(same_outer).subtract(same_all)


def check_legality(model: Model) -> None:
    """Check every annotated loop and the loop order of every stage against exact
    dependences.

    Raises
    ------
    ScheduleError
        Naming the primitive, stage, loop and one violating pair of instances.
    """
    deps = {id(p): stage_dependences(p) for p in model.plans}
    stmts = model.stmts

    def walk(nodes, anc):
        for n in nodes:
            if not isinstance(n, LoopNode):
                continue
            d = deps[id(n.plan)]
            concurrent = n.annotation in (LoopKind.PARALLEL, LoopKind.VECTORIZED) or (
                n.binding is not None and n.binding.is_hardware)
            if d is not None and concurrent:
                inside = [st for st in n.stmts if st.plan is n.plan]
                viol = _carried(d, inside, anc, n)
                if not viol.is_empty():
                    prim = "bind" if n.binding else n.annotation.primitive
                    hint = ("a reduction axis can be bound to threadIdx (a cross-thread "
                            "reduction) but not to blockIdx; rfactor it first" if n.binding else
                            "reduction axes cannot run in parallel or as vector lanes; "
                            "parallelize a spatial axis, or rfactor the reduction")
                    if not n.plan.is_reduction:
                        hint = ("the rows of a te.scan read earlier rows: its scan axis is "
                                "serial; parallelize, vectorize or bind its spatial axes")
                    raise ScheduleError(format_error(
                        prim, f"loop {n.iter_var.name!r} of stage {n.plan.name!r} carries a "
                        f"dependence", "its iterations must be independent",
                        Violating_pair=_pair(viol, stmts), hint=hint))
            walk(n.children, anc + [n])

    walk(model.nest, [])
    _check_order(model, deps)


def _check_order(model: Model, deps: dict) -> None:
    """Every dependence must point forward in the scheduled nest (lexicographically)."""
    vec: dict = {}

    def walk(nodes, chain, seqpos):
        for k, n in enumerate(nodes):
            if isinstance(n, PolyStmt):
                vals = []
                for (pos, node) in zip(seqpos + [k], chain + [None]):
                    vals.append(str(pos))
                    if node is not None:
                        # a shared buffer does not depend on the thread loops it sits in
                        vals.append(f"({node.stmts[n]})" if n in node.stmts else "0")
                vec[n] = vals
            else:
                walk(n.children, chain + [n], seqpos + [k])

    walk(model.nest, [], [])
    for p in model.plans:
        d = deps[id(p)]
        if d is None:
            continue
        # dependences among update instances are those of a reduction whose fold is proven
        # not to depend on the order of its values (te.sum/max/min, any proven commutative
        # and associative combiner): any order of the updates computes the same value. A
        # user combiner such as Horner's `2 * x + y`, or one whose law cannot be proven,
        # keeps them, so reorder is checked.
        # a stage reading its own earlier values (te.scan) keeps all its dependences
        unordered = reorder_violation(p.body.combiner) if p.is_reduction else None
        if unordered is None and p.is_reduction:
            upd = p.stmts[1]
            other = iu.tuple_str(upd.name, [f"o{k}" for k in range(len(upd.dims))])
            d = d.subtract(iu.UnionMap(f"{{ {upd.tuple()} -> {other} }}"))
        width = max(len(vec[st]) for st in p.stmts)
        t = None
        for st in p.stmts:
            v = vec[st] + ["0"] * (width - len(vec[st]))
            m = iu.UnionMap(f"{{ {st.tuple()} -> [{', '.join(v)}] }}")
            t = m if t is None else t.union(m)
        timed = d.apply_domain(t).apply_range(t)
        sp = iu.Set(f"{{ [{', '.join(f't{k}' for k in range(width))}] }}").get_space()
        back = timed.intersect(isl.UnionMap.from_map(isl.Map.lex_ge(sp)))
        if not back.is_empty():
            bad = d.intersect(t.apply_range(isl.UnionMap.from_map(isl.Map.lex_ge(sp)))
                              .apply_range(t.reverse()))
            name = p.body.combiner.name if p.is_reduction else ""
            hint = ("a te.scan's rows read earlier rows: its scan axis must run in order"
                    if not p.is_reduction else None) if unordered is None else (
                f"the combiner {name!r} is order-dependent ({unordered}), so the reduction "
                f"loops must keep their order" if unordered.refuted else
                f"polytile cannot prove that the fold of the combiner {name!r} is "
                f"independent of the order of its values ({unordered}), so the reduction "
                f"loops must keep their order")
            raise ScheduleError(format_error(
                "reorder", f"the loop order of stage {p.name!r} runs a dependent instance "
                f"before its source", "every dependence must point forward",
                Violating_pair=_pair(bad, model.stmts), hint=hint))
