"""Scalar expression nodes of tensor expressions (and of the loop IR, which reuses them).

Meaning of the IR, stated once:

* Every node is immutable and compared by identity (``a is b``); ``==`` builds an equality
  node, as in TVM. :func:`polytile.te.visitor.structural_equal` compares structure.
* Every expression has a scalar ``dtype`` (see :mod:`polytile.te.dtype`); vector lanes exist
  only inside code generation.
* Integer arithmetic wraps around in two's complement in the declared dtype;
  ``floordiv``/``floormod`` round toward negative infinity (``floormod`` takes the sign of
  the divisor), ``truncdiv``/``truncmod`` round toward zero (C semantics). The minimum
  integer divided by -1 wraps like numpy (quotient ``INT_MIN``, remainder 0). Division by
  zero is an error (refused for constants, a run-time check for data). The numerics rule (literals, accumulation dtype of
  reductions, NaN in max/min) is stated in :mod:`polytile.te.dtype`.
* Float arithmetic is IEEE-754 without fast-math: code generators may contract ``a*b + c``
  into one fused multiply-add (as C compilers do by default) and nothing else.
* ``Select`` (``te.if_then_else``) evaluates only the chosen operand, so an out-of-bounds
  read guarded by its condition is never performed.
* Ranges are half open: ``Range(min, extent)`` covers ``min <= x < min + extent``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from polytile.errors import (DefinitionOverflowError, DefinitionTypeError,
                             DefinitionZeroDivisionError, format_error)

from . import dtype as dt
from .fastinit import fast_init

if TYPE_CHECKING:
    from .tensor import Tensor


class ExprOp:
    """Operator overloading shared by expressions and iteration variables."""

    __slots__ = ()

    def _expr(self) -> Expr:
        raise NotImplementedError

    # arithmetic ----------------------------------------------------------------------
    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binary("floordiv", other, self)

    def __mod__(self, other):
        return binary("floormod", self, other)

    def __rmod__(self, other):
        return binary("floormod", other, self)

    # The methods below import at call time: expr.py is the bottom of te (every other
    # module of te imports it), and they need what is built on top of it (the scalar math
    # functions, the printer, substitution, Tensor). A cycle is the price of operators on
    # nodes; the imports stay inside the methods so that no module is half-initialised.
    def __pow__(self, other):
        from .scalar_math import power

        return power(self, other)

    def __rpow__(self, other):
        from .scalar_math import power

        return power(other, self)

    def __neg__(self):
        e = self._expr()
        if dt.is_float(e.dtype):
            # IEEE negation flips the sign of zero: -(+0.0) is -0.0, which 0 - x is not
            return binary("mul", e, Const(e.dtype, -1.0))
        return binary("sub", Const(e.dtype, 0), e)

    def __pos__(self):
        return self._expr()

    def __abs__(self):
        from .scalar_math import abs as abs_

        return abs_(self)

    # bitwise / logical -----------------------------------------------------------------
    def __and__(self, other):
        return _logic_or_bit("and", self, other)

    def __rand__(self, other):
        return _logic_or_bit("and", other, self)

    def __or__(self, other):
        return _logic_or_bit("or", self, other)

    def __ror__(self, other):
        return _logic_or_bit("or", other, self)

    def __xor__(self, other):
        return _logic_or_bit("xor", self, other)

    def __rxor__(self, other):
        return _logic_or_bit("xor", other, self)

    def __invert__(self):
        e = self._expr()
        if e.dtype == "bool":
            return Not("bool", e)
        if not dt.is_int(e.dtype):
            raise DefinitionTypeError(
                f"~: operand has dtype {e.dtype}; expected bool or an integer")
        return binary("bitxor", e, Const(e.dtype, -1 if dt.is_signed(e.dtype) else
                                         dt.max_value(e.dtype)))

    def __lshift__(self, other):
        return binary("shl", self, other)

    def __rshift__(self, other):
        return binary("shr", self, other)

    # comparisons -----------------------------------------------------------------------
    def __lt__(self, other):
        return compare("lt", self, other)

    def __le__(self, other):
        return compare("le", self, other)

    def __gt__(self, other):
        return compare("gt", self, other)

    def __ge__(self, other):
        return compare("ge", self, other)

    def __eq__(self, other):  # type: ignore[override]
        return compare("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return compare("ne", self, other)

    __hash__ = object.__hash__

    def __bool__(self):
        raise DefinitionTypeError(
            f"the symbolic expression `{self}` has no truth value: Python's `if`, `and`, "
            "`or`, `not` and chained comparisons cannot be used on it inside a compute "
            "definition; use te.if_then_else(cond, a, b), te.all(...)/te.any(...), or & | ~"
        )

    def equal(self, other) -> Expr:
        """The boolean ``self == other`` (TVM's ``PrimExpr.equal``, used where ``==`` reads
        as identity, e.g. ``s[B].set_store_predicate(tx.var.equal(0))``)."""
        return compare("eq", self, other)

    def astype(self, dtype) -> Expr:
        """Convert to ``dtype`` (C conversion rules: floats truncate toward zero into ints)."""
        return cast(self, dtype)

    def __repr__(self) -> str:
        from .printer import expr_str  # cycle: the printer dispatches on these classes

        return expr_str(self._expr())

    __str__ = __repr__


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Expr(ExprOp):
    """Base class of scalar expressions; ``dtype`` is a canonical dtype string."""

    dtype: str

    def _expr(self) -> Expr:
        return self


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: an axis of a compute (``is_axis``), or a free parameter from
    ``te.var``, which becomes a scalar argument of the built function."""

    name: str
    is_axis: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Const(Expr):
    """A literal; ``value`` is a Python ``bool``, ``int`` or ``float``."""

    value: Any


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr


BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "truncdiv", "truncmod",
              "min", "max", "bitand", "bitor", "bitxor", "shl", "shr")
INT_ONLY_OPS = ("bitand", "bitor", "bitxor", "shl", "shr")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Binary(Expr):
    """``a <op> b`` with both operands already of ``dtype`` (see ``BINARY_OPS``)."""

    op: str
    a: Expr
    b: Expr


CMP_OPS = ("eq", "ne", "lt", "le", "gt", "ge")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cmp(Expr):
    """A comparison; ``dtype`` is ``bool`` and both operands share one dtype."""

    op: str
    a: Expr
    b: Expr

    def __bool__(self):
        # Like TVM's EqualOp: `a == b` used as a Python bool compares identity, which keeps
        # expressions usable in lists and as dict keys -- except while a compute body is
        # being built, where `if i == 3:` is a mistake that would silently pick a branch.
        if _BUILDING_BODY and self.op in ("eq", "ne"):
            return ExprOp.__bool__(self)
        if self.op == "eq":
            return self.a is self.b
        if self.op == "ne":
            return self.a is not self.b
        return ExprOp.__bool__(self)


#: True while te.compute calls its fcompute (see Cmp.__bool__).
_BUILDING_BODY = False


def building_body(flag: bool) -> bool:
    """Set whether a compute body is being built; returns the previous value."""
    global _BUILDING_BODY
    old, _BUILDING_BODY = _BUILDING_BODY, flag
    return old


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class And(Expr):
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Or(Expr):
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Not(Expr):
    a: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Select(Expr):
    """``true_value if cond else false_value``, evaluating only the chosen operand."""

    cond: Expr
    true_value: Expr
    false_value: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    """A pure math intrinsic (``exp``, ``sqrt``, ...) applied to ``args``."""

    name: str
    args: tuple


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TensorRead(Expr):
    """``tensor[indices]``: a read of one element of a tensor (TVM's ProducerLoad)."""

    tensor: Tensor
    indices: tuple


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Reduce(Expr):
    """A commutative reduction of ``source`` over ``axis`` where ``condition`` holds.

    Only allowed as the whole body of a compute. ``init`` (optional) replaces the
    combiner's identity as the initial value.

    A *tuple* reduction (a :class:`TupleCommReducer`, e.g. argmax over ``(index, value)``
    pairs) is one ``Reduce`` per output, all sharing ``combiner``, ``axis`` and
    ``condition``: ``source`` and ``init`` are those of output ``value_index``, and the
    compute that holds them updates every output at once (TVM's ``Reduce.value_index``).
    """

    combiner: CommReducer
    source: Expr
    axis: tuple
    condition: Expr | None
    init: Expr | None
    value_index: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class CommReducer:
    """A commutative, associative combiner ``result(lhs, rhs)`` with an identity element,
    specialised to one dtype. Built by :func:`polytile.te.comm_reducer`."""

    name: str
    lhs: Var
    rhs: Var
    result: Expr
    identity: Expr
    #: the dtype-generic :class:`polytile.te.reduction.Reducer` it was specialised from
    #: (to specialise it again at the accumulation dtype), when known
    generic: Any = None

    def combine(self, acc: Expr, value: Expr) -> Expr:
        """The combiner applied to two expressions."""
        from .visitor import substitute  # cycle: the visitor walks these classes

        return substitute(self.result, {self.lhs: acc, self.rhs: value})


