"""Commutative reducers: ``te.comm_reducer`` and the built-in ``te.sum``, ``te.max``, ``te.min``."""

from __future__ import annotations

from . import dtype as dt
from .expr import (CommReducer, Const, Expr, ExprOp, IterVar, Reduce, Var, binary, cast,
                   convert)


class Reducer:
    """A reducer generic over dtypes, built by :func:`comm_reducer`.

    ``reducer(expr, axis, where=None, init=None)`` reduces ``expr`` over the reduction
    axes ``axis`` (an ``IterVar`` or a list of them), optionally only where the boolean
    ``where`` holds, starting from ``init`` instead of the identity.
    ``reducer(a, b)`` (two expressions) applies the combiner once, so ``te.max(a, b)``
    is an elementwise maximum.
    """

    def __init__(self, fcombine, fidentity, name: str):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def specialise(self, dtype: str) -> CommReducer:
        """The combiner for one dtype."""
        lhs, rhs = Var(dtype, "x"), Var(dtype, "y")
        result = convert(self.fcombine(lhs, rhs), dtype)
        if result.dtype != dtype:
            raise TypeError(f"comm_reducer {self.name!r}: combiner returns {result.dtype} for "
                            f"{dtype} operands; expected {dtype}")
        identity = convert(self.fidentity(dtype), dtype)
        if not isinstance(identity, Const):
            raise TypeError(f"comm_reducer {self.name!r}: identity for {dtype} is {identity}; "
                            f"expected a constant")
        return CommReducer(self.name, lhs, rhs, result, cast(identity, dtype), self)

    def __call__(self, expr, axis=None, where=None, init=None, *args):
        if args or (where is not None and not isinstance(where, ExprOp)):
            raise TypeError(f"te.{self.name}: too many arguments; expected "
                            f"te.{self.name}(expr, axis=reduce_axis, where=cond) or "
                            f"te.{self.name}(a, b)")
        if isinstance(axis, Var) and axis.is_axis or (
                isinstance(axis, IterVar) and axis.iter_type != "reduce"):
            raise TypeError(f"te.{self.name}: axis {axis} is a spatial axis of the compute; "
                            f"reduce over a te.reduce_axis((lo, hi)) instead")
        if axis is not None and not _is_axis_list(axis) and where is None and init is None:
            # te.max(a, b): the combiner applied once
            a, b = expr, axis
            if not isinstance(a, ExprOp) and not isinstance(b, ExprOp):
                raise TypeError(f"te.{self.name}: expected expressions")
            ea = convert(a, None) if isinstance(a, ExprOp) else None
            eb = convert(b, None) if isinstance(b, ExprOp) else None
            ea = ea if ea is not None else convert(a, eb.dtype)
            eb = eb if eb is not None else convert(b, ea.dtype)
            d = dt.promote(ea.dtype, eb.dtype)
            return self.specialise(d).combine(cast(ea, d), cast(eb, d))
        if axis is None:
            raise TypeError(f"te.{self.name}: missing axis=; pass the reduce_axis to reduce over")
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        for a in axes:
            if not isinstance(a, IterVar) or a.iter_type != "reduce":
                raise TypeError(f"te.{self.name}: axis {a!r} is not a reduce_axis; create it "
                                f"with te.reduce_axis((lo, hi))")
        if len({id(a) for a in axes}) != len(axes):
            dup = next(a for k, a in enumerate(axes) if any(b is a for b in axes[:k]))
            raise ValueError(f"te.{self.name}: reduce_axis {dup.var.name!r} appears twice in "
                             f"axis=; expected each reduce axis once")
        source = convert(expr)
        comb = self.specialise(source.dtype)
        cond = None
        if where is not None:
            cond = convert(where, "bool")
            if cond.dtype != "bool":
                raise TypeError(f"te.{self.name}: where= has dtype {cond.dtype}; expected bool")
        ini = cast(convert(init, source.dtype), source.dtype) if init is not None else None
        return Reduce(source.dtype, comb, source, axes, cond, ini)


def _is_axis_list(axis) -> bool:
    if isinstance(axis, IterVar):
        return axis.iter_type == "reduce"
    return isinstance(axis, (list, tuple)) and all(isinstance(a, IterVar) for a in axis)


def comm_reducer(fcombine, fidentity, name: str = "reduce") -> Reducer:
    """Create a commutative reducer (TVM's ``te.comm_reducer``).

    Parameters
    ----------
    fcombine : callable (x, y) -> Expr
        Associative and commutative combiner.
    fidentity : callable (dtype: str) -> number or Const
        Identity element of the combiner for ``dtype``.
    """
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: Const(t, False if t == "bool" else 0),
                   name="sum")
max = comm_reducer(lambda x, y: binary("max", x, y),
                   lambda t: Const(t, dt.min_value(t)), name="max")
min = comm_reducer(lambda x, y: binary("min", x, y),
                   lambda t: Const(t, dt.max_value(t)), name="min")


def max_value(dtype) -> Expr:
    """Largest value of ``dtype`` (``inf`` for floats)."""
    d = dt.canonical(dtype)
    return Const(d, dt.max_value(d))


def min_value(dtype) -> Expr:
    """Smallest value of ``dtype`` (``-inf`` for floats)."""
    d = dt.canonical(dtype)
    return Const(d, dt.min_value(d))
