"""Tensors and the operations that produce them: ``placeholder`` and ``compute``.

A :class:`Tensor` is one output of an :class:`Operation`. ``PlaceholderOp`` declares an input;
``ComputeOp`` defines every element of its output by an expression over its spatial axes
(``op.axis``) and, for a reduction, its reduction axes (``op.reduce_axis``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from polytile.errors import (DefinitionIndexError, DefinitionTypeError, DefinitionValueError,
                             format_error)

from . import dtype as dt
from .depth import check_depth
from .expr import (Expr, ExprOp, IterVar, Range, Reduce, TensorRead, Var, binary,
                   building_body, convert)
from . import symbolic as sym
from . import vector
from .visitor import collect


class Tensor:
    """A multi-dimensional array of one dtype: an input or the output of a compute.

    ``T[i, j]`` (or ``T(i, j)``, or ``T[i][j]`` as TVM allows) reads one element inside a
    compute definition; ``T[i]`` of a 2-d tensor is a :class:`TensorSlice` to index
    further. Arithmetic between tensors (``A + B``, ``A * 2``) builds an elementwise
    compute with numpy broadcasting.
    """

    __slots__ = ("op", "value_index", "shape", "dtype")

    def __init__(self, op: Operation, value_index: int, shape: tuple, dtype: str):
        self.op = op
        self.value_index = value_index
        self.shape = shape
        self.dtype = dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> Expr | TensorSlice:
        """The element at ``indices``, or a :class:`TensorSlice` when fewer indices than
        dimensions are given (TVM's chained ``A[i][j]``).

        Raises
        ------
        DefinitionIndexError
            For more indices than dimensions.
        DefinitionTypeError
            For a slice or a non-integer index.
        """
        if not isinstance(indices, tuple):
            indices = (indices,)
        if 0 < len(indices) < len(self.shape):
            return TensorSlice(self, tuple(self._index(k, x) for k, x in enumerate(indices)))
        return self._read(indices)

    def _read(self, indices: tuple) -> Expr:
        if len(indices) != len(self.shape):
            raise DefinitionIndexError(
                f"{self.name}[...]: tensor has {len(self.shape)} dimensions "
                f"{self.shape}, got {len(indices)} indices; expected one index "
                f"per dimension")
        return TensorRead(self.dtype, self, tuple(self._index(k, x)
                                                  for k, x in enumerate(indices)))

    def _index(self, k: int, x) -> Expr:
        if isinstance(x, slice):
            raise DefinitionTypeError(
                f"{self.name}[...]: slices are not supported in a compute "
                f"definition; index every dimension with an expression")
        big = isinstance(x, (int, np.integer)) and not -(2**31) <= int(x) < 2**31
        e = convert(int(x) if big else x, "int64" if big else "int32")
        if not dt.is_int(e.dtype):
            raise DefinitionTypeError(
                f"{self.name}[...]: index {k} ({e}) has dtype {e.dtype}; "
                f"expected an integer (use .astype('int32'))")
        return e

    def __call__(self, *indices) -> Expr:
        return self._read(indices)

    def __repr__(self) -> str:
        return f"Tensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype!r})"

    def __bool__(self):
        return True

    # elementwise arithmetic with broadcasting (TVM forwards these to topi) ------------------
    def _bin(self, other, op: str, reverse: bool = False) -> Tensor:
        return _broadcast_binary(op, other, self) if reverse else _broadcast_binary(
            op, self, other)

    def __add__(self, o):
        return self._bin(o, "add")

    def __radd__(self, o):
        return self._bin(o, "add", True)

    def __sub__(self, o):
        return self._bin(o, "sub")

    def __rsub__(self, o):
        return self._bin(o, "sub", True)

    def __mul__(self, o):
        return self._bin(o, "mul")

    def __rmul__(self, o):
        return self._bin(o, "mul", True)

    def __truediv__(self, o):
        return self._bin(o, "div")

    def __rtruediv__(self, o):
        return self._bin(o, "div", True)

    def __neg__(self):
        return compute(self.shape, lambda *i: -self[i], name=f"{self.name}_neg")


class TensorSlice(ExprOp):
    """``T[i]`` of a tensor with more dimensions: index it further (``T[i][j]``, TVM's
    ``TensorSlice``). It is no value: using it in an expression raises
    :class:`~polytile.errors.DefinitionIndexError` naming the missing dimensions."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor = tensor
        self.indices = indices

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def __getitem__(self, indices) -> Expr | TensorSlice:
        if not isinstance(indices, tuple):
            indices = (indices,)
        t, have = self.tensor, len(self.indices)
        if have + len(indices) > t.ndim:
            raise DefinitionIndexError(
                f"{t.name}{self._text()}[...]: tensor has {t.ndim} dimensions {t.shape}, "
                f"got {have + len(indices)} indices; expected one index per dimension")
        more = tuple(t._index(have + k, x) for k, x in enumerate(indices))
        if have + len(more) < t.ndim:
            return TensorSlice(t, self.indices + more)
        return TensorRead(t.dtype, t, self.indices + more)

    def _text(self) -> str:
        return "".join(f"[{e}]" for e in self.indices)

    def _expr(self) -> Expr:
        t = self.tensor
        raise DefinitionIndexError(
            f"{t.name}{self._text()}: tensor has {t.ndim} dimensions {t.shape}, got "
            f"{len(self.indices)} indices; expected one index per dimension (index further: "
            f"{t.name}{self._text()}[...] or {t.name}[i, j, ...])")

    def __repr__(self) -> str:
        return f"TensorSlice({self.tensor.name}{self._text()})"


@dataclass(frozen=True, eq=False)
class Operation:
    """Base of operations. ``output(i)`` is the ``i``-th output tensor."""

    name: str
    tag: str = ""
    attrs: dict = field(default_factory=dict)

    def output(self, index: int) -> Tensor:
        return self.outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []


@dataclass(frozen=True, eq=False)
class PlaceholderOp(Operation):
    """An input tensor of the program (its values come from the caller)."""

    shape: tuple = ()
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "outputs", (Tensor(self, 0, self.shape, self.dtype),))


