"""Traversal and rewriting of expressions.

``ExprVisitor`` and ``ExprMutator`` dispatch to ``visit_<ClassName>`` and fall back to a
generic walk over the node's sub-expression fields (declared in
:func:`polytile.te.expr.child_fields`). A mutator returns the *same* object when no child
changed, so unchanged subtrees keep their identity (Halide's ``IRMutator`` convention).

Both are linear in the size of the expression *DAG*, not of the tree it unfolds to: an
expression shared by several parents (``compute_inline`` of a stage read twice, a Python
variable used twice in a compute lambda) is visited once per walker, and a mutator maps it
to one shared result. Without that, a chain of ``L`` stages each reading its producer twice
costs ``2**L`` visits. ``memo_key(e)`` says when two visits are the same: ``id(e)`` by
default; a walker whose result depends on its own context (enclosing guards) adds that
context to the key, or returns ``None`` to walk ``e`` again.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .expr import Expr, Var, child_fields


class _Memo:
    """Per-walker memo of visits by :meth:`memo_key` (see the module docstring)."""

    def memo_key(self, e):
        """What identifies a visit of ``e``: equal keys give the first visit's result;
        ``None`` walks ``e`` again."""
        return id(e)

    def visit(self, e):
        key = self.memo_key(e)
        if key is not None:
            try:
                memo = self._memo
            except AttributeError:
                memo = self._memo = {}
            hit = memo.get(key)
            if hit is not None and hit[0] is e:
                return hit[1]
        fn = getattr(self, "visit_" + type(e).__name__, None)
        out = fn(e) if fn is not None else self.generic_visit(e)
        if key is not None:
            memo[key] = (e, out)   # holding ``e`` keeps its id from being reused
        return out


class ExprVisitor(_Memo):
    """Read-only traversal: override ``visit_<Class>`` and call ``self.generic_visit``.
    Each node is visited once per walker and :meth:`memo_key` (the module docstring)."""

    def generic_visit(self, e) -> None:
        for f in child_fields(e):
            v = getattr(e, f)
            if isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Expr):
                        self.visit(x)
            elif isinstance(v, Expr):
                self.visit(v)


class ExprMutator(_Memo):
    """Rewriting traversal: ``visit_<Class>`` returns a replacement expression. A node
    shared by several parents is rewritten once (per :meth:`memo_key`), so sharing
    survives the rewrite."""

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
    """Call ``fn`` on every sub-expression of ``e``, children before parents, once per
    node (a node shared by several parents is visited once: linear in the DAG).
    Iterative: any depth (see :mod:`polytile.te.depth`)."""
    done: set[int] = set()
    stack = [(e, False)]
    while stack:
        x, expanded = stack.pop()
        if expanded:
            fn(x)
            continue
        if id(x) in done:
            continue
        done.add(id(x))
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(list(_children(x))) if id(c) not in done)


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
