"""Vector dtypes as tensor elements (TVM TE's ``dtype="float32x4"``).

In TVM a ``te.placeholder((n,), dtype="float32x4")`` is a tensor of ``n`` elements of 4
lanes each; arithmetic on its elements is lane-wise (``A[i] + tvm.tir.const(1, A.dtype)``
adds 1 to every lane) and its host ``NDArray`` is filled from an ``(n, 4)`` array.
polytile's elements are scalars, so a vector tensor is a view: :class:`VectorTensor`
presents the shape ``(n,)`` and the dtype ``"float32x4"``, and holds a scalar tensor of
shape ``(n, 4)`` (``.base``) that lowering and the built function see. Reading
``A[i]`` gives a :class:`LaneVector` (a value per lane, built lazily), a compute whose body
is a ``LaneVector`` gets one more, innermost, axis ``lane`` over the lanes, and arithmetic
between lane vectors and scalars is lane-wise. The built function takes the ``(n, 4)``
array TVM copies into its NDArray.

Supported on lane vectors: ``+ - * / // %``, comparisons, unary ``-``, ``astype`` (to a
vector or scalar base dtype, lane-wise), ``te.const(v, "float32x4")`` (all lanes ``v``).
Anything else (math functions, reductions, extern calls such as ``__dp4a`` on whole
vectors) raises a ``TypeError`` that says to write the lanes as an axis.
"""

from __future__ import annotations

import re

from polytile.errors import DefinitionTypeError, format_error

_VECTOR = re.compile(r"^([a-z]+[0-9]*)x([0-9]+)$")


def parse(dtype) -> tuple[str, int] | None:
    """``("float32", 4)`` for ``"float32x4"`` (2 lanes or more), else ``None``."""
    from .dtype import ALIASES, _BITS

    if not isinstance(dtype, str):
        return None
    m = _VECTOR.match(dtype)
    if m is None or int(m.group(2)) < 2:
        return None
    base = ALIASES.get(m.group(1), m.group(1))
    return (base, int(m.group(2))) if base in _BITS else None


def _refuse(what: str):
    raise DefinitionTypeError(format_error(
        "vector dtype", f"{what} on a lane vector", "lane-wise + - * / // %, comparisons, "
        "astype and te.const", hint="write the lanes as an axis: a tensor of shape (n, "
        "lanes) and scalar dtype, indexed A[i, l]"))


