"""Assembly of the isl schedule tree from the loop nest of the model.

Each :class:`~polytile.schedule.model.LoopNode` becomes a one-member band whose partial
schedule gives, for every statement below it, that statement's value of the loop; a
``mark`` node named ``L<key>`` above the band lets code generation recognise the loop
(its stage, iteration variable and annotation). Siblings become a ``sequence``, which
fixes their order (statements without a sequence above them would be unordered).
Full tiles are separated from partial ones with the band ``isolate`` option where a
vectorized or unrolled loop below needs a constant extent (PPCG/Polly-style isolation).

A loop bound to a GPU block or thread index is not a band but a filter: the hardware
index is an isl parameter (``bx``, ``tx``, ...) and each statement keeps only the instances
whose loop value equals it (PPCG/Tensor Comprehensions-style mapping). A ``mark`` named
``A<plan index>`` wraps the code of each attached stage (barriers go around shared ones).
A loop bound to ``vthread`` is moved innermost: a band around each statement that depends
on it (TVM's virtual thread injection, which interleaves the virtual threads of a thread).

isl's AST generator is checked after the fact (``ast_check.py``); ``build_schedule`` also
builds the fallbacks used when it fails: every loop ``atomic``, simpler domains.
"""

from __future__ import annotations

import islpy as isl

from . import isl_util as iu
from .kinds import PARAM_SPACE, PARAMS, LoopKind, ThreadTag
from .polymodel import LoopNode, Model, PolyStmt
from .threads import restriction, roles

ATOMIC = isl.ast_loop_type.atomic
#: isl operations (about a million per second) allowed to find where full tiles start.
ISOLATION_OPERATIONS = 500_000


def build_schedule(model: Model, nodes: list | None = None, *, atomic: bool = False,
                   domains: dict | None = None, role_of: dict | None = None) -> isl.Schedule:
    """The isl schedule (tree form) of ``nodes`` (default: the whole program).

    Fallbacks for code that fails validation (``ast_check.py``): ``atomic`` generates every
    loop ``atomic`` (each statement instance in one loop, guards inside it) instead of
    isl's default, which may split a loop into several for different sets of statements;
    ``domains`` (statement name -> set) replaces the iteration domains of some statements
    (by simpler supersets, whose extra instances the code generator then guards off), and
    drops full-tile isolation, which was computed on the exact domains. ``role_of``: the
    thread roles of ``nodes`` when the caller has them (``threads.roles``)."""
    nodes = model.nest if nodes is None else nodes
    fallback = domains or {}
    filters: list = []
    if not any(_bound(n) for n in nodes):
        sched = _seq([_node(n, (), fallback, None) for n in nodes])
    else:
        # the statements' domains are intersected with the filters of the bound loops at
        # once, at the root: each intersection of a schedule's domain also simplifies
        # (gists) the whole subtree below, so one at every bound loop made isl walk the
        # kernel's tree once per loop bound to a hardware index (a third of the time of
        # building the AST of a tiled GEMM); the leaves start from universes
        sched = _seq([_node(n, (), fallback, filters) for n in nodes])
    only = None
    if model.padded:   # GPU: each statement on its threads, the others idle (threads.py)
        only = restriction(roles(nodes) if role_of is None else role_of)
    if filters:
        names = [st.tuple() for n in nodes for st in stmts_below(n)]
        dom = None
        for n in nodes:
            for st in stmts_below(n):
                d = iu.union_set(fallback.get(st.name, st.domain))
                dom = d if dom is None else dom.union(d)
        # every filter of a statement in one conjunction: one set parsed and intersected
        # instead of one per bound loop
        conds: dict = {}
        for f in filters:   # inner loops first, as the intersections were made before
            for t, c in f.items():
                conds.setdefault(t, []).append(f"({c})")
        pieces = [f"{t} : {' and '.join(conds[t])}" if t in conds else t for t in names]
        dom = dom.intersect(iu.UnionSet(f"{PARAM_SPACE} -> {{ {'; '.join(pieces)} }}"))
        if only is not None:
            dom = dom.intersect(only)
            only = None
        sched = sched.intersect_domain(dom)
    if only is not None:
        sched = sched.intersect_domain(only)
    options: dict = {}
    choices: dict = {}

    def collect(n, anc):
        if isinstance(n, LoopNode):
            if n.binding is None:
                iso = isolate_option(n, anc, choices)
                if iso is not None:
                    options[f"L{n.key}"] = iso
                anc = anc + [n]
            for c in n.children:
                collect(c, anc)

    if domains is None:
        for n in nodes:
            collect(n, [])
    if options:
        # options refer to the outer schedule dimensions ("anchored"), so they can only be
        # set once the whole tree exists
        sched = _set_options(sched.get_root(), options).get_schedule()
    if atomic:   # after the options, which would replace the loop types
        sched = _set_atomic(sched.get_root()).get_schedule()
    return sched


