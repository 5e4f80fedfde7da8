"""Warp-shuffle combine of cross-thread reductions (CUDA).

:func:`~polytile.schedule.rfactor.lower_cross_thread_reductions` leaves each thread's
partial in shared memory and a serial fold of the partials, ``for v in range(T): R[i] =
f(R[i], RF[.., v, ..])``, run by thread 0 (or, for a ``local`` result, by every thread):
``T`` dependent steps. This pass (a CUDA backend pass, on the flattened function) rewrites
that fold into a butterfly of ``__shfl_xor_sync`` exchanges (CUDA C Programming Guide,
"Warp Shuffle Functions"): every lane starts from its own partial ``RF[.., tx, ..]``, and
after ``log2`` steps every lane of a row holds the combination of the row's partials; with
more than one warp per row, lane 0 of each warp puts the warp's value in shared memory and,
after a barrier, every warp combines those values with a second butterfly. The original
statement then combines the result into ``R`` once (so ``R``'s initial value and guard
stay as they were). The order of the combination changes: the combiner was proven
commutative and associative when the reduction was bound to threads.

Rewritten: a fold in block-uniform code (no thread-dependent branch or loop around it)
of one ``Store`` whose value reads ``R`` at the stored element and one shared partial
buffer of ``R``'s dtype (32- or 64-bit int or float) indexed by the loop variable, in a
kernel whose block is ``(T, Y, 1)`` with ``T`` the loop's extent and either ``T`` a power
of two of at most 32 (whole rows in each warp; all warps full, or one warp) or ``T`` a
multiple of 32 with a power-of-two number of warps per row. Everything else (tuple
reducers, ``float16`` accumulators, thread extents such as 7, 33, 100 or 96) keeps the
serial fold.
"""

from __future__ import annotations

import dataclasses
import itertools

from polytile.te.expr import Binary, Cmp, Const, Var
from polytile.te.visitor import ExprMutator, collect, free_vars, structural_equal

from ..loop_ir import (Allocate, Buffer, For, IfThenElse, KernelLaunch, LetStmt, Load, PrimFunc,
                       Seq, Stmt, StmtMutator, Store, Sync, TensorCall, WarpShuffle, seq)

#: dtypes ``__shfl_xor_sync`` exchanges without cuda_fp16.h (the accumulators of the
#: fused row kernels are float32)
SHUFFLE_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")

WARP = 32


def warp_reduce(func: PrimFunc) -> PrimFunc:
    """Rewrite the serial folds of cross-thread reductions in ``func``'s kernels into warp
    shuffles (module docstring); other code is unchanged. ``func`` is a lowered, flattened
    CUDA function; returns it unchanged when nothing matches."""
    body = _Kernels().visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Kernels(StmtMutator):
    def visit_KernelLaunch(self, k: KernelLaunch):
        if not all(isinstance(n, int) for n in k.block) or k.block[2] != 1:
            return k
        tags = {str(getattr(t, "value", t)): v for v, t in k.thread_vars}
        tx, ty = tags.get("threadIdx.x"), tags.get("threadIdx.y")
        if tx is None:
            return k
        threads = {v for t, v in tags.items() if t.startswith("threadIdx")}
        body = _Uniform(tx, ty, k.block[0], k.block[1], threads).visit(k.body)
        return k if body is k.body else dataclasses.replace(k, body=body)


