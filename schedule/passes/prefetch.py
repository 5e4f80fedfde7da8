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
lines past the last iteration cost nothing but the instruction. Which loops may carry one
(serial or parallel, not split afterwards; on a GPU a kernel's loop bound to
``blockIdx``) is checked with the schedule (``validate._check_prefetch_loops``).

On CUDA (:func:`insert_block_prefetches`) the loop is a kernel's block loop: at the start
of each block, every thread prefetches the lines of its own accesses in block ``blockIdx
+ offset`` (a warp's prefetches of one line are one request, as its loads are), one PTX
``prefetch`` per :data:`GPU_LINE_BYTES` of each run: ``prefetch.global.L1`` where the
lines are the same for every block (a per-column vector that this SM reads again: the
first blocks on each SM find it in L1 rather than wait for DRAM after their reductions),
``prefetch.global.L2`` where they depend on the block (another block's data, read on any
SM), only for blocks inside the grid. Accesses under a condition (a ragged row's guarded
tail) are left out, so no prefetch addresses an element the kernel does not read. Other
GPU loops and other GPU targets drop the pragmas (:func:`strip_prefetch_pragmas`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from polytile.errors import LoweringError, format_error
from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cmp, Const, Var
from polytile.te.visitor import collect, free_vars, substitute

from ..kinds import LoopKind, PrefetchPragma
from ..loop_ir import (AccessPtr, Allocate, Evaluate, ExternCall, For, IfThenElse,
                       KernelLaunch, LetStmt, Load, PrimFunc, Seq, Stmt, StmtMutator, Store,
                       expr_str, seq, stmt_exprs, walk_stmts)
from .simplify import _linear, _rebuild, simplify_expr

#: Bytes of one cache line: a run of contiguous elements gets one prefetch per line.
LINE_BYTES = 64
#: Bytes of one GPU cache line (L1 and L2 lines of NVIDIA GPUs since Fermi: 128 bytes, four
#: 32-byte sectors): one prefetch per line of a run.
GPU_LINE_BYTES = 128
#: The most prefetch instructions one iteration may issue (a larger footprint is a
#: schedule error: it would evict more than it brings in).
MAX_LINES = 1024


def _sites(body: Stmt, name: str) -> list:
    """``(buffer, index, is_store, loops, guarded)`` of each access to buffer ``name`` in
    ``body``, with the ``let`` values bound inside ``body`` substituted into ``index``;
    ``guarded``: inside a branch of an ``IfThenElse``."""
    out: list = []

    def loads(exprs, lets, loops, guarded):
        for e in exprs:
            for ld in collect(e, Load):
                if ld.buffer.name == name:
                    out.append((ld.buffer, substitute(ld.indices[0], lets), False, loops,
                                guarded))

    def walk(s: Stmt, lets: dict, loops: tuple, guarded: bool):
        if isinstance(s, Store):
            loads([s.value, *s.indices], lets, loops, guarded)
            if s.buffer.name == name:
                out.append((s.buffer, substitute(s.indices[0], lets), True, loops, guarded))
        elif isinstance(s, For):
            loads([s.min, s.extent], lets, loops, guarded)
            walk(s.body, lets, loops + (s,), guarded)
        elif isinstance(s, LetStmt):
            loads([s.value], lets, loops, guarded)
            walk(s.body, {**lets, s.var: substitute(s.value, lets)}, loops, guarded)
        elif isinstance(s, IfThenElse):
            loads([s.cond], lets, loops, guarded)
            walk(s.then_case, lets, loops, True)
            if s.else_case is not None:
                walk(s.else_case, lets, loops, True)
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, lets, loops, guarded)
        elif isinstance(s, Allocate):
            walk(s.body, lets, loops, guarded)
        else:
            loads(list(stmt_exprs(s)), lets, loops, guarded)

    walk(body, {}, (), False)
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


def _prefetches(loop: For, prag: PrefetchPragma, emit=None, line_bytes: int = LINE_BYTES,
                unguarded: bool = False, short_run: int = 0) -> list:
    """The prefetch statements of ``prag`` at the start of ``loop``'s body: ``emit(buf,
    address, write, base)`` (default :func:`_prefetch`) per line of ``line_bytes`` of each
    footprint at ``base``, and at the last element of a run of more than ``short_run``
    bytes; ``unguarded``: of the accesses outside conditions only (none when all are
    under one)."""
    emit = emit or (lambda buf, addr, write, base: _prefetch(buf, addr, write))
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
    for buf, index, store, loops, guarded in sites:
        if guarded and unguarded:
            continue
        fp = _footprint(substitute(index, {loop.var: ahead}), loops)
        if fp is None:
            continue
        base, rows, run = fp
        key = (buf.name, expr_str(base), rows, run)
        old = found.get(key)
        found[key] = (buf, base, rows, run, store or (old is not None and old[4]))
    out = []
    for buf, base, rows, run, write in found.values():
        step = max(1, line_bytes // dt.nbytes(buf.dtype))
        offs = set(range(0, run, step))
        if run * dt.nbytes(buf.dtype) > short_run:
            offs.add(run - 1)   # the run may end in a line its start's prefetches miss
        offs = sorted(offs)
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
        body = seq(*[emit(buf, simplify_expr(Binary("int64", "add", at, Const("int64", o))),
                          write, base) for o in offs])
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


def _gpu_prefetch(block: Var):
    """The CUDA prefetch of one line (module docstring): into L1 when the footprint's
    ``base`` does not depend on ``block``, else into L2."""
    def emit(buf, addr, write: bool, base) -> Stmt:
        level = "L2" if block in free_vars(base) else "L1"
        ptr = AccessPtr("handle", buf, addr, "w" if write else "r")
        return Evaluate(ExternCall("void", f"prefetch.global.{level}", (ptr,), "intrin"))
    return emit


class _BlockPrefetch(StmtMutator):
    def __init__(self, requests: dict):
        self.requests = requests

    def visit_KernelLaunch(self, s: KernelLaunch):
        reqs = self.requests.get(s.name, ())
        if not reqs:
            return s
        tvars = {tag: v for v, tag in s.thread_vars}
        pf = []
        for prag, tag, extent in reqs:
            # a block index the body does not use: every block reads the same lines
            var = tvars[tag] if tag in tvars else Var("int64", tag)
            loop = For(var, Const("int64", 0), Const("int64", extent), LoopKind.SERIAL, s.body)
            ahead = Binary("int64", "add", var, Const("int64", prag.offset))
            inside = (Cmp("bool", "lt", ahead, Const("int64", extent)) if prag.offset > 0
                      else Cmp("bool", "ge", ahead, Const("int64", 0)))
            # runs of at most 16 bytes are the kernel's own aligned vector accesses (or
            # narrower), which do not cross a line: no second prefetch at their end
            for st in _prefetches(loop, prag, _gpu_prefetch(var), GPU_LINE_BYTES,
                                  unguarded=True, short_run=16):
                uses = any(var in free_vars(e) for x in walk_stmts(st) for e in stmt_exprs(x))
                pf.append(IfThenElse(inside, st) if uses else st)
        return dataclasses.replace(s, body=seq(*pf, s.body))


def insert_block_prefetches(func: PrimFunc, requests: dict) -> PrimFunc:
    """CUDA: the prefetches of ``Stage.prefetch`` on a kernel's block loop at the start of
    its body (module docstring). ``requests``: kernel name -> ``(PrefetchPragma, tag,
    extent)`` with ``tag`` the loop's ``blockIdx.*`` and ``extent`` the grid's size in
    it. Helps when the first blocks on each SM would wait for lines that the blocks will
    all read (a per-column vector after the row's reduction), or when the next blocks'
    rows can be brought into L2 early; costs one instruction per line and thread.

    Raises
    ------
    LoweringError
        As :func:`insert_prefetches` (accesses all under conditions prefetch nothing).
    """
    if not requests:
        return func
    body = _BlockPrefetch(requests).visit(func.body)
    return func if body is func.body else dataclasses.replace(func, body=body)
