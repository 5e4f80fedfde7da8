"""Barriers out of divergent code: a ``__syncthreads()`` must be reached by every thread of
the block (CUDA C Programming Guide, "Synchronization Functions"; the same holds for
HIP's ``__syncthreads`` and AMD's ``s_barrier``).

isl's AST generator hoists a test on a hardware index (``threadIdx.x <= 4``: a stage that
runs on fewer threads than the block has) as high as it can, above the code of a shared
stage and the barriers placed around it. This pass sinks such tests below the barriers:
``if c { S1; sync; S2 }`` becomes ``if c { S1 }; sync; if c { S2 }``, which runs the same
statement instances and lets every thread reach the barrier. A test only moves past loops
and lets whose values are the same in every thread; what cannot be made uniform (a barrier
in a loop whose bounds depend on the thread, or in an ``else`` of a divergent test) is
refused.
"""

from __future__ import annotations

import dataclasses

from polytile.errors import LoweringError
from polytile.te.expr import And, Not
from polytile.te.visitor import free_vars

from ..loop_ir import For, IfThenElse, LetStmt, Seq, Stmt, Sync, seq, walk_stmts


def _has_sync(s: Stmt | None) -> bool:
    return s is not None and any(isinstance(x, Sync) for x in walk_stmts(s))


class _Sinker:
    def __init__(self, kernel: str, divergent: set):
        self.kernel = kernel
        self.divergent = set(divergent)   # variables whose value differs between threads

    def _varies(self, *exprs) -> bool:
        return any(v in self.divergent for e in exprs for v in free_vars(e))

    def _refuse(self, what: str):
        raise LoweringError(
            f"kernel {self.kernel!r}: a barrier (__syncthreads) would sit in {what}, which not "
            f"every thread of the block reaches; hint: give the stages of this kernel loops "
            f"whose extents do not depend on threadIdx (bind equal thread extents, or compute "
            f"the shared stage at an outer loop)")

    def visit(self, s: Stmt, guard=None) -> Stmt:
        """``s`` run under ``guard`` (a divergent condition or None), with every barrier
        outside divergent tests."""
        if not _has_sync(s):
            return s if guard is None else IfThenElse(guard, s)
        if isinstance(s, Sync):
            return s
        if isinstance(s, Seq):
            return seq(*[self.visit(x, guard) for x in s.stmts])
        if isinstance(s, IfThenElse):
            if not self._varies(s.cond):
                then = self.visit(s.then_case, guard)
                other = None if s.else_case is None else self.visit(s.else_case, guard)
                return IfThenElse(s.cond, then, other)
            if _has_sync(s.else_case):
                self._refuse("the else branch of a test on the thread index")
            inner = s.cond if guard is None else And("bool", guard, s.cond)
            then = self.visit(s.then_case, inner)
            if s.else_case is None:
                return then
            # the threads of the else branch skip the then branch's barriers: their code
            # may as well run after them
            return seq(then, self.visit(IfThenElse(Not("bool", s.cond), s.else_case), guard))
        if isinstance(s, For):
            if self._varies(s.min, s.extent):
                self._refuse(f"loop {s.var.name!r}, whose bounds depend on the thread index")
            return dataclasses.replace(s, body=self.visit(s.body, guard))
        if isinstance(s, LetStmt):
            if self._varies(s.value):
                self.divergent.add(s.var)
            return dataclasses.replace(s, body=self.visit(s.body, guard))
        body = getattr(s, "body", None)
        if body is not None:
            return dataclasses.replace(s, body=self.visit(body, guard))
        self._refuse(f"a {type(s).__name__} statement")


def sink_divergent_guards(stmt: Stmt, thread_vars, kernel: str = "kernel") -> Stmt:
    """``stmt`` (the body of one GPU kernel) with its tests on the ``thread_vars`` (the
    loop-IR variables of ``threadIdx.*``) moved below every barrier, so that each
    ``Sync`` is reached by all threads of the block.

    Raises
    ------
    LoweringError
        When a barrier sits in a loop whose bounds depend on the thread index, or in the
        else branch of a test on it.
    """
    return _Sinker(kernel, set(thread_vars)).visit(stmt)
