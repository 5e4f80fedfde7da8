"""Barriers that order nothing, removed (a CUDA backend pass, after the warp shuffles).

Lowering places barriers conservatively: a pair around the code of every attached stage
that threads share (:func:`~polytile.schedule.threads.barrier_plans`), so a fused row
kernel (softmax, layernorm: a cross-thread reduction per statistic) runs about ten
``__syncthreads()`` per row where three or four order anything: one at the start of the
kernel (nothing before it), one between the initial value of a thread's partial and its
update (the same thread's element), one between the partials and the warp-shuffle combine
that reads each thread's own partial, ... Each barrier waits for the slowest warp of the
block, which is latency a memory-bound kernel cannot hide.

A barrier ``S`` between the straight-line segments ``P`` (since the previous barrier, or
the start of the kernel) and ``N`` (up to the next barrier, or the end of the kernel) is
removed when no element of a shared (or global) buffer is written in one of ``P``, ``N``
and accessed in the other by a different thread of the block. That is proven only for
accesses whose index is the same affine function of the thread indices (``blockIdx`` and
constants allowed; no loop or let variables), injective over the threads that run it
(threads fixed by an enclosing ``threadIdx.x == c`` test are not counted): then each
element has one owner thread, and program order within a thread suffices. Anything this
pass does not understand (a barrier inside a loop or branch of ``P`` or ``N``, calls,
asynchronous copies, loads through computed or let-bound indices) keeps the barrier.
Removals are decided left to right, each against the segment merged so far.
"""

from __future__ import annotations

import dataclasses

from polytile.te.expr import And, Binary, Cast, Cmp, Const, Var
from polytile.te.visitor import collect

from ..kinds import thread_private
from ..loop_ir import (AccessPtr, Allocate, ExternCall, For, IfThenElse, KernelLaunch,
                       LetStmt, Load, PrimFunc, Seq, Stmt, StmtMutator, Store, Sync,
                       WarpShuffle, seq, walk_stmts)
from .async_copy import is_async_copy

_OPAQUE = object()   # a segment this pass cannot reason about


def elide_barriers(func: PrimFunc) -> PrimFunc:
    """``func`` (a lowered, flattened GPU function) without the barriers of its kernels
    that order no access of one thread before an access of another (module docstring);
    unchanged when there are none."""
    body = _Kernels().visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Kernels(StmtMutator):
    def visit_KernelLaunch(self, k: KernelLaunch):
        if not all(isinstance(n, int) for n in k.block):
            return k
        threads, uniform = {}, set()
        for v, t in k.thread_vars:
            tag = str(getattr(t, "value", t))
            if tag.startswith("threadIdx."):
                threads[v] = k.block["xyz".index(tag[-1])]
            elif tag.startswith("blockIdx."):
                uniform.add(v)
        body = _Elider(threads, uniform).run(k.body, top=True)
        return k if body is k.body else dataclasses.replace(k, body=body)


def _has_sync(s: Stmt) -> bool:
    return any(isinstance(x, Sync) for x in walk_stmts(s))


def _leaves(s: Stmt) -> list:
    """``s`` as straight-line code: sequences, allocations and lets opened (their bodies
    run once, in order), everything else a leaf."""
    if isinstance(s, Seq):
        return [x for c in s.stmts for x in _leaves(c)]
    if isinstance(s, (Allocate, LetStmt)):
        return _leaves(s.body)
    return [s]


