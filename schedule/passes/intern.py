"""Interning: structurally equal expressions of different statements become one object.

Unrolling copies a loop body once per iteration, and each copy gets its own expression
nodes: the 1,024 multiply-adds of a GPU register tile (8x8 accumulators, 16 k steps)
read 128 distinct ``A.shared`` elements through 1,024 distinct ``Load`` nodes. Every
later walker memoizes by node identity (``ExprMutator``, ``collect_many``, the storage
passes, index narrowing, the code generators' symbol scans), so a node shared by several
statements is worked on once; this pass makes equal nodes of different statements one
node, and the passes after it (storage flattening, the final simplify, index narrowing,
code generation) walk the expression DAG instead of every copy.

Assumes: expressions are immutable and pure values (a node means its structure: equal
structures compute equal values wherever they are evaluated); the passes after this one
tell shared nodes apart only within one statement (``share_subexpressions`` has run: it
binds the nodes one statement uses twice; the LLVM backend evaluates an operand of a lazy
``select`` eagerly when its condition evaluates the same node).

Guarantees: every statement keeps exactly its sharing structure: two occurrences within
one statement are the same object after this pass if and only if they were before (an
equal node already used by the statement for another original is copied instead), so no
statement's code changes; only nodes of different statements are merged. Variables and
buffers are compared by identity; constants by dtype and value (``-0.0`` and ``0.0``, and
``1`` and ``1.0``, stay apart). Only the side-effect-free arithmetic nodes, casts,
comparisons, selects and loads are merged; other nodes (calls, pointers) keep their
identity, their operands being interned.

Helps: compile time of unrolled kernels (the tutorial's register-tiled SGEMM: the
walks after the loop passes see an eighth of the nodes).
"""

from __future__ import annotations

import dataclasses

from polytile.te.expr import (_CHILDREN, And, Binary, Cast, Cmp, Const, Expr, Not, Or, Select,
                              Var)
from polytile.te.visitor import replace_node

from ..loop_ir import Load, StmtMutator

#: The node classes that are merged (values without side effects).
MERGED = (Binary, Cast, Cmp, And, Or, Not, Select, Load)

#: Per class: its fields that are not sub-expressions (part of the key), then its
#: sub-expression fields.
_LAYOUT: dict = {}


def _layout(cls: type) -> tuple:
    kids = _CHILDREN[cls]
    other = tuple(f.name for f in dataclasses.fields(cls) if f.name not in kids)
    out = _LAYOUT[cls] = (other, kids)
    return out


class _Intern:
    """The expression half: ``canon`` (key -> node) lives for the whole pass; ``memo``
    (id of an original -> its result), ``handed`` (ids of the results given out) and
    ``count`` (key -> how many distinct originals of that key were met) for one
    statement."""

    def __init__(self):
        self.canon: dict = {}
        self.consts: dict = {}    # (dtype, value class, value) -> the constant
        self.const_of: dict = {}  # id of a constant met -> (it, its canonical constant)
        self.memo: dict = {}
        self.handed: set = set()
        self.count: dict = {}     # key -> equal originals of this statement met so far

    def statement(self) -> None:
        self.memo = {}
        self.handed = set()
        self.count = {}

    def visit(self, e: Expr) -> Expr:
        cls = e.__class__
        if cls is Var:
            return e
        if cls is Const:
            # one object per value, even within a statement: no walker tells constants
            # apart (they are never let-bound, never trap), and the parents of equal
            # constants of one statement (``8*ty + 1`` beside ``C.local[1, 1]``) must meet;
            # so the answer does not depend on the statement: remembered for the whole pass
            # (half the nodes of an unrolled kernel are constants)
            hit = self.const_of.get(id(e))
            if hit is not None:
                return hit[1]
            v = e.value
            key = (e.dtype, v.__class__, v if v.__class__ is int else repr(v))
            out = self.consts.get(key)
            if out is None:
                out = self.consts[key] = e
            self.const_of[id(e)] = (e, out)   # holding ``e`` keeps its id from being reused
            return out
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        changes = None
        if cls is Binary:   # most nodes: the general walk below, unrolled
            a, b = self.visit(e.a), self.visit(e.b)
            key = (e.op, e.dtype, id(a), id(b))
            if a is not e.a or b is not e.b:
                changes = {"a": a, "b": b}
        elif cls is Load:   # the other frequent node: the general walk below, unrolled
            old = e.indices
            new = tuple([self.visit(x) if isinstance(x, Expr) else x for x in old])
            key = (cls, (e.dtype, e.buffer), (tuple([id(x) for x in new]),))
            for x, y in zip(new, old):
                if x is not y:
                    changes = {"indices": new}
                    break
        else:
            other, kids = _LAYOUT.get(cls) or _layout(cls)
            if not kids:          # a leaf of its own kind
                self.memo[id(e)] = (e, e)
                return e
            ids = []
            for f in kids:
                v = getattr(e, f)
                if v.__class__ is tuple:
                    nv = tuple([self.visit(x) if isinstance(x, Expr) else x for x in v])
                    ids.append(tuple([id(x) for x in nv]))
                    if any(a is not b for a, b in zip(nv, v)):
                        changes = changes or {}
                        changes[f] = nv
                elif isinstance(v, Expr):
                    nv = self.visit(v)
                    ids.append(id(nv))
                    if nv is not v:
                        changes = changes or {}
                        changes[f] = nv
                else:
                    ids.append(v)
            key = None
            if cls in MERGED:
                key = (cls, tuple([getattr(e, f) for f in other]), tuple(ids))
        out = None
        if key is not None:
            # the n-th equal original of a statement meets the n-th of the others
            n = self.count.get(key, 0)
            self.count[key] = n + 1
            if n:
                key = (key, n)
            cand = self.canon.get(key)
            if cand is not None and id(cand) not in self.handed:
                out = cand
        if out is None:
            out = e if changes is None else replace_node(e, changes)
            if id(out) in self.handed:   # used for another original of this statement
                out = replace_node(out, {})
            if key is not None and key not in self.canon:
                self.canon[key] = out
        self.memo[id(e)] = (e, out)     # holding ``e`` keeps its id from being reused
        self.handed.add(id(out))
        return out


class _InternStmt(StmtMutator):
    def __init__(self):
        self.ex = _Intern()

    def visit(self, s):
        # a statement's own expressions come before its sub-statements in every class's
        # fields, so each statement's expressions are interned in one context
        self.ex.statement()
        return StmtMutator.visit(self, s)

    def visit_expr(self, e):
        return self.ex.visit(e)


def intern_expressions(stmt):
    """See the module docstring."""
    return _InternStmt().visit(stmt)
