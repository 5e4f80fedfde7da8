"""Commutative reducers: ``te.comm_reducer`` and the built-in ``te.sum``, ``te.max``, ``te.min``."""

from __future__ import annotations

from polytile.errors import DefinitionTypeError, DefinitionValueError

from . import dtype as dt
from .expr import (And, Binary, Cmp, CommReducer, Const, Expr, ExprOp, IterVar, Not, Or,
                   Reduce, Select, TupleCommReducer, Var, binary, cast, child_fields, convert)


class Reducer:
    """A reducer generic over dtypes, built by :func:`comm_reducer`.

    ``reducer(expr, axis, where=None, init=None)`` reduces ``expr`` over the reduction
    axes ``axis`` (an ``IterVar`` or a list of them), optionally only where the boolean
    ``where`` holds, starting from ``init`` instead of the identity.
    ``reducer(a, b, ...)`` (two or more operands, the second not a reduce axis) folds the
    combiner over the operands elementwise, so ``te.max(a, b, c)`` is
    ``np.maximum.reduce([a, b, c])``; Python numbers among them are weak (they adopt the
    other operands' dtype) and ``where=``/``init=`` are refused there.
    """

    def __init__(self, fcombine, fidentity, name: str):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def specialise(self, dtype: str) -> CommReducer:
        """The combiner for one dtype."""
        lhs, rhs = Var(dtype, "x"), Var(dtype, "y")
        try:
            result = self.fcombine(lhs, rhs)
        except (TypeError, IndexError) as exc:
            raise DefinitionTypeError(
                f"comm_reducer {self.name!r}: fcombine fails on one {dtype} value ({exc}); "
                f"a combiner over tuples reduces a tuple of expressions, e.g. "
                f"{self.name}((k, A[i, k]), axis=k)") from None
        if isinstance(result, (tuple, list)):
            raise DefinitionTypeError(
                f"comm_reducer {self.name!r}: fcombine returns {len(result)} values; "
                f"expected a tuple of {len(result)} expressions to reduce, e.g. "
                f"{self.name}((k, A[i, k]), axis=k)")
        result = convert(result, dtype)
        if result.dtype != dtype:
            raise DefinitionTypeError(
                f"comm_reducer {self.name!r}: combiner returns {result.dtype} for "
                f"{dtype} operands; expected {dtype}")
        identity = convert(self.fidentity(dtype), dtype)
        if not isinstance(identity, Const):
            raise DefinitionTypeError(
                f"comm_reducer {self.name!r}: identity for {dtype} is {identity}; "
                f"expected a constant")
        return CommReducer(self.name, lhs, rhs, result, cast(identity, dtype), self)

    def specialise_tuple(self, dtypes: tuple) -> TupleCommReducer:
        """The combiner over tuples of elements of ``dtypes`` (``fcombine`` takes two tuples
        and returns one, ``fidentity(*dtypes)`` returns one constant per element)."""
        n = len(dtypes)
        lhs = tuple(Var(d, f"x{k}") for k, d in enumerate(dtypes))
        rhs = tuple(Var(d, f"y{k}") for k, d in enumerate(dtypes))
        try:
            out = self.fcombine(lhs, rhs)
            ident = self.fidentity(*dtypes)
        except TypeError as exc:
            raise DefinitionTypeError(
                f"comm_reducer {self.name!r}: reducing a tuple of {n} values, fcombine(x, y) "
                f"takes two tuples of {n} and fidentity takes {n} dtypes ({exc})") from None
        for what, val in (("fcombine", out), ("fidentity", ident)):
            if not isinstance(val, (tuple, list)) or len(val) != n:
                raise DefinitionTypeError(
                    f"comm_reducer {self.name!r}: {what} returns {val!r} for a tuple of {n} "
                    f"values; expected a tuple of {n}")
        result, identity = [], []
        for k, (r, e, d) in enumerate(zip(out, ident, dtypes)):
            r = convert(r, d)
            if r.dtype != d:
                raise DefinitionTypeError(
                    f"comm_reducer {self.name!r}: element {k} of the combiner has dtype "
                    f"{r.dtype} for {d} operands; expected {d}")
            e = convert(e, d)
            if not isinstance(e, Const):
                raise DefinitionTypeError(
                    f"comm_reducer {self.name!r}: identity element {k} is {e}; expected a "
                    f"constant")
            result.append(r)
            identity.append(cast(e, d))
        return TupleCommReducer(self.name, lhs, rhs, tuple(result), tuple(identity), self)

    def __call__(self, expr, *rest, axis=None, where=None, init=None):
        """``reducer(expr, axis, where=None, init=None)`` reduces; ``reducer(a, b, ...)``
        (no reduce axis second) combines two or more operands elementwise."""
        if rest and _is_axis_list(rest[0]):
            # TVM's positional form: reducer(expr, axis, where, init)
            pos = rest[1:]
            if (axis is not None or len(pos) > 2 or (pos and where is not None)
                    or (len(pos) == 2 and init is not None)):
                raise DefinitionTypeError(
                    f"te.{self.name}: too many arguments; expected "
                    f"te.{self.name}(expr, axis=reduce_axis, where=cond, init=x)")
            axis = rest[0]
            where = pos[0] if pos else where
            init = pos[1] if len(pos) == 2 else init
        elif rest:
            if axis is not None or where is not None or init is not None:
                raise DefinitionTypeError(
                    f"te.{self.name}: axis=, where= and init= belong to a "
                    f"reduction; te.{self.name}({_n_operands(len(rest) + 1)}) "
                    f"combines its operands elementwise")
            return self._elementwise((expr,) + rest)
        if isinstance(axis, Var) and axis.is_axis or (
                isinstance(axis, IterVar) and axis.iter_type != "reduce"):
            raise DefinitionTypeError(
                f"te.{self.name}: axis {axis} is a spatial axis of the compute; "
                f"reduce over a te.reduce_axis((lo, hi)) instead")
        if axis is None:
            raise DefinitionTypeError(
                f"te.{self.name}: missing axis=; pass the reduce_axis to reduce "
                f"over (or two or more operands to combine elementwise)")
        if not _is_axis_list(axis):
            raise DefinitionTypeError(
                f"te.{self.name}: axis={axis!r} is not a reduce_axis; create it "
                f"with te.reduce_axis((lo, hi))")
        if where is not None and not isinstance(where, (ExprOp, bool)):
            raise DefinitionTypeError(
                f"te.{self.name}: where={where!r} is not a condition; expected a "
                f"bool expression")
        if isinstance(expr, (tuple, list)):
            return self._reduce_tuple(tuple(expr), axis, where, init)
        return self._reduce(expr, axis, where, init)

    def _elementwise(self, operands: tuple) -> Expr:
        """The combiner folded over ``operands`` (``np.maximum.reduce`` for ``te.max``),
        after promoting them to one dtype; Python numbers are weak as in binary operators."""
        first = operands[1] if len(operands) == 2 else None
        if isinstance(first, Var) and first.is_axis or (
                isinstance(first, IterVar) and first.iter_type != "reduce"):
            # te.sum(x, i): almost always a reduction over a spatial axis by mistake
            raise DefinitionTypeError(
                f"te.{self.name}: axis {first} is a spatial axis of the compute; "
                f"reduce over a te.reduce_axis((lo, hi)) instead")
        exprs = [convert(o) for o in operands if isinstance(o, ExprOp)]
        d = None
        for e in exprs:
            d = e.dtype if d is None else dt.promote(d, e.dtype)
        es = []
        for o in operands:
            e = convert(o, d)
            es.append(e)
            d = e.dtype if d is None else dt.promote(d, e.dtype)
        comb = self.specialise(d)
        out = cast(es[0], d)
        for e in es[1:]:
            out = comb.combine(out, cast(e, d))
        return out

    def _reduce_tuple(self, exprs: tuple, axis, where, init) -> tuple:
        """One :class:`Reduce` per element of ``exprs``, sharing a tuple combiner, the
        axes and ``where``: the body of a compute with ``len(exprs)`` outputs."""
        if len(exprs) < 1:
            raise DefinitionTypeError(f"te.{self.name}: an empty tuple to reduce; expected "
                                      f"one or more expressions")
        sources = tuple(convert(e) for e in exprs)
        if init is not None and (not isinstance(init, (tuple, list))
                                 or len(init) != len(sources)):
            raise DefinitionTypeError(
                f"te.{self.name}: init={init!r} for a tuple of {len(sources)} values; "
                f"expected a tuple of {len(sources)} initial values")
        comb = self.specialise_tuple(tuple(e.dtype for e in sources))
        first = self._reduce(sources[0], axis, where, None, comb)   # checks axis and where
        inits = (tuple(cast(convert(x, e.dtype), e.dtype) for x, e in zip(init, sources))
                 if init is not None else (None,) * len(sources))
        return tuple(Reduce(e.dtype, comb, e, first.axis, first.condition, ini, k)
                     for k, (e, ini) in enumerate(zip(sources, inits)))

    def _reduce(self, expr, axis, where, init, comb=None) -> Expr:
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        for a in axes:
            if not isinstance(a, IterVar) or a.iter_type != "reduce":
                raise DefinitionTypeError(
                    f"te.{self.name}: axis {a!r} is not a reduce_axis; create it "
                    f"with te.reduce_axis((lo, hi))")
        if len({id(a) for a in axes}) != len(axes):
            dup = next(a for k, a in enumerate(axes) if any(b is a for b in axes[:k]))
            raise DefinitionValueError(
                f"te.{self.name}: reduce_axis {dup.var.name!r} appears twice in "
                f"axis=; expected each reduce axis once")
        source = convert(expr)
        comb = comb or self.specialise(source.dtype)
        cond = None
        if where is not None:
            cond = convert(where, "bool")
            if cond.dtype != "bool":
                raise DefinitionTypeError(
                    f"te.{self.name}: where= has dtype {cond.dtype}; expected bool")
        ini = cast(convert(init, source.dtype), source.dtype) if init is not None else None
        return Reduce(source.dtype, comb, source, axes, cond, ini)