@dataclass(frozen=True, eq=False)
class ComputeOp(Operation):
    """``out[axis] = body`` for every point of the spatial ``axis`` box.

    ``body`` holds one expression per output (all outputs share the axes, so one stage
    computes them in one loop nest); when they are :class:`Reduce` nodes (one, or the
    elements of one tuple reduction), ``reduce_axis`` lists their reduction axes.
    """

    axis: tuple = ()
    reduce_axis: tuple = ()
    body: tuple = ()

    def __post_init__(self):
        shape = tuple(iv.dom.extent for iv in self.axis)
        object.__setattr__(self, "outputs", tuple(
            Tensor(self, k, shape, b.dtype) for k, b in enumerate(self.body)))

    @property
    def input_tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for b in self.body:
            for r in collect(b, TensorRead):
                seen.setdefault(id(r.tensor), r.tensor)
        return list(seen.values())


def _shape(shape, who: str, tensor: str = "") -> tuple:
    """Normalise a shape: ints, or integer expressions affine in ``te.var`` parameters
    (symbolic dimensions, :mod:`polytile.te.symbolic`); a bare int or expression is a
    1-d shape."""
    if isinstance(shape, ExprOp) or isinstance(shape, (int,)) or hasattr(
            shape, "__index__") and not isinstance(shape, (tuple, list)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise DefinitionTypeError(format_error(
            who, f"shape is {shape!r}",
            "expected an int or a tuple of non-negative ints, e.g. (M, N)"))
    out = []
    for k, s in enumerate(shape):
        if isinstance(s, ExprOp):
            e = s._expr()
            if sym.static(e) is not None:
                s = sym.static(e)
            elif not sym.is_affine(e):
                if not dt.is_int(e.dtype) or not sym.derivable(e):
                    raise DefinitionTypeError(format_error(
                        who, f"dimension {k} is the expression {e}",
                        "expected a non-negative int or an integer expression of te.var "
                        "parameters through + - * // % min max (n, n + 1, n // x, n * m; "
                        "not a compute axis)"))
                # (TVM's n // x): a size of its own, checked equal to e at each call
                out.append(sym.derived_size(e))
                continue
            else:
                out.append(e)
                continue
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise DefinitionTypeError(f"{who}: dimension {k} is {s!r}; expected a non-negative int")
        if int(s) < 0:
            raise DefinitionValueError(
                f"{who}: dimension {k} is {int(s)}; expected a non-negative int "
                f"(a zero-size dimension is legal, as in numpy)")
        out.append(int(s))
    n = 1
    for s in out:
        n *= s if isinstance(s, int) else 1   # a symbolic dimension: checked per call
    if n > INT64_MAX:
        # flattened offsets are int64: past that, no target can address the elements
        raise DefinitionValueError(format_error(
            f"{who} {tensor!r}" if tensor else who, f"shape {tuple(out)} has {n} elements, more than an int64 offset reaches",
            f"at most 2**63 - 1 = {INT64_MAX} elements",
            hint="split the tensor into several smaller tensors"))
    return tuple(out)


#: the largest element count of a tensor, index value and axis bound (offsets are int64)
INT64_MAX = 2**63 - 1


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """Declare an input tensor.

    Parameters
    ----------
    shape : int or tuple of int
        Extents, each >= 0 (a 0-d tensor has ``shape=()``; a zero-size one, no elements).
    dtype : str or numpy dtype
        Element type (see :mod:`polytile.te.dtype`).
    name : str
        Name used in printed IR and as the argument name of built functions.
    """
    vec = vector.parse(dtype)
    if vec is not None:   # TVM's vector elements: a view of a trailing lane axis
        shp = _shape(shape, "placeholder", name)
        return vector.VectorTensor(placeholder((*shp, vec[1]), vec[0], name), vec[1])
    return PlaceholderOp(name=name, shape=_shape(shape, "placeholder", name),
                         dtype=dt.canonical(dtype)).output(0)


def var(name: str = "v", dtype="int32") -> Var:
    """A free scalar variable (TVM's ``te.var``).

    Used in a shape or a ``reduce_axis`` bound it is a *symbolic size*: an isl parameter
    during lowering, whose value a built function reads off the shape of an array
    argument with that dimension (or takes as a scalar argument when no array has it).
    Used only in a compute body it is a scalar argument of the built function.

    Raises
    ------
    TypeError
        For ``int4``/``uint4``, which are tensor storage only (see
        :mod:`polytile.te.dtype`).
    """
    t = dt.canonical(dtype)
    if dt.is_int4(t):
        raise DefinitionTypeError(format_error(
            "var", f"dtype {t!r} for {name!r}", "a scalar dtype: int4/uint4 are a storage "
            "format of tensors (two elements per byte)",
            hint=f"declare te.var({name!r}, dtype={t[:-1] + '8'!r}) and .astype({t!r}) it"))
    return Var(t, name)


def size_var(name: str = "size", dtype="int32") -> Var:
    """A free integer variable known to be ``>= 0`` (TVM's ``te.size_var``): a symbolic
    size, see :func:`var`.

    Raises
    ------
    TypeError
        For a non-integer ``dtype``.
    """
    t = dt.canonical(dtype)
    if not dt.is_int(t) or dt.is_int4(t):
        raise DefinitionTypeError(format_error("size_var", f"dtype {t!r} for {name!r}",
                                               "expected an integer dtype"))
    return sym.mark_size_var(Var(t, name))


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom``: a ``(lo, hi)`` pair (half open) or a :class:`Range`.

    An empty range (``lo == hi``) is legal: the reduction then yields its initial value
    (the reducer's identity, or ``init=``), as numpy's ``sum`` over an empty slice does.

    Raises
    ------
    ValueError
        For a reversed range (``hi < lo``), naming the axis.
    """
    if isinstance(dom, Range):
        rng = dom
    else:
        try:
            lo, hi = dom
        except (TypeError, ValueError):
            example = f" such as (0, {dom})" if isinstance(dom, int) else ""
            raise DefinitionTypeError(
                f"reduce_axis {name!r}: dom must be a (lo, hi) pair, got {dom!r}; "
                f"expected a half-open range{example}") from None
        if isinstance(lo, ExprOp) or isinstance(hi, ExprOp):
            for b in (lo, hi):
                if not sym.is_affine(b._expr() if isinstance(b, ExprOp) else b):
                    raise DefinitionTypeError(format_error(
                        f"reduce_axis {name!r}", f"bound {b} is not affine in te.var "
                        "parameters", "expected ints or expressions such as n, n - 1"))
            lo = sym.static(lo) if sym.static(lo) is not None else lo._expr()
            hi = sym.static(hi) if sym.static(hi) is not None else hi._expr()
            rng = Range(lo, sym.sub(hi, lo))
            return IterVar(Var(_axis_dtype(lo, rng.extent), name, True), rng, "reduce")
        rng = Range(int(lo), int(hi) - int(lo))
    if rng.min < -(2**63) or rng.min + rng.extent - 1 > INT64_MAX or rng.extent > INT64_MAX:
        raise DefinitionValueError(format_error(
            f"reduce_axis {name!r}", f"range {dom!r} leaves int64",
            "bounds within [-2**63, 2**63 - 1] (iteration variables are at most int64)"))
    if rng.extent < 0:
        raise DefinitionValueError(
            f"reduce_axis: range of {name!r} is reversed ({dom!r}): it ends "
            f"before it starts; expected (lo, hi) with lo <= hi (an empty range "
            f"lo == hi reduces to the identity)")
    return IterVar(Var(_axis_dtype(rng.min, rng.extent), name, True), rng, "reduce")


def _axis_dtype(lo: int, extent: int) -> str:
    """``int32``, or ``int64`` for an axis whose values do not all fit in ``int32`` (TVM
    types an iteration variable by its range the same way): its arithmetic in the
    definition is then exact. A symbolic range takes the widest dtype of its sizes."""
    if not (sym.is_static(lo) and sym.is_static(extent)):
        wide = any(v.dtype == "int64" for x in (lo, extent) for v in sym.params_of(x))
        return "int64" if wide else "int32"
    return "int32" if -(2**31) <= lo and lo + extent - 1 < 2**31 else "int64"


def _axis_names(fcompute, ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        return [f"i{k}" for k in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != ndim:
        want = ", ".join("ijklmn"[k] if k < 6 else f"i{k}" for k in range(ndim))
        raise DefinitionTypeError(format_error(
            f"compute {name!r}", f"fcompute takes {len(names)} index arguments but the "
            f"shape has {ndim} dimensions",
            "expected one index argument per dimension", hint=f"write lambda {want}: ..."))
    return names


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None) -> Tensor:
    """Define a tensor elementwise: ``out[i, j, ...] = fcompute(i, j, ...)``.

    Parameters
    ----------
    shape : int or tuple of int
        Output extents, each >= 1.
    fcompute : callable
        Takes one index variable per dimension and returns an expression; for a reduction,
        the whole body must be one ``te.sum/max/min/<comm_reducer>(...)`` call. A tuple
        of expressions (or the tuple a tuple ``comm_reducer`` returns, such as argmax's
        ``(index, value)``) defines one output per element, all computed in one stage.
    name, tag, attrs
        Stage name (printed IR, argument names), a free-form tag (inside a
        ``te.tag_scope``, the scope's) and attributes.

    Returns
    -------
    Tensor, or a list of Tensor for a tuple body of two or more (``T[k].op.output(k)``,
    ``op.num_outputs``; buffers named ``name.v0``, ``name.v1``, ... as in TVM).

    Raises
    ------
    TypeError, ValueError
        For a malformed body: a tuple mixing reductions with other values, a nested
        reduction, a reduction axis used outside its reduction, a spatial axis of another
        compute, a wrong number of index arguments.
    """
    from .tag import current_tag

    tag = current_tag(tag, f"compute {name!r}")
    shp = _shape(shape, "compute", name)
    names = _axis_names(fcompute, len(shp), name)
    axis = tuple(IterVar(Var(_axis_dtype(0, e), n, True), Range(0, e), "data_par")
                 for n, e in zip(names, shp))
    old = building_body(True)
    try:
        body = fcompute(*[iv.var for iv in axis])
    finally:
        building_body(old)
    if isinstance(body, vector.LaneVector):   # vector elements: one more axis, the lanes
        lane = IterVar(Var("int32", "lane", True), Range(0, body.lanes), "data_par")
        scalar, reduce_axes = _check_body(body.at(lane.var), axis + (lane,), name)
        op = ComputeOp(name=name, tag=tag, attrs=dict(attrs or {}), axis=axis + (lane,),
                       reduce_axis=tuple(reduce_axes), body=(scalar,))
        return vector.VectorTensor(op.output(0), body.lanes)
    if isinstance(body, (tuple, list)):
        if any(isinstance(b, vector.LaneVector) for b in body):
            vector._refuse("a tuple of outputs")
        return _compute_outputs(tuple(body), axis, name, tag, attrs)
    body, reduce_axes = _check_body(body, axis, name)
    op = ComputeOp(name=name, tag=tag, attrs=dict(attrs or {}), axis=axis,
                   reduce_axis=tuple(reduce_axes), body=(body,))
    return op.output(0)


def _check_body(body, axis, name: str) -> tuple:
    """``body`` converted and checked, with its reduce axes."""
    if body is None:
        raise DefinitionTypeError(format_error(
            f"compute {name!r}", "fcompute returned None",
            "expected an expression of the index arguments", hint="a `def` body needs `return`"))
    try:
        body = convert(body)
    except TypeError as exc:
        raise DefinitionTypeError(f"compute {name!r}: {exc}") from None
    # before any pass recurses into it: a body deeper than polytile handles is named here
    check_depth(body, f"compute {name!r}", name)
    reduce_axes: tuple = ()
    if isinstance(body, Reduce):
        reduce_axes = body.axis
        _check_no_reduce(body.source, name)
        for part in (body.condition, body.init):
            if part is not None:
                _check_no_reduce(part, name)
        if body.init is not None:
            _check_no_reduce_vars(body.init, reduce_axes, name, "init")
    else:
        _check_no_reduce(body, name)
    _check_vars(body, axis, reduce_axes, name)
    return body, tuple(reduce_axes)


def _compute_outputs(bodies: tuple, axis, name: str, tag: str, attrs) -> list:
    """A compute with one output per element of ``bodies`` (TVM's multi-output compute):
    plain expressions, or the elements of one tuple reduction (``argmax((k, A[i, k]),
    axis=k)``). All outputs share the axes and the loop nest of one stage."""
    if not bodies:
        raise DefinitionTypeError(f"compute {name!r}: fcompute returned an empty tuple; "
                                  f"expected one or more expressions")
    checked = [_check_body(b, axis, name) for b in bodies]
    bodies = tuple(b for b, _ in checked)
    reds = [b for b in bodies if isinstance(b, Reduce)]
    if reds:
        comb = reds[0].combiner
        same = (len(reds) == len(bodies) and getattr(comb, "size", 0) == len(bodies)
                and all(r.combiner is comb and r.value_index == k and r.axis is reds[0].axis
                        and r.condition is reds[0].condition for k, r in enumerate(reds)))
        if not same:
            raise DefinitionTypeError(format_error(
                f"compute {name!r}", f"fcompute returned {len(bodies)} values of which "
                f"{len(reds)} are reductions, not the elements of one tuple reduction",
                "either expressions without reductions, or exactly the tuple returned by "
                "one tuple te.comm_reducer call (TVM's rule)",
                hint="compute separate reductions in separate computes"))
    op = ComputeOp(name=name, tag=tag, attrs=dict(attrs or {}), axis=axis,
                   reduce_axis=tuple(reds[0].axis) if reds else (), body=bodies)
    outs = [op.output(k) for k in range(op.num_outputs)]
    return outs[0] if len(outs) == 1 else outs     # TVM's rule for a 1-tuple


def _check_no_reduce(e: Expr, name: str) -> None:
    if collect(e, Reduce):
        raise DefinitionTypeError(
            f"compute {name!r}: a reduction (te.sum/max/min) must be the whole "
            f"body of the compute, not part of an expression; split it into two "
            f"computes")


def _check_no_reduce_vars(e: Expr, reduce_axes, name: str, what: str) -> None:
    used = {id(v) for v in collect(e, Var)}
    for iv in reduce_axes:
        if id(iv.var) in used:
            raise DefinitionTypeError(
                f"compute {name!r}: the {what} of the reduction uses reduce_axis "
                f"{iv.var.name!r}; expected only spatial axes")


def _check_vars(body: Expr, axis, reduce_axes, name: str) -> None:
    allowed = {id(iv.var) for iv in axis} | {id(iv.var) for iv in reduce_axes}
    for v in collect(body, Var):
        if id(v) in allowed or not v.is_axis:
            continue
        raise DefinitionTypeError(
            f"compute {name!r}: the body uses axis {v.name!r}, which is neither "
            f"an axis of this compute nor one of its reduce_axis; expected the "
            f"index arguments of fcompute, and reduce axes only inside the "
            f"te.sum/max/min that lists them in axis= (an axis of another "
            f"compute, or a reduce_axis not listed in axis=?)")


def _broadcast_binary(op: str, a, b) -> Tensor:
    shapes = [x.shape for x in (a, b) if isinstance(x, Tensor)]
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        ext = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0} - {1}
        if len(ext) > 1:
            raise DefinitionValueError(
                f"{op}: shapes {shapes[0]} and {shapes[-1]} do not broadcast "
                f"(dimension {k}); expected equal extents or 1 in each trailing "
                f"dimension")
        out.append(ext.pop() if ext else 1)

    def read(x, idx):
        if not isinstance(x, Tensor):
            return x
        off = ndim - x.ndim
        return x[tuple(0 if x.shape[d] == 1 and out[d + off] != 1 else idx[d + off]
                       for d in range(x.ndim))]

    names = [x.name for x in (a, b) if isinstance(x, Tensor)]
    return compute(tuple(out) if out else (1,), lambda *i: binary(op, read(a, i), read(b, i)),
                   name=f"T_{op}_{'_'.join(names)}")