@dataclass(frozen=True, slots=True, eq=False)
class TupleCommReducer:
    """A combiner over tuples, ``(r_0, ..., r_n) = f((x_0, ..., x_n), (y_0, ..., y_n))``,
    with one identity per element (TVM's ``CommReducer`` with several ``lhs``/``rhs``);
    specialised to one dtype per element. Built by :func:`polytile.te.comm_reducer` when
    ``fcombine`` returns a tuple. ``x`` is the accumulator, ``y`` the new value: a
    combiner that is not commutative (argmax keeping the first of equal values) is folded
    in the order of the reduction axes, which every accepted schedule keeps."""

    name: str
    lhs: tuple
    rhs: tuple
    result: tuple
    identity: tuple
    generic: Any = None

    @property
    def size(self) -> int:
        return len(self.result)

    def combine_all(self, acc: tuple, value: tuple) -> tuple:
        """Every element of the combiner applied to the tuples ``acc`` and ``value``."""
        from .visitor import substitute  # cycle: the visitor walks these classes

        m = dict(zip(self.lhs, acc))
        m.update(zip(self.rhs, value))
        return tuple(substitute(r, m) for r in self.result)


@dataclass(frozen=True, slots=True)
class Range:
    """The half-open integer range ``[min, min + extent)``."""

    min: int
    extent: int

    @property
    def max(self) -> int:
        """Largest value in the range (inclusive)."""
        return self.min + self.extent - 1


ITER_TYPES = ("data_par", "reduce", "thread")


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IterVar(ExprOp):
    """An iteration axis: a variable with its range and kind.

    ``iter_type`` is ``"data_par"`` (a spatial axis of a compute), ``"reduce"`` (a reduction
    axis) or ``"thread"`` (a GPU thread axis with ``thread_tag`` like ``"threadIdx.x"``).
    Usable directly in expressions, where it stands for its ``var``.
    """

    var: Var
    dom: Range | None
    iter_type: str
    thread_tag: str = ""

    def _expr(self) -> Expr:
        return self.var

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        dom = f"[{self.dom.min}, {self.dom.min + self.dom.extent})" if self.dom else "?"
        return f"IterVar({self.var.name}, {dom}, {self.iter_type})"

    __str__ = __repr__


# constructors ------------------------------------------------------------------------------


def const(value, dtype=None) -> Const:
    """A literal of ``dtype`` (inferred from the Python type when omitted: ``int32`` for
    ints that fit, else ``int64``; ``float32`` for floats; ``bool`` for bools).

    Raises
    ------
    OverflowError
        For an integer outside ``dtype``. A finite float beyond a float ``dtype``'s range
        becomes ``inf`` with a :class:`~polytile.errors.PolytileWarning`, as numpy warns.
    """
    if isinstance(value, Expr):
        raise DefinitionTypeError(f"const: expected a Python number, got expression {value}")
    from .vector import LaneVector, parse

    vec = parse(dtype)
    if vec is not None:   # TVM's vector constant: the value in every lane
        return LaneVector.broadcast(value, vec[1], vec[0])
    d = dt.canonical(dtype) if dtype is not None else dt.scalar_dtype(value, None)
    return Const(d, _coerce(value, d, literal=True))


