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
multiple of 32 with a power-of-two number of warps per row. A tuple reduction (a
``(sum, sum of squares)`` pair) is one fold updating several accumulators from as many
partial buffers; it is rewritten when each element reads only its own accumulator and
partial (every tuple combiner whose laws are proven, :mod:`polytile.te.algebra`): each
step shuffles every element, and the per-warp values of all elements go through shared
memory in one round, one barrier for the tuple. Everything else (``float16``
accumulators, thread extents such as 7, 33, 100 or 96) keeps the serial fold.
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
        guard, elems = m
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
        tag = f"{elems[0][3].buffer.name}.w{next(self.names)}"
        allocs, accs, tmps, ws = [], [], [], []
        for k, (buf, _, _, _) in enumerate(elems):
            dt = buf.dtype
            sfx = f".{k}" if len(elems) > 1 else ""
            accs.append(Buffer(f"{tag}.acc{sfx}", (1,), dt, "local"))
            tmps.append(Buffer(f"{tag}.tmp{sfx}", (1,), dt, "local"))
            allocs += [accs[-1], tmps[-1]]
            if warps > 1:
                ws.append(Buffer(f"{tag}.warps{sfx}", (Y * warps,), dt, "shared"))
                allocs.append(ws[-1])

        def get(b):
            return Load(b.dtype, b, (_i(0),))

        def combine(k, x, y):
            buf, idx, value, part = elems[k]
            return _Replace(buf, idx, part, x, y).visit(value)

        def butterfly(offsets):
            # every element's exchange of a step before its combines: the elements are
            # independent (a proven tuple combiner), and the shuffles of one step overlap
            out = []
            for o in offsets:
                out += [WarpShuffle(t, (_i(0),), get(a), o, mask) for a, t in zip(accs, tmps)]
                out += [Store(a, (_i(0),), combine(k, get(a), get(t)))
                        for k, (a, t) in enumerate(zip(accs, tmps))]
            return out

        body = [Store(a, (_i(0),), _Replace(None, (), e[3], None, None, var=s.var,
                                            by=self.tx).visit(e[3]))
                for a, e in zip(accs, elems)]
        body += butterfly(first)
        if warps > 1:
            row = _i(0) if self.ty is None or Y == 1 else Binary("int64", "mul", self.ty,
                                                                 _i(warps))
            lane = Binary("int64", "truncmod", self.tx, _i(WARP))
            slot = _add(row, Binary("int64", "truncdiv", self.tx, _i(WARP)))
            mine = _add(row, Binary("int64", "truncmod", self.tx, _i(warps)))
            body += [
                IfThenElse(Cmp("bool", "eq", lane, _i(0)),
                           seq(*[Store(w, (slot,), get(a)) for w, a in zip(ws, accs)])),
                Sync("shared"),
                *[Store(a, (_i(0),), Load(a.dtype, w, (mine,))) for w, a in zip(ws, accs)],
                *butterfly(_butterfly(warps))]
        final = seq(*[Store(buf, idx, combine(k, Load(buf.dtype, buf, idx), get(a)))
                      for k, ((buf, idx, _, _), a) in enumerate(zip(elems, accs))])
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
        """``(guards, elements)`` of a serial fold over the block's threads (``guards`` the
        conditions of the ``if`` statements around the update, outermost first;
        ``elements`` one ``(buffer, indices, value, partial load)`` per accumulator: the
        update ``buffer[indices] = value``, whose ``value`` reads that accumulator and the
        partial load only). A tuple fold (``LetStmt`` of every new value, then the stores:
        ``astgen._tuple_store``) matches when each element reads its own accumulator and
        partial only, the form of every tuple combiner whose laws are proven."""
        if not (isinstance(s.min, Const) and s.min.value == 0 and isinstance(s.extent, Const)
                and s.extent.value == self.T and s.step == 1 and self.T > 1):
            return None
        guard, st = [], s.body
        while isinstance(st, IfThenElse) and st.else_case is None:
            guard.append(st.cond)
            st = st.then_case
        if any(s.var in free_vars(g) for g in guard):
            return None
        if isinstance(st, Store):
            updates = [(st, st.value)]
        else:
            updates = _tuple_updates(st)
            if updates is None:
                return None
        elems, seen = [], set()
        for store, value in updates:
            e = self._element(s, store, value)
            if e is None or id(e[0]) in seen or id(e[3].buffer) in seen:
                return None
            seen |= {id(e[0]), id(e[3].buffer)}
            elems.append(e)
        if len(updates) > 1:
            accs = {id(e[0]) for e in elems}
            if any(id(ld.buffer) in accs and ld.buffer is not e[0]
                   for e in elems for ld in collect(e[2], Load)):
                return None   # an element reads another's accumulator (argmax's index)
        return guard, elems

    def _element(self, s: For, st: Store, value):
        """``(buffer, indices, value, partial load)`` of one update of a fold, or None."""
        if st.buffer.dtype not in SHUFFLE_DTYPES:
            return None
        if any(s.var in free_vars(i) for i in st.indices):
            return None
        parts = []
        for ld in collect(value, Load):
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
        rest = _Replace(st.buffer, st.indices, part, _i(0), _i(0)).visit(value)
        if s.var in free_vars(rest):
            return None
        return st.buffer, st.indices, value, part


def _tuple_updates(st: Stmt):
    """``[(store, value)]`` of a tuple fold's body ``let t_0 = v_0 in ... let t_n = v_n in
    (buf_0[idx] = t_0; ...; buf_n[idx] = t_n)``, or None for any other statement."""
    lets = {}
    while isinstance(st, LetStmt):
        if any(v in lets for v in free_vars(st.value)):
            return None
        lets[st.var] = st.value
        st = st.body
    stores = st.stmts if isinstance(st, Seq) else (st,)
    if not lets or len(stores) != len(lets) or not all(isinstance(x, Store) for x in stores):
        return None
    out = []
    for x in stores:
        if not (isinstance(x.value, Var) and x.value in lets):
            return None
        out.append((x, lets.pop(x.value)))
    return out


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
