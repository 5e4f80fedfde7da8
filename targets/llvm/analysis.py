"""Small read-only analyses of loop IR used by the LLVM backend.

* :func:`may_trap` decides whether an operand of a lazy ``Select`` (or of ``And``/``Or``)
  must stay behind a branch: evaluating it could read memory or divide by zero.
* :func:`used_symbols` lists the variables and buffers a statement reads (what an outlined
  parallel body captures).
* :func:`stored_buffers` lists the buffers a function writes (the wrapper refuses read-only
  arrays for them).
* :func:`varying_vars` finds the ``LetStmt`` variables of a vectorized body that depend on
  its loop variable.
"""

from __future__ import annotations

from polytile.schedule.loop_ir import (AccessPtr, Allocate, Buffer, Evaluate, ExternCall, For,
                                       LetStmt, Load, Stmt,
                                       Store, TensorCall, stmt_exprs, walk_stmts)
from polytile.te import dtype as dt
from polytile.te.expr import _CHILDREN, Binary, Const, Expr, Var, child_fields

_DIVS = ("truncdiv", "truncmod", "floordiv", "floormod")


def _children(e: Expr):
    for f in child_fields(e):
        v = getattr(e, f)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, Expr):
                yield x


def _safe_divisor(b: Expr) -> bool:
    # x / c cannot trap for a constant c other than 0 and -1 (INT_MIN / -1 traps on x86)
    return isinstance(b, Const) and b.value not in (0, -1)


def _in_stack_bounds(x: Load) -> bool:
    """Is ``x`` a read of a stack buffer (an ``alloca`` of constant size) at constant
    indices inside its shape? It cannot trap, so a ``Select`` or ``and``/``or`` reading it
    need not branch (fuzz llvm 97008: a tuple argmin's accumulators read in short-circuit
    conditions made branches that LLVM 22's loop vectorizer took minutes over)."""
    shape = x.buffer.shape
    return (x.buffer.scope in ("stack", "local") and len(x.indices) == len(shape)
            and all(isinstance(i, Const) and isinstance(n, (int, Const))
                    and 0 <= int(i.value) < int(getattr(n, "value", n))
                    for i, n in zip(x.indices, shape)))


def may_trap(e: Expr, done: set[int] = frozenset()) -> bool:
    """True when evaluating ``e`` may read memory (a ``Load``, except one of a stack buffer
    inside its bounds: :func:`_in_stack_bounds`) or perform an integer
    division by a divisor that is not a constant other than 0 and -1, counting only nodes
    whose identity is not in ``done`` (nodes already evaluated unconditionally, such as the
    ``Select`` condition that shares them)."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in done or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Load):
            if not _in_stack_bounds(x):
                return True
        if (isinstance(x, Binary) and x.op in _DIVS and not dt.is_float(x.dtype)
                and not _safe_divisor(x.b)):
            return True
        stack.extend(_children(x))
    return False


#: conditions with more nodes are not searched for nodes shared with the operands
_SHARED_SEARCH = 256


def traps_after(cond: Expr, *operands: Expr) -> bool:
    """:func:`may_trap` of any of ``operands`` once ``cond`` was evaluated. The nodes of
    ``cond`` are collected only when an operand may trap at all, and only up to
    ``_SHARED_SEARCH`` of them (beyond, the answer is a conservative ``True``: the operand
    is evaluated lazily behind a branch), so a deep chain of ``and``/``or``/``select``
    costs linear time, not quadratic."""
    if not any(may_trap(o) for o in operands):
        return False
    done = _ids_up_to(cond, _SHARED_SEARCH)
    return done is None or any(may_trap(o, done) for o in operands)


def _ids_up_to(e: Expr, limit: int) -> set[int] | None:
    """Identities of every node of ``e`` (shared nodes counted once), or ``None`` when it
    has more than ``limit`` nodes."""
    out: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in out:
            continue
        out.add(id(x))
        if len(out) > limit:
            return None
        stack.extend(_children(x))
    return out


#: How :func:`_expr_symbols` treats each expression class (filled on first sight):
#: 0 a node to walk, 1 a variable, 2 a buffer access (walked too), 3 a constant, and
#: the node's child fields in reverse order. A kernel's expressions hold tens of thousands
#: of nodes, most of them constants and variables, which this walk leaves at once.
_SYMBOL_KIND: dict = {}


def _symbol_kind(cls: type) -> tuple:
    kind = (1 if issubclass(cls, Var) else 2 if issubclass(cls, (Load, AccessPtr))
            else 3 if issubclass(cls, Const) else 0)
    out = _SYMBOL_KIND[cls] = (kind, tuple(reversed(_CHILDREN[cls])))
    return out


def _expr_symbols(e: Expr, out: dict, seen: set) -> None:
    """Add the variables and buffers of ``e`` to ``out`` in pre-order, skipping the nodes
    whose identity is in ``seen`` (walked for an earlier expression, with everything
    below them) and adding the nodes walked to it."""
    stack = [e]
    pop, push, kinds = stack.pop, stack.append, _SYMBOL_KIND
    while stack:
        x = pop()
        kind, fields = kinds.get(x.__class__) or _symbol_kind(x.__class__)
        if kind == 3:
            continue
        if kind == 1:   # a leaf: listed once by ``setdefault``, no need to remember it
            out.setdefault(x, None)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        if kind == 2:
            out.setdefault(x.buffer, None)
        for f in fields:
            v = getattr(x, f)
            if v.__class__ is tuple:
                stack.extend(c for c in reversed(v) if isinstance(c, Expr))
            elif isinstance(v, Expr):
                push(v)


def used_symbols(s: Stmt) -> list:
    """Variables and buffers read or written anywhere in ``s`` (including the shape
    expressions of its allocations), in first-use order, without duplicates."""
    out: dict = {}
    seen: set[int] = set()   # expression nodes walked: shared ones are walked once
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.setdefault(x.buffer, None)
        if isinstance(x, TensorCall):
            for b in x.buffers:
                out.setdefault(b, None)
        if isinstance(x, Allocate):
            for d in x.buffer.shape:
                if isinstance(d, Expr):
                    _expr_symbols(d, out, seen)
        for e in stmt_exprs(x):
            _expr_symbols(e, out, seen)
    return list(out)


def stored_buffers(s: Stmt) -> set[Buffer]:
    """Buffers that some ``Store`` (or tensor intrinsic call, or atomic update such as an
    int4 store in a parallel loop) in ``s`` writes."""
    out = set()
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.add(x.buffer)
        elif isinstance(x, TensorCall):
            out.update(x.output_buffers())
        elif (isinstance(x, Evaluate) and isinstance(x.value, ExternCall)
              and x.value.kind == "atomic"):
            out.update(a.buffer for a in x.value.args if isinstance(a, AccessPtr))
    return out


def has_inner_for(s: Stmt) -> bool:
    """True when ``s`` contains a ``For`` statement."""
    return any(isinstance(x, For) for x in walk_stmts(s))


def depends_on(e: Expr, vs: set) -> bool:
    """True when expression ``e`` reads one of the variables ``vs``."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Var) and x in vs:
            return True
        stack.extend(_children(x))
    return False


def varying_vars(loop_var: Var, body: Stmt) -> set:
    """``loop_var`` and the ``LetStmt`` variables of ``body`` whose value depends on it."""
    vs = {loop_var}
    for x in walk_stmts(body):
        if isinstance(x, LetStmt) and depends_on(x.value, vs):
            vs.add(x.var)
    return vs
