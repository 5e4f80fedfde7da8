"""Software prefetches (TVM's ``Stage.prefetch``), after storage flattening.

Meaning: a ``For`` over ``v`` whose ``pragmas`` hold a
:class:`~..kinds.PrefetchPragma` for buffer ``T`` and offset ``d`` starts each iteration
with ``prefetch(&T[x])``, where ``T[x]`` is the first load of ``T`` in the loop's body
with ``v`` replaced by ``v + d * step`` and each loop inside at its first iteration. A
prefetch is a hint (``llvm.prefetch`` never faults and changes no value), so any address
is safe; what matters is that it is the line the loop will read ``d`` iterations later.
"""

from __future__ import annotations

from polytile.errors import LoweringError, format_error
from polytile.te.expr import Binary, Const
from polytile.te.visitor import collect, substitute

from ..kinds import PrefetchPragma
from .simplify import simplify_expr
from ..loop_ir import (AccessPtr, Allocate, Evaluate, ExternCall, For, IfThenElse, LetStmt,
                       Load, Seq, Stmt, StmtMutator, Store, seq)


def _first_load(s: Stmt, name: str, env: dict, inside: set):
    """The flat index of the first load of buffer ``name`` in ``s`` (loop and let
    variables replaced through ``env``), with its buffer; None if there is none."""
    if isinstance(s, Seq):
        for x in s.stmts:
            found = _first_load(x, name, env, inside)
            if found is not None:
                return found
        return None
    if isinstance(s, For):
        return _first_load(s.body, name, {**env, s.var: substitute(s.min, env)}, inside)
    if isinstance(s, LetStmt):
        return (_load_in(s.value, name, env, inside)
                or _first_load(s.body, name, {**env, s.var: substitute(s.value, env)},
                               inside))
    if isinstance(s, Allocate):
        return _first_load(s.body, name, env, inside | {s.buffer.name})
    if isinstance(s, IfThenElse):
        return (_load_in(s.cond, name, env, inside)
                or _first_load(s.then_case, name, env, inside)
                or (None if s.else_case is None
                    else _first_load(s.else_case, name, env, inside)))
    if isinstance(s, Store):
        for e in (*s.indices, s.value):
            found = _load_in(e, name, env, inside)
            if found is not None:
                return found
    return None


def _load_in(e, name: str, env: dict, inside: set):
    if name in inside:    # a buffer allocated inside the loop has no address before it
        return None
    for ld in collect(e, Load):
        if ld.buffer.name == name and len(ld.indices) == 1:
            return ld.buffer, simplify_expr(substitute(ld.indices[0], env))
    return None


class _Prefetch(StmtMutator):
    def __init__(self, names: dict):
        self.names = names

    def visit_For(self, s: For):
        s = self.generic_visit(s)
        prags = [p for p in s.pragmas if isinstance(p, PrefetchPragma)]
        if not prags:
            return s
        calls = []
        for p in prags:
            name = self.names.get((p.op, p.value_index), p.op.name)
            ahead = Binary(s.var.dtype, "add", s.var, Const(s.var.dtype, p.offset * s.step))
            found = _first_load(s.body, name, {s.var: ahead}, set())
            if found is None:
                raise LoweringError(format_error(
                    "prefetch", f"loop {p.axis!r} of stage {p.stage!r} reads no element of "
                    f"{p.op.name!r} in memory", "a tensor the loop's body loads",
                    hint="a tensor inlined into the stage, or read through a cache_read "
                    "stage computed elsewhere, has no loads in the loop: prefetch the "
                    "tensor the loop reads"))
            buf, index = found
            calls.append(Evaluate(ExternCall("void", "prefetch",
                                             (AccessPtr("handle", buf, index, "r"),),
                                             "intrin")))
        return For(s.var, s.min, s.extent, s.kind, seq(*calls, s.body), s.step, s.pragmas)


def insert_prefetches(body: Stmt, names: dict) -> Stmt:
    """Insert the prefetches of the loops marked by ``Stage.prefetch`` into ``body``
    (flattened loop IR); ``names`` maps ``(operation, output index)`` to its buffer's
    name. Raises LoweringError when a marked loop loads nothing of its tensor."""
    return _Prefetch(names).visit(body)


class _Strip(StmtMutator):
    def visit_For(self, s: For):
        s = self.generic_visit(s)
        if not any(isinstance(p, PrefetchPragma) for p in s.pragmas):
            return s
        return For(s.var, s.min, s.extent, s.kind, s.body, s.step,
                   tuple(p for p in s.pragmas if not isinstance(p, PrefetchPragma)))


def strip_prefetch_pragmas(body: Stmt) -> Stmt:
    """``body`` without prefetch marks (GPU targets: a prefetch is a no-op there)."""
    return _Strip().visit(body)