class _Uniform(StmtMutator):
    """Walks the block-uniform code of one kernel (a shuffle must be reached by every
    thread) and rewrites the matching folds."""

    def __init__(self, tx: Var, ty: Var | None, T: int, Y: int, threads: set):
        self.tx, self.ty, self.T, self.Y, self.threads = tx, ty, T, Y, threads
        self.names = itertools.count()

    def _uniform(self, *exprs) -> bool:
        return not any(v in self.threads for e in exprs for v in free_vars(e))

    def visit_IfThenElse(self, s: IfThenElse):
        return self.generic_visit(s) if self._uniform(s.cond) else s

    def visit_LetStmt(self, s: LetStmt):
        if not self._uniform(s.value):
            self.threads.add(s.var)   # a condition on it is thread-dependent too
        return self.generic_visit(s)

    def visit_TensorCall(self, s: TensorCall):
        return s

    def visit_For(self, s: For):
        return self.generic_visit(s) if self._uniform(s.min, s.extent) else s

    def visit_Seq(self, s: Seq):
        out, changed = [], False
        for k, x in enumerate(s.stmts):
            new = None
            if isinstance(x, For):
                # the barrier before the fold orders a later round's shared writes after
                # this round's reads; without one, the rewrite ends with its own
                new = self._rewrite(x, k > 0 and isinstance(s.stmts[k - 1], Sync))
            if new is None:
                new = self.visit(x)
            changed |= new is not x
            out.append(new)
        return seq(*out) if changed else s

    def _rewrite(self, s: For, synced: bool) -> Stmt | None:
        m = self._match(s)
        if m is None:
            return None
        guard, st, part = m
        T, Y = self.T, self.Y
        n = T * Y
        if T <= WARP and T & (T - 1) == 0:
            if n > WARP and n % WARP:
                return None   # a partial last warp: its mask would differ per warp
            first, warps = _butterfly(T), 1
            mask = 0xFFFFFFFF if n >= WARP else (1 << n) - 1
        elif T % WARP == 0 and (T // WARP) & (T // WARP - 1) == 0:
            first, warps, mask = _butterfly(WARP), T // WARP, 0xFFFFFFFF
        else:
            return None
        dt = st.buffer.dtype
        tag = f"{part.buffer.name}.w{next(self.names)}"
        acc = Buffer(f"{tag}.acc", (1,), dt, "local")
        tmp = Buffer(f"{tag}.tmp", (1,), dt, "local")
        a = Load(dt, acc, (_i(0),))

        def combine(x, y):
            return _Replace(st.buffer, st.indices, part, x, y).visit(st.value)

        def butterfly(offsets):
            out = []
            for o in offsets:
                out.append(WarpShuffle(tmp, (_i(0),), a, o, mask))
                out.append(Store(acc, (_i(0),), combine(a, Load(dt, tmp, (_i(0),)))))
            return out

        own = _Replace(None, (), part, None, None, var=s.var, by=self.tx).visit(part)
        body = [Store(acc, (_i(0),), own), *butterfly(first)]
        allocs = [acc, tmp]
        if warps > 1:
            row = _i(0) if self.ty is None or Y == 1 else Binary("int64", "mul", self.ty,
                                                                 _i(warps))
            w = Buffer(f"{tag}.warps", (Y * warps,), dt, "shared")
            allocs.append(w)
            lane = Binary("int64", "truncmod", self.tx, _i(WARP))
            body += [
                IfThenElse(Cmp("bool", "eq", lane, _i(0)),
                           Store(w, (_add(row, Binary("int64", "truncdiv", self.tx,
                                                      _i(WARP))),), a)),
                Sync("shared"),
                Store(acc, (_i(0),), Load(dt, w, (_add(row, Binary(
                    "int64", "truncmod", self.tx, _i(warps))),))),
                *butterfly(_butterfly(warps))]
        final = Store(st.buffer, st.indices, combine(Load(dt, st.buffer, st.indices), a))
        for g in reversed(guard):
            final = IfThenElse(g, final)
        body.append(final)
        if warps > 1 and not synced:
            body.append(Sync("shared"))
        out = seq(*body)
        for b in reversed(allocs):
            out = Allocate(b, out)
        return out

    def _match(self, s: For):
        """``(guards, store, partial load)`` of a serial fold over the block's threads
        (``guards`` the conditions of the ``if`` statements around the store, outermost
        first)."""
        if not (isinstance(s.min, Const) and s.min.value == 0 and isinstance(s.extent, Const)
                and s.extent.value == self.T and s.step == 1 and self.T > 1):
            return None
        guard, st = [], s.body
        while isinstance(st, IfThenElse) and st.else_case is None:
            guard.append(st.cond)
            st = st.then_case
        if any(s.var in free_vars(g) for g in guard):
            return None
        if not isinstance(st, Store) or st.buffer.dtype not in SHUFFLE_DTYPES:
            return None
        if any(s.var in free_vars(i) for i in st.indices):
            return None
        parts = []
        for ld in collect(st.value, Load):
            if ld.buffer is st.buffer:
                if not (len(ld.indices) == len(st.indices) and all(
                        structural_equal(p, q) for p, q in zip(ld.indices, st.indices))):
                    return None
            else:
                parts.append(ld)
        if len({id(p) for p in parts}) != 1:
            return None
        part = parts[0]
        if (part.buffer.scope != "shared" or part.buffer.dtype != st.buffer.dtype
                or any(isinstance(v, Load) for i in part.indices for v in collect(i, Load))):
            return None
        if not any(s.var in free_vars(i) for i in part.indices):
            return None
        # the loop variable only in the partial's indices
        rest = _Replace(st.buffer, st.indices, part, _i(0), _i(0)).visit(st.value)
        if s.var in free_vars(rest):
            return None
        return guard, st, part


def _butterfly(width: int) -> list:
    """XOR offsets combining each aligned group of ``width`` lanes (a power of two)."""
    out, o = [], width // 2
    while o >= 1:
        out.append(o)
        o //= 2
    return out


def _i(v: int) -> Const:
    return Const("int64", v)


def _add(a, b):
    return b if isinstance(a, Const) and a.value == 0 else Binary("int64", "add", a, b)


class _Replace(ExprMutator):
    """Loads of ``buffer[indices]`` to ``x`` and the partial load ``part`` to ``y``; or,
    with ``var``, ``var`` to ``by``."""

    def __init__(self, buffer, indices, part, x, y, var=None, by=None):
        self.buffer, self.indices, self.part, self.x, self.y = buffer, indices, part, x, y
        self.var, self.by = var, by

    def visit_Var(self, e):
        return self.by if self.var is not None and e is self.var else e

    def visit_Load(self, e):
        if self.var is not None:
            return self.generic_visit(e)
        if e is self.part:
            return self.y
        if e.buffer is self.buffer:
            return self.x
        return self.generic_visit(e)