def _coerce(value, dtype: str, literal: bool = False):
    """The Python value of a ``dtype`` literal: floats are rounded to ``dtype`` (beyond its
    range: ``inf``, as ``np.float16(65535)``, with a warning for a ``literal`` written by
    the user); an integer outside ``dtype`` is refused, as numpy 2 refuses
    ``np.int8(300)`` (``astype`` wraps instead: see :func:`cast`)."""
    if dtype == "bool":
        return bool(value)
    if dt.is_float(dtype):
        r = dt.round_float(value, dtype)
        if literal and math.isinf(r) and _finite(value):
            from polytile.errors import warn

            warn(f"const: {value!r} overflows {dtype} (largest finite "
                 f"{dt.largest_finite(dtype)!r}) and becomes {r!r}")
        return r
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise DefinitionTypeError(
            f"const: {value!r} is not an integer; cannot make a {dtype} constant")
    v = int(value)
    lo, hi = dt.min_value(dtype), dt.max_value(dtype)
    if not lo <= v <= hi:
        raise DefinitionOverflowError(
            f"const: {v} does not fit in {dtype} [{lo}, {hi}]; "
            f"te.const({v}).astype({dtype!r}) wraps it as numpy's astype does")
    return v


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # a Python int beyond float64
        return True


def convert(value, dtype_hint: str | None = None) -> Expr:
    """Turn ``value`` into an expression: expressions pass through, iteration variables
    become their variable, Python/numpy scalars become constants (weakly typed, taking
    ``dtype_hint`` as in :func:`polytile.te.dtype.scalar_dtype`)."""
    if isinstance(value, ExprOp):
        return value._expr()
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        d = dt.scalar_dtype(value, dtype_hint)
        return Const(d, _coerce(value, d, literal=True))
    from .tensor import Tensor  # cycle: tensors are built from expressions

    if isinstance(value, Tensor):
        if value.ndim == 0:
            return value[()]
        raise DefinitionTypeError(
            f"tensor {value.name!r} of shape {value.shape} used as a scalar; "
            f"index it, e.g. {value.name}[i, j]")
    if type(value).__name__ == "LaneVector":
        raise DefinitionTypeError(format_error(
            "vector dtype", f"{value!r} where a scalar expression is needed (a math "
            "function, a reduction, an extern call)", "lane-wise + - * / // %, comparisons, "
            "astype, te.if_then_else and te.const on lane vectors",
            hint="write the lanes as an axis: a tensor of shape (n, lanes) and scalar dtype"))
    raise DefinitionTypeError(f"cannot convert {type(value).__name__} {value!r} to an expression")


def cast(value, dtype) -> Expr:
    """Convert ``value`` to ``dtype`` (a no-op when it already has it)."""
    d = dt.canonical(dtype)
    e = convert(value, d)
    if e.dtype == d:
        return e
    if isinstance(e, Const):
        v = e.value
        if dt.is_int(d) and not isinstance(v, bool):
            if dt.is_float(e.dtype):
                if not (math.isfinite(v) and dt.min_value(d) <= math.trunc(v) <= dt.max_value(d)):
                    return Cast(d, e)   # unspecified (C, numpy): left to the machine
                v = math.trunc(v)
            v = dt.wrap(v, d)  # integers wrap like the machine (numpy's astype)
        return Const(d, _coerce(v, d))
    return Cast(d, e)


def _operands(a, b, opname: str) -> tuple[Expr, Expr]:
    a_is_expr, b_is_expr = isinstance(a, ExprOp), isinstance(b, ExprOp)
    if not a_is_expr and not b_is_expr:
        raise DefinitionTypeError(f"{opname}: at least one operand must be an expression")
    ea = convert(a, None) if a_is_expr else None
    eb = convert(b, None) if b_is_expr else None
    if ea is None:
        ea = convert(a, eb.dtype)
    if eb is None:
        eb = convert(b, ea.dtype)
    t = dt.promote(ea.dtype, eb.dtype)
    return cast(ea, t), cast(eb, t)


def binary(op: str, a, b) -> Expr:
    """Build ``a <op> b`` after numpy-like promotion (see :mod:`polytile.te.dtype`)."""
    ea, eb = _operands(a, b, op)
    t = ea.dtype
    if (op in ("floordiv", "floormod", "truncdiv", "truncmod") and dt.is_int(t)
            and isinstance(eb, Const) and eb.value == 0):
        raise DefinitionZeroDivisionError(f"{op}: integer division by the constant 0")
    if op == "div" and not dt.is_float(t):
        raise DefinitionTypeError(
            f"/: both operands are {t}; true division needs floats. Use // (floor "
            f"division), te.truncdiv (C division) or .astype('float32') first"
        )
    if op in ("floormod", "truncmod") and t == "bool":
        raise DefinitionTypeError(f"{op}: operands are bool; expected numbers")
    if op in INT_ONLY_OPS and not (dt.is_int(t) or (t == "bool" and op.startswith("bit"))):
        raise DefinitionTypeError(f"{op}: operands have dtype {t}; expected integers")
    if t == "bool" and op in ("add", "sub", "mul", "floordiv", "truncdiv"):
        ea, eb = cast(ea, "int32"), cast(eb, "int32")
        t = "int32"
    return Binary(t, op, ea, eb)


