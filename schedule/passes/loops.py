"""Loop-kind passes: unrolling and legalisation of vectorized and parallel loops."""

from __future__ import annotations

import dataclasses

from polytile.te.expr import Binary, Cmp, Const
from polytile.te.visitor import free_vars, substituter

from ..kinds import AutoUnrollPragma, LoopKind
from ..loop_ir import (Allocate, For, IfThenElse, LetStmt, Seq, SlotExprMutator, Stmt,
                       StmtMutator, Sync, seq, walk_stmts)

#: Loops marked ``unroll`` are expanded when their extent is a constant up to this bound.
MAX_UNROLL = 256

#: The most statements one unrolled loop may expand to, counting the expansions of the
#: unrolled loops inside it (``schedule.limits`` keeps larger ones rolled, with a warning).
#: 1024 lets a GPU register tile (8x8 accumulators times a k-step of 16) unroll fully, which
#: LLVM and NVRTC compile in about two seconds.
MAX_UNROLL_STMTS = 1024

#: What a loop kept rolled inside an unrolled body counts, besides its own body: each copy
#: of a loop is analysed and optimised on its own by LLVM (1,184 copies of a two-loop nest
#: took 90 s to build), so copies of loops are budgeted harder than copies of statements.
LOOP_STMTS = 8


