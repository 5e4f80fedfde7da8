"""Guarded register-tile statements regrouped under one branch per guard (a CUDA backend
pass).

On GPUs every statement iterates over full tiles and its exact domain becomes a guard
(``model.py``). At a ragged size, each statement of an unrolled register tile keeps its
own ``if``: the default SGEMM step of tutorial 04 (16 x 8 outputs per thread, k tiles of
16 unrolled) printed 2048 guarded FMAs per k tile, although they take only eight
different guards per k step (one per vthread sub-tile), interleaved. nvcc's compile time
grows with those branches.

In a run of consecutive guarded statements (``if (g) { stores }``) that are pairwise
independent, the statements are regrouped, stably, under one ``if`` per distinct guard
(in the order of first appearance). Two statements are independent when neither stores
an element that the other loads or stores; this pass proves it only when every store of
the run is to a constant index (a thread's registers, once unrolled) and every load of a
stored buffer is at a constant index too. The guards and the values are unchanged, so
each statement runs under the same condition on the same data: only the order of
independent statements changes. Anything else (loops, calls, barriers, an ``else``)
ends a run.
"""

from __future__ import annotations

import dataclasses

from polytile.te.expr import Const
from polytile.te.visitor import collect_many, structural_equal

from ..loop_ir import (ExternCall, IfThenElse, Load, PrimFunc, Seq, StmtMutator, Store,
                       expr_str, seq)


def group_guards(func: PrimFunc) -> PrimFunc:
    """``func`` with the runs of independent guarded statements of its straight-line code
    regrouped by guard (module docstring); unchanged when no run has a repeated guard."""
    body = _Grouper().visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Access:
    """The elements one guarded statement (guard included) stores and loads, as ``(buffer
    name, constant flat index)``, a load at a computed index as ``(buffer name, None)``.
    Buffers are told apart by name: distinct names never share memory (arguments that are
    written do not overlap; see :mod:`polytile.targets.llvm.library`)."""

    __slots__ = ("stores", "loads")

    def __init__(self, stores: set, loads: set):
        self.stores, self.loads = stores, loads


def _const_index(indices: tuple) -> tuple | None:
    """``indices`` as Python ints when all are constants, else None."""
    if all(isinstance(i, Const) for i in indices):
        return tuple(int(i.value) for i in indices)
    return None


def _accesses(s) -> _Access | None:
    """The accesses of ``if (g) { stores }``, or None when ``s`` is not such a statement
    (an ``else``, a statement other than a store, a call with side effects) or stores at
    a computed index."""
    if not isinstance(s, IfThenElse) or s.else_case is not None:
        return None
    body = s.then_case.stmts if isinstance(s.then_case, Seq) else (s.then_case,)
    stores, exprs = set(), [s.cond]
    for x in body:
        if not isinstance(x, Store):
            return None
        k = _const_index(x.indices)
        if k is None:
            return None
        stores.add((x.buffer.name, k))
        exprs.extend(x.indices)
        exprs.append(x.value)
    if collect_many(exprs, ExternCall):
        return None
    loads = {(ld.buffer.name, _const_index(ld.indices))
             for ld in collect_many(exprs, Load)}
    return _Access(stores, loads)


class _Run:
    """A run of pairwise independent guarded statements, and the union of their
    accesses."""

    def __init__(self):
        self.stmts: list = []
        self.stores: set = set()
        self.loads: set = set()
        self.stored_buffers: set = set()
        self.var_loaded: set = set()   # buffers loaded at a computed index

    def independent(self, a: _Access) -> bool:
        """Is a statement of accesses ``a`` independent of every statement of the run (no
        element that one stores and the other loads or stores)?"""
        for st in a.stores:
            if st in self.stores or st in self.loads or st[0] in self.var_loaded:
                return False
        for ld in a.loads:
            if ld[1] is None and ld[0] in self.stored_buffers:
                return False
            if ld in self.stores:
                return False
        return True

    def add(self, s, a: _Access) -> None:
        self.stmts.append(s)
        self.stores |= a.stores
        self.loads |= a.loads
        self.stored_buffers |= {b for b, _ in a.stores}
        self.var_loaded |= {b for b, k in a.loads if k is None}

    def regrouped(self) -> list:
        """The run's statements, one ``if`` per distinct guard (structurally equal
        guards), in the order of the guards' first appearance; each guard's bodies keep
        their order. The statements themselves when no guard repeats."""
        groups: dict[str, list] = {}     # printed guard -> [(guard, [bodies])...]
        order: list = []
        for s in self.stmts:
            cands = groups.setdefault(expr_str(s.cond), [])
            for g in cands:
                if structural_equal(g[0], s.cond):
                    g[1].append(s.then_case)
                    break
            else:
                g = (s.cond, [s.then_case])
                cands.append(g)
                order.append(g)
        if len(order) == len(self.stmts):
            return self.stmts
        return [IfThenElse(c, seq(*bodies)) for c, bodies in order]


class _Grouper(StmtMutator):
    def visit_Seq(self, s: Seq):
        s = self.generic_visit(s)
        if not isinstance(s, Seq):
            return s
        out: list = []
        run = _Run()
        for x in s.stmts:
            a = _accesses(x)
            if a is None or not run.independent(a):
                out.extend(run.regrouped())
                run = _Run()
            if a is None:
                out.append(x)
            else:
                run.add(x, a)
        out.extend(run.regrouped())
        # regrouping only merges statements: the same count means nothing moved
        return s if len(out) == len(s.stmts) else seq(*out)