class LaneVector:
    """A value per lane (``at(l)`` is lane ``l``'s scalar expression); see the module
    docstring."""

    __slots__ = ("lanes", "base_dtype", "_at")

    def __init__(self, lanes: int, base_dtype: str, at):
        self.lanes, self.base_dtype, self._at = lanes, base_dtype, at

    @property
    def dtype(self) -> str:
        return f"{self.base_dtype}x{self.lanes}"

    def at(self, lane):
        """The scalar expression of lane ``lane`` (an index expression)."""
        return self._at(lane)

    @staticmethod
    def broadcast(value, lanes: int, base_dtype: str) -> LaneVector:
        from .expr import const

        c = const(value, base_dtype)
        return LaneVector(lanes, base_dtype, lambda _l: c)

    def _zip(self, other, fn) -> LaneVector:
        from .expr import ExprOp, convert

        if isinstance(other, LaneVector):
            if other.lanes != self.lanes:
                raise DefinitionTypeError(format_error(
                    "vector dtype", f"lanes {self.lanes} and {other.lanes} in one operation",
                    "vectors of one lane count"))
            pick = other.at
        elif isinstance(other, (int, float, bool, ExprOp)) or hasattr(other, "dtype"):
            s = convert(other) if not isinstance(other, ExprOp) else other
            pick = lambda _l: s   # noqa: E731 - a scalar is broadcast to every lane
        else:
            return NotImplemented
        probe = fn(self.at(0), pick(0))
        return LaneVector(self.lanes, probe.dtype, lambda l: fn(self.at(l), pick(l)))

    def _rzip(self, other, fn) -> LaneVector:
        return self._zip(other, lambda a, b: fn(b, a))

    def __add__(self, o): return self._zip(o, lambda a, b: a + b)       # noqa: E704
    def __radd__(self, o): return self._rzip(o, lambda a, b: a + b)     # noqa: E704
    def __sub__(self, o): return self._zip(o, lambda a, b: a - b)       # noqa: E704
    def __rsub__(self, o): return self._rzip(o, lambda a, b: a - b)     # noqa: E704
    def __mul__(self, o): return self._zip(o, lambda a, b: a * b)       # noqa: E704
    def __rmul__(self, o): return self._rzip(o, lambda a, b: a * b)     # noqa: E704
    def __truediv__(self, o): return self._zip(o, lambda a, b: a / b)   # noqa: E704
    def __rtruediv__(self, o): return self._rzip(o, lambda a, b: a / b)     # noqa: E704
    def __floordiv__(self, o): return self._zip(o, lambda a, b: a // b)     # noqa: E704
    def __rfloordiv__(self, o): return self._rzip(o, lambda a, b: a // b)   # noqa: E704
    def __mod__(self, o): return self._zip(o, lambda a, b: a % b)       # noqa: E704
    def __rmod__(self, o): return self._rzip(o, lambda a, b: a % b)     # noqa: E704
    def __lt__(self, o): return self._zip(o, lambda a, b: a < b)        # noqa: E704
    def __le__(self, o): return self._zip(o, lambda a, b: a <= b)       # noqa: E704
    def __gt__(self, o): return self._zip(o, lambda a, b: a > b)        # noqa: E704
    def __ge__(self, o): return self._zip(o, lambda a, b: a >= b)       # noqa: E704

    def __neg__(self) -> LaneVector:
        return LaneVector(self.lanes, self.base_dtype, lambda l: -self.at(l))

    def astype(self, dtype: str) -> LaneVector:
        """Lane-wise cast to ``dtype`` (a vector dtype of the same lanes, or its base)."""
        from .dtype import canonical

        vec = parse(dtype)
        if vec is not None and vec[1] != self.lanes:
            _refuse(f"astype({dtype!r}) of {self.lanes} lanes")
        base = vec[0] if vec is not None else canonical(dtype)
        return LaneVector(self.lanes, base, lambda l: self.at(l).astype(base))

    def __bool__(self):
        _refuse("a truth value (if/and/or)")

    def __getattr__(self, name: str):
        _refuse(f"{name!r}")

    def __repr__(self) -> str:
        return f"LaneVector({self.dtype})"


class VectorTensor:
    """A tensor of vector elements (see the module docstring): ``shape`` and ``dtype`` as
    TVM shows them, ``base`` the scalar tensor with a trailing lane axis that polytile
    schedules, lowers and builds (``s[V]``, ``op``, arguments all use it)."""

    def __init__(self, base, lanes: int):
        self.base, self.lanes = base, lanes

    @property
    def shape(self) -> tuple:
        return tuple(self.base.shape[:-1])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> str:
        return f"{self.base.dtype}x{self.lanes}"

    @property
    def op(self):
        return self.base.op

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def value_index(self) -> int:
        return self.base.value_index

    def __getitem__(self, idx) -> LaneVector:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != self.ndim:
            raise DefinitionTypeError(format_error(
                f"{self.name}[...]", f"{len(idx)} indices for a tensor of {self.ndim} "
                f"dimensions of {self.dtype}", f"{self.ndim} indices (one element is all "
                f"{self.lanes} lanes)"))
        base = self.base
        return LaneVector(self.lanes, base.dtype, lambda l: base[(*idx, l)])

    def __call__(self, *idx) -> LaneVector:
        return self[idx]

    def __repr__(self) -> str:
        return f"VectorTensor({self.name}, shape={self.shape}, dtype={self.dtype})"


def unwrap(x):
    """The scalar tensor of a :class:`VectorTensor`, anything else unchanged."""
    return x.base if isinstance(x, VectorTensor) else x


__all__ = ["LaneVector", "VectorTensor", "parse", "unwrap"]
