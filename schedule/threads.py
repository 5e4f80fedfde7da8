"""Thread roles: which GPU threads run each statement instance of a kernel.

A loop bound to a hardware index (``blockIdx.*``/``threadIdx.*``) is not a loop: the
statements below it run on the thread whose index equals the loop's value (``tree.py``
filters them). A statement of a kernel that depends on no loop bound to an index the kernel
launches more than one of (a root stage with unbound loops, a stage computed outside the
thread loops, a ``shared`` copy whose thread loops are relaxed) has, for that index, one of
two roles:

* **idle** threads: the statement writes a buffer common to several threads (``shared``,
  ``global``); only index 0 runs it, the other threads are idle there. Running it on every
  thread (TVM) would have every thread write the same elements: a race, harmless only when
  the values agree, and wrong for a reduction, whose ``init`` would reset a sum another
  thread is adding to.
* **replicated** loops: the statement writes a ``local`` buffer (or a tensor-core
  fragment), one copy per thread; every thread runs it, each filling its own copy. A
  statement that touches a fragment is a warp-collective tensor intrinsic: every lane of
  the warp must run it (a lane left idle would hang or corrupt the instruction), so its
  unbound ``threadIdx`` indices are replicated too.

Over ``blockIdx``, a ``shared`` buffer is replicated too (one per block); a statement that
every block would run into one global buffer cannot be made exact (blocks do not
synchronise): it is refused.

Where a buffer computed in a kernel is written by one thread and read (or written) by
another, the code of its stage is surrounded by barriers (``astgen.py``);
:func:`barrier_plans` finds those stages exactly, from the accesses and the roles.
The reference interpreter checks the result: it raises on a race between two barriers.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polytile.errors import fail
from polytile.te import symbolic as sym

from . import isl_util as iu
from .kinds import FRAGMENT_SCOPES, PARAMS, thread_private
from .polymodel import LoopNode, Model, PolyStmt

#: the hardware indices in the order of the thread tuple ``[bx, by, bz, tx, ty, tz]``
TAGS = tuple(PARAMS)


@dataclass(frozen=True)
class ThreadRole:
    """The threads that run the instances of one statement.

    ``bound``: tag -> the affine values (isl text over the statement's dimensions) the
    index must equal (one per enclosing loop bound to it); ``fixed``: tag -> the one index
    that runs the statement (a thread predicate, such as the final step of a cross-thread
    reduction: a restriction of the domain); ``idle``: the tags of which only index 0
    runs the statement, the others idle (a guard inside the statement, so that the loops
    and barriers around it stay uniform across threads); ``replicated``: the tags whose
    every index runs each instance (``local`` buffers)."""

    stmt: PolyStmt
    bound: dict
    fixed: dict
    idle: tuple
    replicated: tuple

    def condition(self) -> str:
        """The isl constraint on the hardware parameters for ``fixed`` (``""``: none)."""
        return " and ".join(f"{PARAMS[t]} = {v}" for t, v in self.fixed.items())

    def _constraints(self, extents: dict | None) -> str:
        """The hardware indices of the threads that run an instance, as isl constraints;
        ``extents`` None: replicated tags at index 0 only."""
        cons = []
        for t in TAGS:
            c = PARAMS[t]
            if t in self.bound:
                cons += [f"{c} = ({v})" for v in self.bound[t]]
            elif t in self.fixed:
                cons.append(f"{c} = {self.fixed[t]}")
            elif t in self.replicated and extents is not None:
                cons.append(f"0 <= {c} < {iu.num(extents[t])}")   # (maybe symbolic)
            else:   # idle, or one index of a replicated tag
                cons.append(f"{c} = 0")
        return " and ".join(cons)

    def _map(self, extents: dict | None) -> isl.Map:
        return iu.Map(f"{{ {self.stmt.tuple()} -> [{', '.join(PARAMS[t] for t in TAGS)}] : "
                      f"{self._constraints(extents)} }}")

    def thread_map(self, extents: dict) -> isl.Map:
        """``{ S[i] -> [bx, by, bz, tx, ty, tz] }``: the threads that run instance ``i``
        (within the kernel's launch ``extents``, tag -> extent)."""
        return self._map(extents).intersect_domain(self.stmt.domain)

    def one_thread(self) -> isl.Set:
        """``[bx, by, bz, tx, ty, tz] -> { S[i] : ... }``: the instances ``i`` with, as the
        hardware parameters, one thread that runs each (index 0 of a replicated tag): a
        function of ``i``, which ``ast_check`` uses to check that a loop nest runs every
        instance without projecting the hardware indices out. (Without a replicated tag,
        the text parsed is that of :meth:`thread_map`, parsed once for both.)"""
        return self._map(None).move_dims(isl.dim_type.param, 0, isl.dim_type.out, 0,
                                         len(TAGS)).domain()


def launch_extents(nodes: list) -> dict:
    """Tag -> extent of the loops of ``nodes`` bound to hardware indices."""
    out: dict = {}

    def walk(n):
        if isinstance(n, LoopNode):
            pair = n.index_pair
            if pair:   # a symbolic split: ceil(E / f) blocks of f threads
                rel = n.plan.strips[n.iter_var]
                out[pair[0]], out[pair[1]] = rel.outer.dom.extent, rel.sym
            elif n.binding in PARAMS:
                out[n.binding] = n.plan.extent(n.iter_var)
            for c in n.children:
                walk(c)

    for n in nodes:
        walk(n)
    return out


def roles(nodes: list) -> dict:
    """Statement name -> :class:`ThreadRole` for every statement of the kernel ``nodes``.

    Raises
    ------
    ScheduleError
        For a statement that every block would run into one buffer common to the blocks.
    """
    extents = launch_extents(nodes)
    out: dict = {}
    stmts: list = []

    def walk(n, anc: list):
        if isinstance(n, PolyStmt):
            stmts.append((n, anc))
            return
        if n.binding in PARAMS:
            anc = anc + [n]
        for c in n.children:
            walk(c, anc)

    for n in nodes:
        walk(n, [])
    # plans that other stages are computed at: their code holds barriers
    nested = frozenset(st.plan.attach[0].index for st, _ in stmts
                       if st.plan.attach is not None)
    for st, anc in stmts:
        out[st.name] = _role(st, anc, extents, nested)
    return out


def _role(st: PolyStmt, anc: list, extents: dict, nested: frozenset = frozenset()) \
        -> ThreadRole:
    bound: dict = {}
    for a in anc:
        if st in a.stmts:
            pair = a.index_pair
            if pair:   # x = bx + tx, bx the block's offset (StagePlan.index_pair)
                bound.setdefault(pair[0], []).append(f"({a.stmts[st]}) - {PARAMS[pair[1]]}")
                bound.setdefault(pair[1], []).append(f"({a.stmts[st]}) - {PARAMS[pair[0]]}")
            else:
                bound.setdefault(a.binding, []).append(a.stmts[st])
    fixed = dict(st.plan.stage.thread_predicate or {})
    replicated, idle = [], []
    scope = st.plan.buffer.scope
    if fixed and thread_private(scope):
        # the combine of a cross-thread reduction into a buffer of each thread: every
        # thread reduces the shared partials into its own copy (the broadcast)
        fixed = {}
    elif fixed and (st.plan.attach is not None or st.plan.index in nested):
        # the code of an attached stage (or one with stages attached to it) sits between
        # barriers: a restriction of its domain would put them under ``if (tx == 0)``
        # (divergent barriers); a guard inside each statement keeps the loops uniform
        idle = [t for t, v in fixed.items() if v == 0]
        fixed = {t: v for t, v in fixed.items() if v != 0}
    collective = any(buf is not None and buf.scope in FRAGMENT_SCOPES
                     for buf, _ in st.accesses.values())
    for t, ext in extents.items():
        # (a symbolic extent, a grid of ceil(N / f) blocks, may exceed 1: fuzz seed cuda
        # 80148 compared it with 1 in Python and crashed)
        one = sym.static(ext)
        if t in bound or t in fixed or t in idle or (one is not None and one <= 1):
            continue
        # a local buffer is one per thread, a shared one per block: each fills its own
        if (thread_private(scope) or (scope == "shared" and t.is_block)
                or (collective and not t.is_block)):
            replicated.append(t)
        elif t.is_block:
            root = st.plan
            while root.attach is not None:
                root = root.attach[0]
            fail("compute_at", f"stage {st.plan.name!r} runs outside the loops of its kernel "
                 f"(stage {root.name!r}) bound to {t.value!r}: every block would compute it "
                 f"into one global buffer, racing with the other blocks",
                 f"stages of a kernel inside its loop bound to {t.value!r}",
                 hint=f"compute {st.plan.name!r} at a loop inside the {t.value!r} loop, "
                      "or at root")
        else:
            idle.append(t)   # one thread writes what all of them would
    return ThreadRole(st, bound, fixed, tuple(idle), tuple(replicated))


def restriction(role_of: dict) -> isl.UnionSet | None:
    """The instances of each statement that its threads run, as a union set with the
    hardware parameters (``None`` when no statement is restricted)."""
    from .kinds import PARAM_SPACE

    if not any(r.fixed for r in role_of.values()):
        return None
    pieces = [f"{r.stmt.tuple()} : {r.condition()}" if r.fixed else r.stmt.tuple()
              for r in role_of.values()]
    return iu.UnionSet(f"{PARAM_SPACE} -> {{ {'; '.join(pieces)} }}")


def barrier_plans(model: Model, nodes: list, role_of: dict | None = None) -> set:
    """Indices of the attached stages of the kernel ``nodes`` whose buffer one thread
    writes and another thread (of the same block) reads or writes: their code needs a
    barrier before (earlier readers are done) and after (the writes are visible)."""
    role_of = roles(nodes) if role_of is None else role_of
    extents = launch_extents(nodes)
    if all(sym.is_static(extents.get(t, 1)) and extents.get(t, 1) <= 1
           for t in TAGS if t.in_thread):
        return set()
    if not any(p.attach is not None for p in model.plans):
        return set()
    users: dict = {}
    for r in role_of.values():
        threads = None
        for key, (buf, pma) in r.stmt.accesses.items():
            if buf is None or thread_private(buf.scope):
                continue
            threads = threads if threads is not None else r.thread_map(extents).reverse()
            elem = isl.Map.from_pw_multi_aff(pma).reset_tuple_id(isl.dim_type.out)
            elem = elem.intersect_domain(r.stmt.domain)
            users.setdefault(id(buf), []).append((key == "w", threads.apply_range(elem)))
    same_block = isl.Map("{ [bx, by, bz, tx, ty, tz] -> [bx, by, bz, ux, uy, uz] }")
    same = isl.Map("{ [bx, by, bz, tx, ty, tz] -> [bx, by, bz, tx, ty, tz] }")
    out = set()
    for p in model.plans:
        if p.attach is None or thread_private(p.buffer.scope) or id(p.buffer) not in users:
            continue
        uses = users[id(p.buffer)]
        for w, tw in uses:
            if not w:
                continue
            for _, tr in uses:
                pairs = tw.apply_range(tr.reverse()).intersect(same_block)
                if not pairs.is_subset(same):
                    out.add(p.index)
    return out


__all__ = ["TAGS", "ThreadRole", "barrier_plans", "launch_extents", "restriction", "roles"]