class _Elider:
    def __init__(self, threads: dict, uniform: set):
        self.threads = threads     # threadIdx variable -> its extent
        self.uniform = uniform     # blockIdx variables (the same in every thread)

    # ------------------------------------------------------------------ the tree
    def run(self, s: Stmt, top: bool) -> Stmt:
        """``s`` with the removable barriers of its straight-line code dropped; ``top``:
        ``s`` is a whole kernel body (nothing runs before or after it)."""
        if not _has_sync(s):
            return s
        leaves = _leaves(s)
        drop = self._decide(leaves, top)
        inner = {id(x): self.run_nested(x) for x in leaves if not isinstance(x, Sync)
                 and _has_sync(x)}
        if not drop and all(inner[id(x)] is x for x in leaves if id(x) in inner):
            return s
        return self._rebuild(s, drop, inner)

    def run_nested(self, s: Stmt) -> Stmt:
        """Barriers in the bodies of loops and branches: only between two barriers of
        the same straight-line body (a loop's next iteration follows its last one)."""
        if isinstance(s, For):
            body = self.run(s.body, top=False)
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, IfThenElse):
            then = self.run(s.then_case, top=False)
            other = None if s.else_case is None else self.run(s.else_case, top=False)
            if then is s.then_case and other is s.else_case:
                return s
            return IfThenElse(s.cond, then, other)
        return s

    def _rebuild(self, s: Stmt, drop: set, inner: dict) -> Stmt | None:
        if isinstance(s, Sync):
            return None if id(s) in drop else s
        if isinstance(s, Seq):
            return seq(*[self._rebuild(c, drop, inner) for c in s.stmts]) if s.stmts else s
        if isinstance(s, (Allocate, LetStmt)):
            body = self._rebuild(s.body, drop, inner)
            return dataclasses.replace(s, body=body if body is not None else Seq(()))
        return inner.get(id(s), s)

    def _decide(self, leaves: list, top: bool) -> set:
        """ids of the barriers among ``leaves`` to drop."""
        syncs = [k for k, x in enumerate(leaves) if isinstance(x, Sync)]
        if len({id(leaves[k]) for k in syncs}) != len(syncs):
            return set()   # one barrier object at two places: ids would not tell them apart
        drop: set = set()
        bounds = ([-1] if top else []) + syncs + ([len(leaves)] if top else [])
        if len(bounds) < 3:
            return drop
        merged = self._accesses(leaves[bounds[0] + 1:bounds[1]])
        for b, k in enumerate(bounds[1:-1], start=1):
            nxt = self._accesses(leaves[k + 1:bounds[b + 1]])
            if self._independent(merged, nxt):
                drop.add(id(leaves[k]))
                merged = merged + nxt
            else:
                merged = nxt
        return drop

    # ------------------------------------------------------------------ accesses
    def _accesses(self, stmts: list):
        """``[(buffer name, key, is_write)]`` of the shared and global accesses of
        ``stmts`` (``key``: the element owner function, None where unknown), or
        :data:`_OPAQUE`."""
        if stmts is _OPAQUE:
            return _OPAQUE
        out: list = []
        for s in stmts:
            if self._walk(s, {}, out) is _OPAQUE:
                return _OPAQUE
        return out

    def _walk(self, s: Stmt, fixed: dict, out: list):
        if isinstance(s, (Store, WarpShuffle)):
            if self._exprs((*s.indices, s.value), fixed, out) is _OPAQUE:
                return _OPAQUE
            return self._add(s.buffer, s.indices, True, fixed, out)
        if isinstance(s, Seq):
            for c in s.stmts:
                if self._walk(c, fixed, out) is _OPAQUE:
                    return _OPAQUE
            return None
        if isinstance(s, Allocate):
            return self._walk(s.body, fixed, out)
        if isinstance(s, LetStmt):
            if self._exprs((s.value,), fixed, out) is _OPAQUE:
                return _OPAQUE
            return self._walk(s.body, fixed, out)
        if isinstance(s, IfThenElse):
            if self._exprs((s.cond,), fixed, out) is _OPAQUE:
                return _OPAQUE
            if self._walk(s.then_case, {**fixed, **self._equalities(s.cond)}, out) \
                    is _OPAQUE:
                return _OPAQUE
            return None if s.else_case is None else self._walk(s.else_case, fixed, out)
        if isinstance(s, For):
            if is_async_copy(s) or self._exprs((s.min, s.extent), fixed, out) is _OPAQUE:
                return _OPAQUE
            return self._walk(s.body, fixed, out)
        return _OPAQUE   # barriers, calls, tensor intrinsics, asserts

    def _exprs(self, exprs, fixed: dict, out: list):
        for e in exprs:
            if collect(e, (ExternCall, AccessPtr)):
                return _OPAQUE
            for ld in collect(e, Load):
                self._add(ld.buffer, ld.indices, False, fixed, out)
        return None

    def _add(self, buf, indices, write: bool, fixed: dict, out: list):
        if thread_private(buf.scope):
            return None
        key = self._owner(indices, fixed)
        out.append((buf.name, key, write))
        return None

    def _equalities(self, cond) -> dict:
        """Thread indices a ``then`` branch of ``cond`` fixes (``threadIdx.x == 0``)."""
        if isinstance(cond, And):
            return {**self._equalities(cond.a), **self._equalities(cond.b)}
        if isinstance(cond, Cmp) and cond.op == "eq":
            for v, c in ((cond.a, cond.b), (cond.b, cond.a)):
                if v in self.threads and isinstance(c, Const) and isinstance(c.value, int):
                    return {v: c.value}
        return {}

    def _owner(self, indices: tuple, fixed: dict):
        """A hashable key of the element -> thread function of an access, or None when the
        element is not one thread's alone (or this pass cannot tell)."""
        if len(indices) != 1:
            return None
        form = _affine(indices[0], set(self.threads) | self.uniform)
        if form is None:
            return None
        coefs, const = form
        for v, val in fixed.items():
            const += coefs.pop(v, 0) * val
        for v in [v for v in coefs if v in self.threads and self.threads[v] <= 1]:
            coefs.pop(v)
        # injective over the free thread indices: mixed radix (each coefficient above the
        # span of the smaller ones)
        free = sorted(((abs(coefs.get(v, 0)), n) for v, n in self.threads.items()
                       if v not in fixed and n > 1), key=lambda t: t[0])
        span = 0
        for c, n in free:
            if c <= span:
                return None
            span += c * (n - 1)
        return (tuple(sorted(((id(v), val) for v, val in fixed.items()))),
                tuple(sorted((id(v), c) for v, c in coefs.items() if c)), const)

    @staticmethod
    def _independent(p, n) -> bool:
        """No element written by one thread in ``p`` (or ``n``) and accessed by another
        in the other."""
        if p is _OPAQUE or n is _OPAQUE:
            return False
        for name in {a[0] for a in p} & {a[0] for a in n}:
            ps = [a for a in p if a[0] == name]
            ns = [a for a in n if a[0] == name]
            if not any(a[2] for a in ps) and not any(a[2] for a in ns):
                continue   # read in both: no order needed
            keys = {a[1] for a in ps + ns}
            if None in keys or len(keys) != 1:
                return False
        return True


def _affine(e, allowed: set):
    """``({var: coefficient}, constant)`` of an integer expression linear in ``allowed``
    variables, else None."""
    if isinstance(e, Const):
        return ({}, e.value) if isinstance(e.value, int) and not isinstance(
            e.value, bool) else None
    if isinstance(e, Var):
        return ({e: 1}, 0) if e in allowed else None
    if isinstance(e, Cast):
        return _affine(e.value, allowed) if "int" in e.dtype and "int" in e.value.dtype \
            else None
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _affine(e.a, allowed), _affine(e.b, allowed)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if a[0] and b[0]:
                return None
            (coefs, c), k = (a, b[1]) if not b[0] else (b, a[1])
            return {v: x * k for v, x in coefs.items()}, c * k
        sign = 1 if e.op == "add" else -1
        coefs = dict(a[0])
        for v, x in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * x
        return coefs, a[1] + sign * b[1]
    return None


__all__ = ["elide_barriers"]