def _banded(node: isl.ScheduleNode) -> bool:
    """Whether every statement below ``node`` has a band between it and ``node``."""
    t = node.get_type()
    if t == isl.schedule_node_type.band:
        return True
    if t == isl.schedule_node_type.leaf:
        return False
    return all(_banded(node.child(k)) for k in range(node.n_children()))


def _set_options(node: isl.ScheduleNode, options: dict) -> isl.ScheduleNode:
    if node.get_type() == isl.schedule_node_type.mark:
        name = node.mark_get_id().get_name()
        if name in options:
            node = node.child(0).band_set_ast_build_options(options[name]).parent()
    for k in range(node.n_children()):
        node = _set_options(node.child(k), options).parent()
    return node


def _set_atomic(node: isl.ScheduleNode) -> isl.ScheduleNode:
    if node.get_type() == isl.schedule_node_type.band:
        for k in range(node.band_n_member()):
            node = node.band_member_set_ast_loop_type(k, ATOMIC)
            node = node.band_member_set_isolate_ast_loop_type(k, ATOMIC)
    for k in range(node.n_children()):
        node = _set_atomic(node.child(k)).parent()
    return node


def _seq(parts: list[isl.Schedule]) -> isl.Schedule:
    out = parts[0]
    for p in parts[1:]:
        out = out.sequence(p)
    return out


def _bound(n) -> bool:
    """Whether a loop of the nest node ``n``'s subtree is bound to a hardware index."""
    return isinstance(n, LoopNode) and (n.binding in PARAMS or any(_bound(c)
                                                                   for c in n.children))


