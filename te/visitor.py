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

from .expr import _CHILDREN, Binary, Const, Expr, Var, child_fields


class _Memo:
    """Per-walker memo of visits by :meth:`memo_key` (see the module docstring).

    ``visit_<Class>`` methods are looked up once per walker class and node class, and a
    walker that keeps the default :meth:`memo_key` skips calling it: a lowering visits
    hundreds of thousands of nodes, and these lookups were a tenth of its time."""

    _methods: dict = {}
    _id_key = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._methods = {}
        cls._id_key = cls.memo_key is _Memo.memo_key

    def memo_key(self, e):
        """What identifies a visit of ``e``: equal keys give the first visit's result;
        ``None`` walks ``e`` again."""
        return id(e)

    def visit(self, e):
        key = id(e) if self._id_key else self.memo_key(e)
        if key is not None:
            try:
                memo = self._memo
            except AttributeError:
                memo = self._memo = {}
            hit = memo.get(key)
            if hit is not None and hit[0] is e:
                return hit[1]
        cls = type(e)
        fn = self._methods.get(cls)
        if fn is None:
            fn = self._methods[cls] = getattr(type(self), "visit_" + cls.__name__, None) \
                or type(self).generic_visit
        out = fn(self, e)
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
        if e.__class__ is Binary:   # most nodes of index arithmetic: the loop below, unrolled
            a, b = self.visit(e.a), self.visit(e.b)
            if a is e.a and b is e.b:
                return e
            return Binary(e.dtype, e.op, a, b)
        changes = None
        for f in _CHILDREN[type(e)]:
            v = getattr(e, f)
            if isinstance(v, tuple):
                nv = tuple([self.visit(x) if isinstance(x, Expr) else x for x in v])
                for a, b in zip(nv, v):
                    if a is not b:
                        if changes is None:
                            changes = {}
                        changes[f] = nv
                        break
            elif isinstance(v, Expr):
                nv = self.visit(v)
                if nv is not v:
                    if changes is None:
                        changes = {}
                    changes[f] = nv
        return e if changes is None else replace_node(e, changes)


def replace_node(e, changes: dict):
    """``dataclasses.replace(e, **changes)`` for expression and statement nodes, without
    its per-call field analysis (each class's ``__init__`` fields are read once)."""
    names = _INIT_FIELDS.get(type(e))
    if names is None:
        fs = dataclasses.fields(e)
        names = _INIT_FIELDS[type(e)] = (tuple(f.name for f in fs)
                                         if all(f.init for f in fs) else ())
    if not names:
        return dataclasses.replace(e, **changes)
    return type(e)(*[changes[n] if n in changes else getattr(e, n) for n in names])


_INIT_FIELDS: dict = {}


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
    collect_into(e, cls, out, set())
    return out


def collect_many(exprs, cls: type | tuple) -> list:
    """``collect`` over several expressions at once: every instance of ``cls`` in any of
    ``exprs``, unique, in the order of the concatenated per-expression lists (first
    occurrence). A node shared by several of the expressions (the same index in a
    statement's load and store) is walked once, so a pass over all expressions of a
    function is linear in their DAG."""
    out: list = []
    done: set[int] = set()
    for e in exprs:
        if id(e) not in done:   # (a node of several statements: no call at all)
            collect_into(e, cls, out, done)
    return out


def collect_into(e: Expr, cls, out: list, done: set) -> None:
    """Append to ``out`` the instances of ``cls`` below ``e`` (post order) that are not
    below a node whose id is in ``done``; add the ids of the nodes walked to ``done``.
    The building block of :func:`collect` and :func:`collect_many`."""
    if id(e) in done:
        return
    children = _CHILDREN
    stack = [(e, False)]
    pop, push = stack.pop, stack.append
    while stack:
        x, expanded = pop()
        if id(x) in done:
            continue
        if expanded:
            done.add(id(x))
            if isinstance(x, cls):
                out.append(x)
            continue
        push((x, True))
        fields = children[type(x)]
        for f in reversed(fields) if len(fields) > 1 else fields:
            v = getattr(x, f)
            if isinstance(v, tuple):
                for c in reversed(v):
                    if isinstance(c, Expr) and id(c) not in done:
                        push((c, False))
            elif isinstance(v, Expr) and id(v) not in done:
                push((v, False))


class _Substitute(ExprMutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit(self, e):
        cls = e.__class__
        if cls is Var:     # leaves: answered without a memo entry (unroll substitutes
            return self.mapping.get(e, e)   # every statement of every copy)
        if cls is Const:
            return e
        return ExprMutator.visit(self, e)

    def visit_Var(self, v):
        return self.mapping.get(v, v)


def substituter(mapping: dict) -> ExprMutator:
    """The walker of :func:`substitute` (``.visit(expr)``), for reuse over several
    expressions: its memo maps a node met again to the same result."""
    return _Substitute(mapping)


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