def compare(op: str, a, b) -> Expr:
    """Build a comparison; the result has dtype ``bool``."""
    ea, eb = _operands(a, b, op)
    return Cmp("bool", op, ea, eb)


def _logic_or_bit(op: str, a, b) -> Expr:
    ea, eb = _operands(a, b, op)
    if ea.dtype == "bool":
        if op == "and":
            return And("bool", ea, eb)
        if op == "or":
            return Or("bool", ea, eb)
        return Cmp("bool", "ne", ea, eb)
    return binary("bit" + op, ea, eb)


def logical_and(*conds) -> Expr:
    """Conjunction of boolean expressions (``te.all``)."""
    es = [_as_bool(c, "te.all") for c in conds]
    if not es:
        return Const("bool", True)
    out = es[0]
    for e in es[1:]:
        out = And("bool", out, e)
    return out


def logical_or(*conds) -> Expr:
    """Disjunction of boolean expressions (``te.any``)."""
    es = [_as_bool(c, "te.any") for c in conds]
    if not es:
        return Const("bool", False)
    out = es[0]
    for e in es[1:]:
        out = Or("bool", out, e)
    return out


def _as_bool(c, who: str) -> Expr:
    e = convert(c, "bool")
    if e.dtype != "bool":
        raise DefinitionTypeError(
            f"{who}: condition {e} has dtype {e.dtype}; expected bool "
            f"(compare it, e.g. x != 0)")
    return e


def select(cond, true_value, false_value) -> Expr:
    """``te.if_then_else``: ``true_value`` where ``cond`` holds, else ``false_value``.

    Only the chosen operand is evaluated, so it may guard an out-of-bounds read (padding).
    With lane vectors (vector dtypes, :mod:`polytile.te.vector`) it selects lane-wise.
    """
    from .vector import LaneVector

    vecs = [x for x in (cond, true_value, false_value) if isinstance(x, LaneVector)]
    if vecs:
        def lane(x, ln):
            return x.at(ln) if isinstance(x, LaneVector) else x

        probe = select(lane(cond, 0), lane(true_value, 0), lane(false_value, 0))
        return LaneVector(vecs[0].lanes, probe.dtype, lambda ln: select(
            lane(cond, ln), lane(true_value, ln), lane(false_value, ln)))
    c = _as_bool(cond, "te.if_then_else")
    t, f = _operands(true_value, false_value, "te.if_then_else") if (
        isinstance(true_value, ExprOp) or isinstance(false_value, ExprOp)
    ) else (convert(true_value), convert(false_value))
    if t.dtype != f.dtype:
        d = dt.promote(t.dtype, f.dtype)
        t, f = cast(t, d), cast(f, d)
    return Select(t.dtype, c, t, f)


# helpers --------------------------------------------------------------------------------


def child_fields(node) -> tuple[str, ...]:
    """Names of the fields of ``node`` that hold sub-expressions (or tuples of them)."""
    return _CHILDREN[type(node)]


# the nodes are built tens of thousands of times per lowering (see fastinit.py)
for _cls in (Var, Const, Cast, Binary, Cmp, And, Or, Not, Select, Call, TensorRead, Reduce):
    fast_init(_cls)

_CHILDREN: dict[type, tuple[str, ...]] = {
    Var: (), Const: (), Cast: ("value",), Binary: ("a", "b"), Cmp: ("a", "b"),
    And: ("a", "b"), Or: ("a", "b"), Not: ("a",), Select: ("cond", "true_value", "false_value"),
    Call: ("args",), TensorRead: ("indices",), Reduce: ("source", "condition", "init"),
}


def register_node(cls: type, children: tuple[str, ...]) -> type:
    """Declare the sub-expression fields of an expression class defined elsewhere (the loop
    IR's ``Load``), so that visitors and mutators traverse it."""
    _CHILDREN[cls] = children
    return cls