def _node(n, vthreads: tuple, domains: dict, filters: list | None) -> isl.Schedule:
    """The schedule of nest node ``n``; ``vthreads`` are the enclosing ``vthread`` loops,
    whose bands go innermost, around each statement that depends on them. ``filters``:
    ``None`` where no loop is bound to a hardware index (the leaves then have their
    domains), else a list to which each bound loop appends its filter, ``{statement
    tuple: condition}``, the leaves having universe domains (``build_schedule``
    intersects them with the domains and every filter at once)."""
    if isinstance(n, PolyStmt):
        dom = iu.union_set(domains.get(n.name, n.domain))
        if filters is not None:
            dom = dom.universe()
        sched = isl.Schedule.from_domain(dom)
        for v in reversed(vthreads):
            if n in v.stmts:
                sched = _band(sched, v, {n: v.stmts[n]})
        return sched
    if n.binding is ThreadTag.VTHREAD:
        # TVM's virtual thread injection: the loop runs interleaved inside the thread, as
        # an unrolled loop around each statement that depends on it; statements that do
        # not (shared copies) run once for all virtual threads
        vthreads = vthreads + (n,)
    elif vthreads and n.annotation is LoopKind.VECTORIZED:
        # the virtual threads go around a vectorized loop, not inside it: each virtual
        # thread's lanes then stay one vector access (a 16-byte store of a register tile's
        # row) instead of a vector loop over several statements, which is none; legal as
        # innermost is, the virtual threads being independent
        sched = _node(n, (), domains, filters)
        for v in reversed(vthreads):
            below = {st: v.stmts[st] for st in stmts_below(n) if st in v.stmts}
            if below:
                sched = _band(sched, v, below)
        return sched
    kids = []
    for c in n.children:
        sc = _node(c, vthreads, domains, filters)
        if c.plan is not n.plan:   # the code of a stage attached here
            sc = sc.get_root().child(0).insert_mark(isl.Id(f"A{c.plan.index}")).get_schedule()
        kids.append(sc)
    child = _seq(kids)
    tag = n.binding
    if tag is ThreadTag.VTHREAD:
        return child
    if tag in PARAMS:
        pair = n.index_pair
        # a symbolic split bound to (blockIdx.d, threadIdx.d): its value is the block's
        # offset (the parameter of blockIdx.d, see StagePlan.index_pair) plus the thread's
        index = f"{PARAMS[pair[0]]} + {PARAMS[tag]}" if pair else PARAMS[tag]
        # the instances of this thread or block: intersected by build_schedule
        filters.append({st.tuple(): f"({n.stmts[st]}) = {index}"
                        for st in stmts_below(n) if st in n.stmts})
        if len(n.stmts) == len(stmts_below(n)):
            # a band of the bound value above the filter, as for a loop: isl then finds
            # where the instances are from the loop's range, not by eliminating every
            # dimension of the domain against the parameters (about 100 s for a fused
            # 3-D loop split and bound, fuzz seed cuda 89); the loop becomes one
            # assignment of the index
            top = child.get_root().child(0)
            if top.get_type() != isl.schedule_node_type.band and _banded(top):
                # every statement below has a band of its own: this band, whose value is
                # the hardware index once the filter holds, would order nothing, and isl
                # analyses every statement below once per band member (about half of the
                # AST generation of tutorial 04's register-tiled SGEMM)
                return child
            pieces = "; ".join(f"{st.tuple()} -> [({aff})]" for st, aff in n.stmts.items())
            band = isl.MultiUnionPwAff(iu.pfx_list(f"[{{ {pieces} }}]"))
            if top.get_type() == isl.schedule_node_type.band:
                # the band of a bound loop directly inside (the only unmarked bands): one
                # band of both values instead of two nested bands, the same order of
                # instances; isl analyses every statement below once per band level
                # (about 30 ms less of AST generation for tutorial 04's SGEMM)
                inner = top.band_get_partial_schedule()
                band = band.flat_range_product(inner)
                child = top.delete().get_schedule()
            child = child.insert_partial_schedule(band)
        return child
    return _band(child, n, n.stmts)


def _band(child: isl.Schedule, n: LoopNode, values: dict) -> isl.Schedule:
    """``child`` below a one-member band of loop ``n`` (statement -> its value), marked
    ``L<key>``."""
    pieces = "; ".join(f"{st.tuple()} -> [({aff})]" for st, aff in values.items())
    sch = child.insert_partial_schedule(isl.MultiUnionPwAff(f"[{{ {pieces} }}]"))
    return sch.get_root().child(0).insert_mark(isl.Id(f"L{n.key}")).get_schedule()


def stmts_below(n) -> list[PolyStmt]:
    """The statements of a nest node's subtree, in program order."""
    if isinstance(n, PolyStmt):
        return [n]
    out: list = []
    for c in n.children:
        out += stmts_below(c)
    return out


def _present(node: LoopNode, ancestors: list) -> isl.Set:
    """Values ``[t0..t_v]`` of the loops down to ``node`` that its own stage executes."""
    out = None
    for st, aff in node.stmts.items():
        if st.plan is not node.plan:
            continue
        vals = [a.stmts[st] for a in ancestors] + [aff]
        m = iu.Map(f"{{ {st.tuple()} -> [{', '.join(f'({v})' for v in vals)}] }}")
        s = m.intersect_domain(st.domain).range()
        out = s if out is None else out.union(s)
    return iu.coalesce(out)