def accumulation_dtype(red: Reduce) -> str:
    """The dtype a reduction accumulates in (the rule is stated in :mod:`polytile.te.dtype`):
    :func:`polytile.te.dtype.accumulation_dtype` of its dtype, except for combiners that
    only select among their operands (``max``, ``min``, ``select``), which are exact in any
    dtype."""
    wide = dt.accumulation_dtype(red.dtype)
    if isinstance(red.combiner, TupleCommReducer):
        return red.dtype    # each element in its own dtype, as TVM does
    if wide == red.dtype or _selects_only(red.combiner.result):
        return red.dtype
    return wide


def _selects_only(e: Expr) -> bool:
    if isinstance(e, (Var, Const)):
        return True
    if isinstance(e, Binary) and e.op not in ("min", "max"):
        return False
    if not isinstance(e, (Binary, Select, Cmp, And, Or, Not)):
        return False
    return all(_selects_only(getattr(e, f)) for f in child_fields(e))


def widened(comb: CommReducer, dtype: str) -> CommReducer:
    """``comb`` specialised at the accumulation dtype ``dtype`` (its generic reducer
    specialised again; a combiner that cannot be, combines in its own dtype and is cast)."""
    if comb.generic is not None:
        try:
            return comb.generic.specialise(dtype)
        except TypeError:
            pass
    narrow = comb.lhs.dtype
    lhs, rhs = Var(dtype, "x"), Var(dtype, "y")
    result = cast(comb.combine(cast(lhs, narrow), cast(rhs, narrow)), dtype)
    return CommReducer(comb.name, lhs, rhs, result, cast(comb.identity, dtype))


