"""Index narrowing: 64-bit integer arithmetic becomes 32-bit where its bounds prove it fits.

Assumes: a finalized function (flat indices). Every ``int64`` value of the loop IR is an
exact 64-bit integer; this pass may only change how it is computed, never what it is.

Guarantees: a loop variable, hardware index or ``LetStmt`` variable of dtype ``int64``
becomes ``int32`` when interval bounds prove every value it takes fits in ``int32``; an
index expression (``Load``/``Store`` index, loop bounds) or an integer comparison is
computed in ``int32`` when the bounds of *every* intermediate value fit, and stays
``int64`` otherwise (an index past ``2**31 - 1``, a loop variable multiplied by
``3_000_000_000``, a product of two large extents). Data of dtype ``int64`` (loads,
``int64`` arithmetic in stored values) keeps its width: a narrowed variable used there is
cast back to ``int64`` first. Bounds come from the loops' ranges (constants or bounded
expressions of outer variables), the launch shape, the operands' dtypes and constant
divisors; scalar parameters and loaded values are unbounded.

Helps: GPUs execute 32-bit integer multiply-adds natively, 64-bit ones as several
instructions (TVM indexes in int32 for the same reason).
"""

from __future__ import annotations

import functools

from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cast, Cmp, Const, Expr, Select, Var
from polytile.te.visitor import ExprMutator

from ..loop_ir import For, KernelLaunch, LetStmt, Load, PrimFunc, StmtMutator, Store

I32 = (-(2**31), 2**31 - 1)


def _fits(iv) -> bool:
    return iv is not None and I32[0] <= iv[0] and iv[1] <= I32[1]


@functools.cache
def _range(dtype: str) -> tuple:
    return (int(dt.min_value(dtype)), int(dt.max_value(dtype)))


_INT: dict = {}


def _is_int(dtype: str) -> bool:
    """``dt.is_int``, remembered per dtype name (asked for every node)."""
    r = _INT.get(dtype)
    if r is None:
        r = _INT[dtype] = dt.is_int(dtype)
    return r


