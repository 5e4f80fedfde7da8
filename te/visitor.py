"""Traversal and rewriting of expressions.

``ExprVisitor`` and ``ExprMutator`` dispatch to ``visit_<ClassName>`` and fall back to a
generic walk over the node's sub-expression fields (declared in
:func:`polytile.te.expr.child_fields`). A mutator returns the *same* object when no child
changed, so unchanged subtrees keep their identity (Halide's ``IRMutator`` convention).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .expr import Expr, Var, child_fields


class ExprVisitor:
    """Read-only traversal: override ``visit_<Class>`` and call ``self.generic_visit``."""

    def visit(self, e):
        fn = getattr(self, "visit_" + type(e).__name__, None)
        if fn is not None:
            return fn(e)
        return self.generic_visit(e)

    def generic_visit(self, e) -> None:
        for f in child_fields(e):
            v = getattr(e, f)
            if isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Expr):
                        self.visit(x)
            elif isinstance(v, Expr):
                self.visit(v)


class ExprMutator:
    """Rewriting traversal: ``visit_<Class>`` returns a replacement expression."""

    def visit(self, e):
        fn = getattr(self, "visit_" + type(e).__name__, None)
        if fn is not None:
            return fn(e)
        return self.generic_visit(e)

    def generic_visit(self, e):
        changes = {}
        for f in child_fields(e):
            v = getattr(e, f)
            if isinstance(v, tuple):
                nv = tuple(self.visit(x) if isinstance(x, Expr) else x for x in v)
                if any(a is not b for a, b in zip(nv, v)):
                    changes[f] = nv
            elif isinstance(v, Expr):
                nv = self.visit(v)
                if nv is not v:
                    changes[f] = nv
        return dataclasses.replace(e, **changes) if changes else e


def _children(e):
    for f in child_fields(e):
        v = getattr(e, f)
        if isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, Expr))
        elif isinstance(v, Expr):
            yield v


def post_order_visit(e: Expr, fn: Callable[[Expr], None]) -> None:
    """Call ``fn`` on every sub-expression of ``e``, children before parents (each
    occurrence of a shared node). Iterative: any depth (see :mod:`polytile.te.depth`)."""
    stack = [(e, False)]
    while stack:
        x, expanded = stack.pop()
        if expanded:
            fn(x)
            continue
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(list(_children(x))))


def collect(e: Expr, cls: type | tuple) -> list:
    """All sub-expressions of ``e`` that are instances of ``cls``, in post order, unique.
    Iterative, and each shared node is walked once: in post order every node below a node
    is listed before it, so a second walk of a finished node lists nothing new."""
    out: list = []
    done: set[int] = set()
    stack = [(e, False)]
    while stack:
        x, expanded = stack.pop()
        if id(x) in done:
            continue
        if expanded:
            done.add(id(x))
            if isinstance(x, cls):
                out.append(x)
            continue
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(list(_children(x))) if id(c) not in done)
    return out


class _Substitute(ExprMutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Var(self, v):
        return self.mapping.get(v, v)


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables by expressions: ``mapping`` is ``{Var: Expr}``."""
    if not mapping:
        return e
    return _Substitute(mapping).visit(e)


def free_vars(e: Expr) -> list[Var]:
    """The variables read by ``e``, in first-use order."""
    return collect(e, Var)


def structural_equal(a, b) -> bool:
    """True when ``a`` and ``b`` have the same structure, variables compared by identity."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(structural_equal(x, y) for x, y in zip(a, b))
    if not isinstance(a, Expr):
        return a == b
    if isinstance(a, Var):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, (Expr, tuple)) or isinstance(y, (Expr, tuple)):
            if not structural_equal(x, y):
                return False
        elif x is not y and x != y:
            return False
    return True