def _n_operands(n: int) -> str:
    return "a, b" if n == 2 else "a, b, c" if n == 3 else "a, b, c, ..."


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


# the built-in reducers' functions are named (not lambdas) so that schedules, which hold
# them through their reductions, pickle


def _add(x, y):
    return x + y


def _zero(t):
    return Const(t, False if t == "bool" else 0)


def _max2(x, y):
    return binary("max", x, y)


def _min2(x, y):
    return binary("min", x, y)


def _lowest(t):
    return Const(t, dt.min_value(t))


def _highest(t):
    return Const(t, dt.max_value(t))


sum = comm_reducer(_add, _zero, name="sum")
max = comm_reducer(_max2, _lowest, name="max")
min = comm_reducer(_min2, _highest, name="min")


def max_value(dtype) -> Expr:
    """The largest finite value of ``dtype`` as a constant (TVM's ``te.max_value``):
    ``3.4028235e38`` for float32, ``65504`` for float16, ``2**31 - 1`` for int32.
    (``te.min``'s identity is ``inf`` instead, so that a min over infinities stays one.)"""
    d = dt.canonical(dtype)
    return Const(d, dt.largest_finite(d))


def min_value(dtype) -> Expr:
    """The smallest finite value of ``dtype`` as a constant (TVM's ``te.min_value``):
    ``-3.4028235e38`` for float32, ``-2**31`` for int32, ``0`` for unsigned ints."""
    d = dt.canonical(dtype)
    return Const(d, dt.smallest_finite(d))