class _Bounds:
    """Interval bounds ``(lo, hi)`` of integer expressions (``None``: unbounded), given the
    bounds of variables; memoized by node identity."""

    def __init__(self):
        self.vars: dict = {}     # Var -> (lo, hi)
        self.memo: dict = {}
        self.nmemo: dict = {}    # narrowable, by node identity

    def of(self, e: Expr):
        cls = e.__class__
        if cls is Const:   # leaves: cheaper to answer than to remember
            return (int(e.value), int(e.value)) if _is_int(e.dtype) else None
        if cls is Var:
            return self._of(e)
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._of(e)
        self.memo[id(e)] = (e, out)
        return out

    def _of(self, e: Expr):
        if not _is_int(e.dtype):
            return None
        dflt = _range(e.dtype)
        if isinstance(e, Const):
            return (int(e.value), int(e.value))
        if isinstance(e, Var):
            return self.vars.get(e, None if e.dtype == "int64" else dflt)
        if isinstance(e, Cast):
            v = self.of(e.value) if dt.is_int(e.value.dtype) else None
            if v is not None and dflt[0] <= v[0] and v[1] <= dflt[1]:
                return v
            return None if e.dtype == "int64" else dflt
        if isinstance(e, Select):
            t, f = self.of(e.true_value), self.of(e.false_value)
            if t is None or f is None:
                return None if e.dtype == "int64" else dflt
            return (min(t[0], f[0]), max(t[1], f[1]))
        if isinstance(e, Binary):
            out = self._binary(e)
            if out is not None and dflt[0] <= out[0] and out[1] <= dflt[1]:
                return out
            return None if e.dtype == "int64" else dflt   # it may wrap: its dtype's range
        return None if e.dtype == "int64" else dflt

    def _binary(self, e: Binary):
        a, b = self.of(e.a), self.of(e.b)
        if a is None or b is None:
            return None
        if e.op == "add":
            return (a[0] + b[0], a[1] + b[1])
        if e.op == "sub":
            return (a[0] - b[1], a[1] - b[0])
        if e.op == "mul":
            ps = [x * y for x in a for y in b]
            return (min(ps), max(ps))
        if e.op in ("min", "max"):
            f = min if e.op == "min" else max
            return (f(a[0], b[0]), f(a[1], b[1]))
        if e.op in ("floordiv", "truncdiv") and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if e.op == "floordiv":
                return (a[0] // c, a[1] // c)
            return (-(-a[0] // c) if a[0] < 0 else a[0] // c,
                    -(-a[1] // c) if a[1] < 0 else a[1] // c)
        if e.op in ("floormod", "truncmod") and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if e.op == "floormod":
                return (0, c - 1)
            return (-(c - 1) if a[0] < 0 else 0, c - 1 if a[1] > 0 else 0)
        return None

    def narrowable(self, e: Expr) -> bool:
        """True when ``e`` (of dtype int64) and every int64 value inside it fit in int32
        (a ``Load`` inside is an index of its own and does not count)."""
        cls = e.__class__
        if cls is Const:   # (half the nodes of an unrolled kernel's indices)
            return e.dtype != "int64" or I32[0] <= int(e.value) <= I32[1]
        if cls is Var:
            return e.dtype != "int64" or _fits(self._of(e))
        hit = self.nmemo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._narrowable(e)
        self.nmemo[id(e)] = (e, out)
        return out

    def _narrowable(self, e: Expr) -> bool:
        if e.dtype == "int64" and not _fits(self.of(e)):
            return False
        if isinstance(e, (Binary, Cmp)):
            return self.narrowable(e.a) and self.narrowable(e.b)
        if isinstance(e, Select):
            return self.narrowable(e.true_value) and self.narrowable(e.false_value)
        if isinstance(e, Cast):
            return e.value.dtype != "int64" or self.narrowable(e.value)
        return True


class _Rewrite(ExprMutator):
    """``narrow``: an int64 expression proven to fit, rewritten in int32; ``visit``: any
    other expression, with narrowed variables cast back to int64 and the indices of its
    loads, and its integer comparisons, narrowed where they fit."""

    def __init__(self, bounds: _Bounds, vars_: dict):
        self.b = bounds
        self.vars = vars_        # Var -> its int32 replacement
        self.nmemo: dict = {}

    # the int32 form ------------------------------------------------------------------
    def narrow(self, e: Expr) -> Expr:
        hit = self.nmemo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._narrow(e)
        self.nmemo[id(e)] = (e, out)
        return out

    def _narrow(self, e: Expr) -> Expr:
        d = "int32" if e.dtype == "int64" else e.dtype
        if isinstance(e, Var):
            if e in self.vars:
                return self.vars[e]
            return Cast(d, e) if d != e.dtype else e
        if isinstance(e, Const):
            return Const(d, e.value)
        if isinstance(e, Binary):
            return Binary(d, e.op, self.narrow(e.a), self.narrow(e.b))
        if isinstance(e, Cmp):
            return Cmp("bool", e.op, self.narrow(e.a), self.narrow(e.b))
        if isinstance(e, Select):
            return Select(d, self.visit(e.cond), self.narrow(e.true_value),
                          self.narrow(e.false_value))
        if isinstance(e, Cast):
            v = self.narrow(e.value) if e.value.dtype == "int64" else self.visit(e.value)
            return v if v.dtype == d else Cast(d, v)
        v = self.visit(e)   # a Load or a call: its own width, cast (it fits, by its bounds)
        return Cast(d, v) if v.dtype != d else v

    def index(self, e: Expr) -> Expr:
        """An index expression: int32 when it fits, else int64."""
        return self.narrow(e) if self.b.narrowable(e) else self.visit(e)

    # the unchanged-width form ------------------------------------------------------
    def visit_Var(self, v: Var):
        n = self.vars.get(v)
        return Cast(v.dtype, n) if n is not None else v

    def visit_Load(self, e: Load):
        idx = tuple([self.index(i) for i in e.indices])
        for a, b in zip(idx, e.indices):
            if a is not b:
                return Load(e.dtype, e.buffer, idx)
        return e

    def visit_Cast(self, e: Cast):
        if (e.value.dtype == "int64" and dt.is_int(e.dtype) and dt.bits(e.dtype) <= 32
                and self.b.narrowable(e.value)):
            v = self.narrow(e.value)    # equal values: the same low bits
            return v if v.dtype == e.dtype else Cast(e.dtype, v)
        return self.generic_visit(e)

    def visit_Cmp(self, e: Cmp):
        if e.a.dtype == "int64" and self.b.narrowable(e.a) and self.b.narrowable(e.b):
            return self.narrow(e)
        return self.generic_visit(e)


class _NarrowStmt(StmtMutator):
    def __init__(self):
        self.b = _Bounds()
        self.vars: dict = {}
        self.ex = _Rewrite(self.b, self.vars)

    def visit_expr(self, e):
        return self.ex.visit(e)

    def _bind(self, v: Var, iv, narrow: bool = True) -> Var:
        """Record the bounds ``iv`` of ``v``; its int32 replacement when they fit."""
        if v in self.b.vars or v in self.vars:
            # bound again (a loop copied by unroll): walks memoized under the first
            # binding may not hold here
            self.b.memo.clear()
            self.b.nmemo.clear()
            self.ex._memo = {}
            self.ex.nmemo.clear()
            self.b.vars.pop(v, None)
        old = self.vars.pop(v, None)
        if iv is not None:
            self.b.vars[v] = iv
        if narrow and v.dtype == "int64" and _fits(iv):
            self.vars[v] = old if old is not None else Var("int32", v.name)
            return self.vars[v]
        return v

    def visit_KernelLaunch(self, k: KernelLaunch):
        tv = []
        for v, tag in k.thread_vars:
            dims = k.grid if tag.startswith("blockIdx") else k.block
            n = dims["xyz".index(tag[-1])]
            if isinstance(n, int):
                iv = (0, n - 1)
            else:   # a symbolic grid extent: the bounds of its expression
                hi = self.b.of(n)
                iv = (0, hi[1] - 1) if hi is not None else None
            tv.append((self._bind(v, iv), tag))
        return KernelLaunch(k.name, k.grid, k.block, tuple(tv), self.visit(k.body))

    def visit_For(self, s: For):
        lo, ext = self.b.of(s.min), self.b.of(s.extent)
        iv = None
        if lo is not None and ext is not None:
            iv = (lo[0], max(lo[0], lo[1] + ext[1] - 1))
        small = self.b.narrowable(s.min) and self.b.narrowable(s.extent)
        mn, extent = self.ex.index(s.min), self.ex.index(s.extent)
        v = self._bind(s.var, iv, small)
        if v.dtype == "int64":   # bounds in the variable's width
            mn = mn if mn.dtype == "int64" else Cast("int64", mn)
            extent = extent if extent.dtype == "int64" else Cast("int64", extent)
        return For(v, mn, extent, s.kind, self.visit(s.body), s.step, s.pragmas)

    def visit_LetStmt(self, s: LetStmt):
        iv = self.b.of(s.value) if dt.is_int(s.value.dtype) else None
        small = s.var.dtype == "int64" and self.b.narrowable(s.value)
        value = self.ex.narrow(s.value) if small and _fits(iv) else self.ex.visit(s.value)
        v = self._bind(s.var, iv, small)
        return LetStmt(v, value, self.visit(s.body))

    def visit_Store(self, s: Store):
        idx = tuple([self.ex.index(i) for i in s.indices])
        return Store(s.buffer, idx, self.ex.visit(s.value))



def narrow_indices(func: PrimFunc) -> PrimFunc:
    """See the module docstring."""
    return PrimFunc(func.name, func.params, _NarrowStmt().visit(func.body), func.attrs)