class _Subst(SlotExprMutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def walker(self):
        return substituter(self.mapping)

    def visit_expr(self, e):
        if not self.mapping:
            return e
        return SlotExprMutator.visit_expr(self, e)


def substitute_stmt(s: Stmt, mapping: dict) -> Stmt:
    """Replace variables in every expression of ``s``."""
    return _Subst(mapping).visit(s)


class _Unroll(StmtMutator):
    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if (s.kind != LoopKind.UNROLLED or not isinstance(s.min, Const)
                or not isinstance(s.extent, Const) or s.extent.value > MAX_UNROLL):
            return s
        lo, n = s.min.value, s.extent.value
        return seq(*[substitute_stmt(s.body, {s.var: Const("int64", v)})
                     for v in range(lo, lo + n, s.step)])


def unroll(stmt: Stmt) -> Stmt:
    """Expand ``unrolled`` loops of constant extent (at most ``MAX_UNROLL``) into copies
    of their body. Partial tiles (non-constant extent) stay serial loops. Helps: register
    reuse and constant indices; costs code size."""
    return _Unroll().visit(stmt)


def _partial_extent(s: For):
    """``(C, X)`` when ``s`` is an unrolled or vectorized loop of extent ``min(C, X)`` (a
    partial tile that isl could not separate: a ragged register tile), else ``None``."""
    e = s.extent
    if (s.kind not in (LoopKind.UNROLLED, LoopKind.VECTORIZED)
            or not isinstance(s.min, Const)):
        return None
    if not (isinstance(e, Binary) and e.op == "min"):
        return None
    for c, x in ((e.a, e.b), (e.b, e.a)):
        if isinstance(c, Const) and isinstance(c.value, int) and 1 < c.value <= MAX_UNROLL:
            return c.value, x
    return None


def _has_sync(s: Stmt) -> bool:
    return any(isinstance(x, Sync) for x in walk_stmts(s))


class _SpecializePartial(StmtMutator):
    def __init__(self, guard_unrolled: bool = False):
        self.guard_unrolled = guard_unrolled

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        part = _partial_extent(s)
        if part is not None and not _has_sync(s.body):
            c, x = part
            if self.guard_unrolled and s.kind == LoopKind.UNROLLED and s.step == 1:
                # every iteration of the full tile, each under its own test: unrolled
                # with constant indices (a thread's registers), one copy of the body
                cond = Cmp("bool", "lt", _minus(s.var, s.min), x)
                return For(s.var, s.min, Const(s.extent.dtype, c), s.kind,
                           IfThenElse(cond, s.body), s.step, s.pragmas)
            full = For(s.var, s.min, Const(s.extent.dtype, c), s.kind, s.body, s.step,
                       s.pragmas)
            return IfThenElse(Cmp("bool", "ge", x, Const(x.dtype, c)), full, s)
        body = s.body
        if (s.kind in (LoopKind.SERIAL, LoopKind.UNROLLED) and isinstance(body, IfThenElse)
                and body.else_case is not None and s.var not in free_vars(body.cond)
                and not _has_sync(body)):
            # hoist the test out of the loop (unswitching): the full tile's loop (the k
            # loop of a GEMM micro-kernel) then runs without a branch per iteration
            return IfThenElse(body.cond, dataclasses.replace(s, body=body.then_case),
                              dataclasses.replace(s, body=body.else_case))
        return s


def specialize_partial_unrolls(stmt: Stmt) -> Stmt:
    """Give an ``unrolled`` or ``vectorized`` loop of extent ``min(C, X)`` (a ragged last
    register tile, which ``unroll`` would leave a loop and ``legalize_vector_loops`` a
    scalar loop) a copy of constant extent ``C`` for the full tiles: ``if X >= C: <loop of
    C> else: <the loop>``, the test hoisted out of serial and unrolled loops that do not
    define ``X`` (the micro-kernel's ``k`` loop and its unrolled rows). A GEMM whose ``M``
    or ``N`` is not a multiple of the register tile then keeps the accumulators of all its
    full tiles in vector registers (with ``N = 1000`` every column panel of the ragged
    column block ran as scalar code before: a third of the speed); only the last tile runs
    rolled. Runs before ``legalize_vector_loops``. Loops holding a barrier are left alone
    (the test may differ between threads)."""
    return _SpecializePartial().visit(stmt)


def guard_partial_unrolls(stmt: Stmt) -> Stmt:
    """:func:`specialize_partial_unrolls` for GPUs, except that an ``unrolled`` loop of
    extent ``min(C, X)`` becomes ``C`` iterations, each under ``if (i < X)``: the loop
    unrolls into one guarded copy of its body per iteration. Specialized, the partial
    tile's copy stayed a loop of run-time extent indexing the thread's register arrays
    (local memory), and the tests hoisted out of the unrolled loops around it doubled the
    code at each level: tutorial 04's default SGEMM at 1004 x 1028 x 516 took nvcc
    minutes. Vectorized loops are specialized as on CPUs."""
    return _SpecializePartial(guard_unrolled=True).visit(stmt)


def _minus(v, lo):
    if isinstance(lo, Const) and lo.value == 0:
        return v
    return Binary(v.dtype, "sub", v, lo)


def masked_extent(s: For):
    """``(C, X)`` when ``s`` is a vectorized loop of unit step and extent ``min(C, X)``
    with a constant ``C`` (the ragged last vector of a split), else ``None``."""
    if s.kind != LoopKind.VECTORIZED or s.step != 1:
        return None
    return _partial_extent(dataclasses.replace(s, kind=LoopKind.UNROLLED))


class _LegalizeVector(StmtMutator):
    def __init__(self, masked: bool):
        self.masked = masked

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if s.kind != LoopKind.VECTORIZED:
            return s
        inner_loop = any(isinstance(x, For) for x in walk_stmts(s.body))
        if self.masked and not inner_loop and masked_extent(s) is not None:
            return s
        if not isinstance(s.extent, Const) or s.step != 1 or inner_loop:
            # the partial tile of a non-divisible split runs as scalar code
            return For(s.var, s.min, s.extent, LoopKind.SERIAL, s.body, s.step, s.pragmas)
        return s


def legalize_vector_loops(stmt: Stmt, masked: bool = False) -> Stmt:
    """Turn vectorized loops that the targets cannot widen (a non-constant extent: the
    partial tile of a split) into serial loops. Guarantees: every remaining ``vectorized``
    loop has unit step, no inner loop and a constant extent, or with ``masked`` (targets
    with masked vector memory access: ``llvm``) an extent ``min(C, X)`` of constant ``C``
    (see :func:`masked_extent`), which runs as ``C`` lanes of which those below ``X`` are
    active."""
    return _LegalizeVector(masked).visit(stmt)


def legalize_vector_loops_masked(stmt: Stmt) -> Stmt:
    """:func:`legalize_vector_loops` keeping ragged vectors (``masked=True``)."""
    return legalize_vector_loops(stmt, masked=True)


class _SerialNested(StmtMutator):
    def __init__(self):
        self.depth = 0

    def visit_For(self, s: For):
        if s.kind != LoopKind.PARALLEL:
            return self.generic_visit(s)
        outer = self.depth > 0
        self.depth += 1
        s = self.generic_visit(s)
        self.depth -= 1
        if outer:
            return For(s.var, s.min, s.extent, LoopKind.SERIAL, s.body, s.step, s.pragmas)
        return s


def serialize_nested_parallel(stmt: Stmt) -> Stmt:
    """A parallel loop inside another parallel loop runs serially (one level of CPU
    threads, as TVM and OpenMP's default)."""
    return _SerialNested().visit(stmt)


class _DedupSync(StmtMutator):
    def visit_Seq(self, s):
        s = self.generic_visit(s)
        if not isinstance(s, Seq):
            return s
        out: list = []
        for x in s.stmts:
            if isinstance(x, Sync) and out and isinstance(out[-1], Sync):
                continue
            out.append(x)
        return seq(*out)


def dedup_syncs(stmt: Stmt) -> Stmt:
    """Merge barriers that follow each other directly (one is enough)."""
    return _DedupSync().visit(stmt)


def _expanded_stmts(s: Stmt) -> int | None:
    """How many statements ``s`` runs as straight-line code (unrolled loops expanded), or
    None when a loop stays rolled inside it (a loop of non-constant extent, a parallel or
    vectorized one) or it allocates."""
    if isinstance(s, Seq):
        total = 0
        for x in s.stmts:
            n = _expanded_stmts(x)
            if n is None:
                return None
            total += n
        return total
    if isinstance(s, For):
        if s.kind != LoopKind.UNROLLED or not isinstance(s.extent, Const):
            return None
        n = _expanded_stmts(s.body)
        return None if n is None else n * len(range(0, s.extent.value, s.step))
    if isinstance(s, IfThenElse):
        a = _expanded_stmts(s.then_case)
        b = 0 if s.else_case is None else _expanded_stmts(s.else_case)
        return None if a is None or b is None else 1 + a + b
    if isinstance(s, LetStmt):
        n = _expanded_stmts(s.body)
        return None if n is None else 1 + n
    if isinstance(s, Allocate):
        return None
    return 1


class _AutoUnroll(StmtMutator):
    def __init__(self):
        self.limits: list[int] = []

    def visit_For(self, s: For):
        own = [p.max_step for p in s.pragmas if isinstance(p, AutoUnrollPragma)]
        self.limits.extend(own)
        body = self.visit(s.body)
        del self.limits[len(self.limits) - len(own):]
        if own and isinstance(s.extent, Const) and s.extent.value == 1:
            # the scope of one iteration made for the pragma (astgen, a kernel's bound
            # loop) is no loop of the code
            return LetStmt(s.var, s.min, body)
        if body is not s.body:
            s = dataclasses.replace(s, body=body)
        if (not self.limits or s.kind != LoopKind.SERIAL or not isinstance(s.min, Const)
                or not isinstance(s.extent, Const)):
            return s
        n = _expanded_stmts(s.body)
        trips = len(range(0, s.extent.value, s.step))
        if n is None or trips * n > min(self.limits[-1], MAX_UNROLL_STMTS) \
                or s.extent.value > MAX_UNROLL:
            return s
        return dataclasses.replace(s, kind=LoopKind.UNROLLED)


def auto_unroll(stmt: Stmt) -> Stmt:
    """TVM's ``auto_unroll_max_step`` pragma: inside a loop carrying an
    :class:`~..kinds.AutoUnrollPragma` ``N`` (the innermost such loop decides), mark
    ``unrolled`` each serial loop of constant bounds whose body holds no rolled loop and
    that expands to at most ``N`` statements (trip count times the statements of its body,
    inner unrolled loops expanded; at most ``MAX_UNROLL_STMTS``). Unrolling keeps the
    order of iterations, so it is always legal; ``unroll`` then expands the loops.
    Helps: small inner loops (a 3x3 stencil window) become straight-line code."""
    return _AutoUnroll().visit(stmt)