def _choose_isolation(node: LoopNode, ancestors: list) -> tuple[int, isl.Set] | None:
    """Where to separate full tiles for the vectorized/unrolled loop ``node``.

    Returns ``(depth, iso)``: the outermost loop of the same stage, at ``depth``, whose
    iterations ``iso`` (a set over ``t0..t_depth``) contain only full ranges of ``node``
    for every iteration of the loops in between; ``None`` when every range is full (no
    separation needed) or none is.
    """
    v = len(ancestors)
    present = _present(node, ancestors)
    lo, ext = node.plan.ranges[node.iter_var]  # derived loops start at 0
    prefix = present.project_out(isl.dim_type.set, v, 1)
    names = ", ".join(f"t{k}" for k in range(v + 1))
    box = prefix.insert_dims(isl.dim_type.set, v, 1).intersect(
        iu.Set(f"{{ [{names}] : {iu.box_str([f't{v}'], [(lo, ext)])} }}"))
    nonfull = iu.coalesce(box.subtract(present).project_out(isl.dim_type.set, v, 1))
    if nonfull.is_empty():
        return None
    # never at a parallel loop: its full and partial iterations would become separate
    # pieces of code, one after the other, and a loop of two iterations (two column
    # blocks of a GEMM for two threads, the last one ragged) none at all: its threads
    # were lost (1024x1003x1024 ran on one thread); below it, each thread separates its
    # own tiles
    depths = [k for k, a in enumerate(ancestors) if a.plan is node.plan
              and a.annotation != LoopKind.PARALLEL]
    cands = []
    for d in depths:
        keep = v - d - 1
        p_d = prefix.project_out(isl.dim_type.set, d + 1, keep)
        n_d = nonfull.project_out(isl.dim_type.set, d + 1, keep)
        iso = iu.coalesce(p_d.subtract(n_d))
        if not iso.is_empty():
            cands.append((d, iso))
    iso = present.intersect(prefix.subtract(nonfull).insert_dims(isl.dim_type.set, v, 1))
    if not iso.is_empty():
        cands.append((v, iu.coalesce(iso)))
    if not cands:
        return None
    # with symbolic sizes, an outer depth may isolate only for some of their values (all
    # tiles full when n % 8 == 0): take the outermost depth that isolates full tiles for
    # every value of the sizes that any depth does
    best = cands[0][1].params()
    for _, c in cands[1:]:
        best = best.union(c.params())
    for d, c in cands:
        if best.is_subset(c.params()):
            return d, c
    return cands[-1]


def _targets(node: LoopNode, ancestors: list) -> list:
    """Vectorized/unrolled loops of ``node``'s stage at or below it, with their ancestors."""
    out: list = []

    def walk(n, anc):
        if not isinstance(n, LoopNode):
            return
        if n.plan is node.plan and n.annotation in (LoopKind.VECTORIZED, LoopKind.UNROLLED):
            out.append((n, anc))
        for c in n.children:
            walk(c, anc if n.binding is not None else anc + [n])

    walk(node, list(ancestors))
    return out


def isolate_option(node: LoopNode, ancestors: list, choices: dict | None = None
                   ) -> isl.UnionSet | None:
    """The band ``isolate`` option of ``node`` (isl manual, "AST Generation Options"):
    the iterations to generate apart because a vectorized or unrolled loop below them is
    full there and gets constant bounds. ``None`` when no loop below chose this one."""
    depth = len(ancestors)
    iso = None
    choices = {} if choices is None else choices
    for tgt, anc in _targets(node, ancestors):
        if tgt.key not in choices:  # the same for every ancestor that asks
            try:
                with iu.operation_limit(ISOLATION_OPERATIONS):
                    choices[tgt.key] = _choose_isolation(tgt, anc)
            except iu.OperationLimit:
                choices[tgt.key] = None  # partial tiles then stay loops (slower, same result)
        choice = choices[tgt.key]
        if choice is None or choice[0] != depth:
            continue
        iso = choice[1] if iso is None else iso.intersect(choice[1])
    if iso is None or iso.is_empty():
        return None
    m = isl.Map.from_range(iso).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, depth)
    return isl.UnionSet.from_set(m.wrap().set_tuple_name("isolate"))
