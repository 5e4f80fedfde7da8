"""Software prefetch: the meaning of ``Stage.prefetch`` (a :class:`~..kinds.PrefetchPragma`
in ``For.pragmas``).

A loop ``L`` (variable ``v``, step ``s``) carrying ``PrefetchPragma(T, offset)`` gets, at
the start of its body, one ``llvm.prefetch`` per cache line of buffer ``T`` that the body
accesses at ``v + offset * s``. Each access ``T[e]`` nested in ``L`` (flattened: one
element offset ``e``) is taken at ``v + offset * s`` over the loops between ``L`` and it:
``e = base + sum(c_u * u)`` with constant strides ``c_u > 0`` and constant ranges of those
loops. Strides that continue a contiguous run (``c_u`` equal to the run so far, starting
from 1 element) merge into it; the other loops become loops of prefetches, and each run is
prefetched every :data:`LINE_BYTES` bytes and at its last element. Identical footprints
(the load and the store of an accumulator) are prefetched once, for writing when one of
them is a store. Accesses that do not have this form (non-affine, negative strides,
non-constant extents such as ragged tiles, indices read from memory, which would be read
one iteration ahead) are left out: a prefetch is a hint, and the missing lines are only
loaded later.

Runs on the flattened function, as a pass of the ``llvm`` backend; ``let`` bindings inside
``L`` are substituted into the prefetched indices. ``llvm.prefetch`` never faults, so the
lines past the last iteration cost nothing but the instruction. GPU targets drop the
pragmas (:func:`strip_prefetch_pragmas`): a prefetch is a no-op there. Which loops may
carry one (serial or parallel, not split afterwards) is checked with the schedule
(``validate._check_prefetch_loops``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from polytile.errors import LoweringError, format_error
from polytile.te import dtype as dt
from polytile.te.expr import Binary, Const, Var
from polytile.te.visitor import collect, free_vars, substitute

from ..kinds import LoopKind, PrefetchPragma
from ..loop_ir import (AccessPtr, Allocate, Evaluate, ExternCall, For, IfThenElse, LetStmt,
                       Load, PrimFunc, Seq, Stmt, StmtMutator, Store, expr_str, seq,
                       stmt_exprs)
from .simplify import _linear, _rebuild, simplify_expr

#: Bytes of one cache line: a run of contiguous elements gets one prefetch per line.
LINE_BYTES = 64
#: The most prefetch instructions one iteration may issue (a larger footprint is a
#: schedule error: it would evict more than it brings in).
MAX_LINES = 1024


def _sites(body: Stmt, name: str) -> list:
    """``(buffer, index, is_store, loops)`` of each access to buffer ``name`` in ``body``,
    with the ``let`` values bound inside ``body`` substituted into ``index``."""
    out: list = []

    def loads(exprs, lets, loops):
        for e in exprs:
            for ld in collect(e, Load):
                if ld.buffer.name == name:
                    out.append((ld.buffer, substitute(ld.indices[0], lets), False, loops))

    def walk(s: Stmt, lets: dict, loops: tuple):
        if isinstance(s, Store):
            loads([s.value, *s.indices], lets, loops)
            if s.buffer.name == name:
                out.append((s.buffer, substitute(s.indices[0], lets), True, loops))
        elif isinstance(s, For):
            loads([s.min, s.extent], lets, loops)
            walk(s.body, lets, loops + (s,))
        elif isinstance(s, LetStmt):
            loads([s.value], lets, loops)
            walk(s.body, {**lets, s.var: substitute(s.value, lets)}, loops)
        elif isinstance(s, IfThenElse):
            loads([s.cond], lets, loops)
            walk(s.then_case, lets, loops)
            if s.else_case is not None:
                walk(s.else_case, lets, loops)
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, lets, loops)
        elif isinstance(s, Allocate):
            walk(s.body, lets, loops)
        else:
            loads(list(stmt_exprs(s)), lets, loops)

    walk(body, {}, ())
    return out


def _footprint(index, loops: tuple):
    """``(base, rows, run)`` of an access: ``rows`` the ``(stride, count)`` of the loops
    that are not part of the contiguous run of ``run`` elements at ``base + sum(stride *
    r)``; ``None`` when the index is not of the affine form of the module docstring."""
    if collect(index, (Load, ExternCall)):
        # an index read from memory would be read at the iteration ahead, which may lie
        # past the end of the index array
        return None
    lin = _linear(simplify_expr(index))
    if lin is None:
        return None
    terms, const = lin
    inner = {f.var: f for f in loops}
    dims, rest = [], {}
    for t, c in terms.items():
        f = inner.get(t) if isinstance(t, Var) else None
        if f is None:
            if any(v in inner for v in free_vars(t)):
                return None
            rest[t] = c
            continue
        if c <= 0 or not isinstance(f.min, Const) or not isinstance(f.extent, Const):
            return None
        const += c * f.min.value
        dims.append((c * f.step, -(-f.extent.value // f.step)))
    run, rows = 1, []
    for stride, count in sorted(dims):
        if stride == run:
            run *= count
        else:
            rows.append((stride, count))
    return _rebuild(rest, const), tuple(rows), run


def _prefetch(buf, addr, write: bool) -> Stmt:
    i32 = "int32"
    ptr = AccessPtr("handle", buf, addr, "w" if write else "r")
    # llvm.prefetch(address, rw, locality 3 = keep in all levels, 1 = data cache)
    return Evaluate(ExternCall("void", "llvm.prefetch.p0", (
        ptr, Const(i32, int(write)), Const(i32, 3), Const(i32, 1)), "llvm_intrin"))


def _prefetches(loop: For, prag: PrefetchPragma) -> list:
    sites = _sites(loop.body, prag.tensor)
    if not sites:
        raise LoweringError(format_error(
            "prefetch", f"loop {prag.axis!r} of stage {prag.stage!r} accesses no element of "
            f"{prag.tensor!r} in memory", "a tensor the loop's body loads or stores",
            hint="a tensor inlined into the stage, or read through a cache_read stage "
            "computed elsewhere, has no accesses in the loop: prefetch the tensor the loop "
            "reads"))
    ahead = Binary("int64", "add", loop.var, Const("int64", prag.offset * loop.step))
    found: dict = {}
    for buf, index, store, loops in sites:
        fp = _footprint(substitute(index, {loop.var: ahead}), loops)
        if fp is None:
            continue
        base, rows, run = fp
        key = (buf.name, expr_str(base), rows, run)
        old = found.get(key)
        found[key] = (buf, base, rows, run, store or (old is not None and old[4]))
    out = []
    for buf, base, rows, run, write in found.values():
        step = max(1, LINE_BYTES // dt.nbytes(buf.dtype))
        offs = sorted(set(range(0, run, step)) | {run - 1})
        lines = math.prod(c for _, c in rows) * len(offs)
        if lines > MAX_LINES:
            raise LoweringError(format_error(
                "prefetch", f"stage {prag.stage!r} would prefetch {lines} cache lines of "
                f"{prag.tensor!r} per iteration of loop {prag.axis!r}",
                f"at most {MAX_LINES}", hint="prefetch at an inner loop"))
        rvars = [Var("int64", f"{prag.tensor}.pf{k}") for k in range(len(rows))]
        at = base
        for (stride, _), v in zip(rows, rvars):
            at = Binary("int64", "add", at, Binary("int64", "mul", Const("int64", stride), v))
        body = seq(*[_prefetch(buf, simplify_expr(Binary("int64", "add", at,
                                                         Const("int64", o))), write)
                     for o in offs])
        for (_, count), v in reversed(list(zip(rows, rvars))):
            body = For(v, Const("int64", 0), Const("int64", count), LoopKind.SERIAL, body)
        out.append(body)
    return out


class _Insert(StmtMutator):
    def visit_For(self, s: For):
        s = self.generic_visit(s)
        prags = [p for p in s.pragmas if isinstance(p, PrefetchPragma)]
        if not prags:
            return s
        pf = list(itertools.chain.from_iterable(_prefetches(s, p) for p in prags))
        rest = tuple(p for p in s.pragmas if not isinstance(p, PrefetchPragma))
        return For(s.var, s.min, s.extent, s.kind, seq(*pf, s.body), s.step, rest)


def insert_prefetches(func: PrimFunc) -> PrimFunc:
    """Expand the prefetch pragmas of ``func`` (flattened) into ``llvm.prefetch`` calls at
    the start of their loops' bodies (module docstring). Helps: accesses whose latency the
    hardware prefetchers do not hide (a GEMM's ``C`` tile, rows far apart); costs one
    instruction per cache line. A function without such pragmas is returned as is.

    Raises
    ------
    LoweringError
        When a footprint exceeds :data:`MAX_LINES` lines or the loop accesses no element
        of the tensor.
    """
    body = _Insert().visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)


class _Strip(StmtMutator):
    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if not any(isinstance(p, PrefetchPragma) for p in s.pragmas):
            return s
        return For(s.var, s.min, s.extent, s.kind, s.body, s.step,
                   tuple(p for p in s.pragmas if not isinstance(p, PrefetchPragma)))


def strip_prefetch_pragmas(func: PrimFunc) -> PrimFunc:
    """``func`` without prefetch pragmas (GPU targets, CUDA and HIP: ``Stage.prefetch`` is a
    documented no-op there, the hardware caches and ``cp.async`` stages do that work)."""
    body = _Strip().visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)
