"""Building the bodies of tensor intrinsics (TVM v0.19's ``tvm.tir`` names).

A tensor intrinsic's ``fcompute(ins, outs)`` (:func:`polytile.te.decl_tensor_intrin`)
receives :class:`BufferView` objects, one per operand region, and returns loop IR built
with this module:

* ``call_extern(dtype, "gemv_update", cc.access_ptr("w"), aa.access_ptr("r"), 16)``: a C
  function (resolved when the module is loaded: ``s[C].pragma(axis, "import_llvm", ir)``
  links LLVM IR text in, or ``"import_c"`` compiles C source with the system compiler);
  ``call_pure_extern`` the same without side effects; ``call_llvm_intrin(dtype,
  "llvm.fma.f32", a, b, c)`` an LLVM intrinsic; ``call_intrin(dtype, name, ...)`` a
  builtin of the target's C dialect (CUDA);
* ``ir_builder.create()``: ``emit(stmt_or_call)``, ``with ib.for_range(0, n, name="i") as
  i:``, ``with ib.if_scope(cond):`` then ``with ib.else_scope():``, ``p = ib.buffer_ptr(view)``
  (``p[i]`` and ``p[i] = v``: the region's elements in row-major order), ``t =
  ib.allocate(dtype, shape, name, scope)`` (scratch, the same flat access), ``get()``;
* ``view.vload(index)`` / ``view.vstore(index, value)``: element ``index`` (a tuple in
  the view's shape) of the region, ``view.access_ptr(mode, offset=0)`` its address.

``decl_buffer(shape, dtype, name, strides=..., offset_factor=..., scope=...)`` declares an
operand's layout in ``binds``: strides given as ``te.var`` take the region's strides, and
constant strides must equal them (checked when the region is bound); no strides means a
compact row-major region.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from polytile.errors import (DefinitionTypeError, DefinitionValueError, LoweringError,
                             format_error)
from polytile.te.expr import Binary, Const, Expr, ExprOp, convert
from polytile.te.expr import Var as _IRVar
from polytile.schedule.loop_ir import (AccessPtr, Allocate, Buffer, Evaluate, ExternCall, For,
                                       IfThenElse, LetStmt, Load, Stmt, Store, While, seq)

# The expression helpers TVM programs reach through ``tvm.tir`` (the same functions as
# polytile.te's, re-exported so that ``tir.const(0, "int32")`` ports unchanged).
from polytile.te.expr import cast, const
from polytile.te.expr import logical_and as all  # noqa: A001 (TVM's name)
from polytile.te.expr import logical_or as any  # noqa: A001
from polytile.te.expr import select as if_then_else
from polytile.te.reduction import max_value, min_value
# TVM's ``tvm.tir`` also holds the math functions (``tir.exp``...) and the index helpers
from polytile.te.scalar_math import (abs, acos, asin, atan, atan2, ceil, clz, copysign,  # noqa: A004
                                     cos, cosh, erf, exp, exp2, expm1, fast_erf, fast_exp,
                                     fast_tanh, floor, floordiv, floormod, fmod, hypot,
                                     isfinite, isinf, isnan, log, log1p, log2, log10,
                                     nearbyint, popcount, pow, power, round, rsqrt, sigmoid, sin, sinh,
                                     sqrt, tan, tanh, trunc, truncdiv, truncmod)

indexdiv = floordiv   # TVM's index arithmetic: floor semantics
indexmod = floormod


def Select(condition, true_value, false_value) -> Expr:  # noqa: N802 (TVM's name)
    """TVM's ``tir.Select(condition, true_value, false_value)`` (the reduction and tuple
    inputs tutorials' ``argmax`` combiner): ``te.if_then_else``. TVM evaluates both
    operands; polytile only the chosen one, which gives the same values."""
    return if_then_else(condition, true_value, false_value)


def Cast(dtype: str, value) -> Expr:  # noqa: N802 (TVM's name)
    """TVM's ``tir.Cast(dtype, value)``: ``value.astype(dtype)``."""
    return cast(value, dtype)


def bitwise_and(x, y) -> Expr:
    """TVM's ``tir.bitwise_and``: ``x & y`` of integers."""
    return convert(x) & y


def bitwise_or(x, y) -> Expr:
    """TVM's ``tir.bitwise_or``: ``x | y`` of integers."""
    return convert(x) | y


def bitwise_xor(x, y) -> Expr:
    """TVM's ``tir.bitwise_xor``: ``x ^ y`` of integers."""
    return convert(x) ^ y


def bitwise_not(x) -> Expr:
    """TVM's ``tir.bitwise_not``: ``~x`` of an integer."""
    return ~convert(x)


def shift_left(x, y) -> Expr:
    """TVM's ``tir.shift_left``: ``x << y``."""
    return convert(x) << y


def shift_right(x, y) -> Expr:
    """TVM's ``tir.shift_right``: ``x >> y`` (arithmetic for signed integers)."""
    return convert(x) >> y


class _VarMeta(type):
    # tir.Var(name, dtype) in TVM's order builds polytile's IR variable (whose dataclass
    # order is (dtype, name): Var("n", "int32") made a variable of dtype "n");
    # isinstance(x, tir.Var) asks about that class
    def __call__(cls, name: str = "v", dtype="int32", span=None):
        from polytile.te.tensor import size_var, var

        if not isinstance(name, str):
            raise DefinitionTypeError(format_error(
                f"tir.{cls.__name__}", f"name {name!r}", "expected a string first: "
                f"tir.{cls.__name__}(name, dtype), as in TVM"))
        return (size_var if cls.__name__ == "SizeVar" else var)(name, dtype)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _IRVar)


class Var(metaclass=_VarMeta):
    """TVM's ``tir.Var(name, dtype)``: ``te.var(name, dtype)`` (a scalar variable).

    Raises
    ------
    DefinitionTypeError
        For a name that is not a string or an unknown dtype.
    """


class SizeVar(metaclass=_VarMeta):
    """TVM's ``tir.SizeVar(name, dtype)``: ``te.size_var(name, dtype)`` (known >= 0)."""


def IntImm(dtype: str, value, span=None) -> Const:  # noqa: N802 (TVM's name)
    """TVM's ``tir.IntImm(dtype, value)``: the integer constant ``value`` of ``dtype``.

    Raises
    ------
    DefinitionTypeError
        For a dtype that is not an integer or bool.
    """
    from polytile.te import dtype as dt

    if not (dt.is_int(str(dtype)) or str(dtype) == "bool"):
        raise DefinitionTypeError(format_error("tir.IntImm", f"dtype {dtype!r}",
                                               "expected an integer dtype (tir.FloatImm for "
                                               "floats)"))
    return const(int(value), dtype)


def FloatImm(dtype: str, value, span=None) -> Const:  # noqa: N802 (TVM's name)
    """TVM's ``tir.FloatImm(dtype, value)``: the float constant ``value`` of ``dtype``.

    Raises
    ------
    DefinitionTypeError
        For a dtype that is not a float.
    """
    from polytile.te import dtype as dt

    if not dt.is_float(str(dtype)):
        raise DefinitionTypeError(format_error("tir.FloatImm", f"dtype {dtype!r}",
                                               "expected a float dtype (tir.IntImm for "
                                               "integers)"))
    return const(float(value), dtype)


def ceildiv(a, b) -> Expr:
    """TVM's ``tir.ceildiv(a, b)``: ``ceil(a / b)`` of integers, for any signs
    (``-floordiv(-a, b)``)."""
    return -floordiv(-convert(a), b)


def div(a, b) -> Expr:
    """TVM's ``tir.div(a, b)``: C's ``a / b``: truncating for integers (``truncdiv``),
    the quotient for floats."""
    a = convert(a)
    from polytile.te import dtype as dt

    if dt.is_float(a.dtype) or dt.is_float(convert(b).dtype):
        return a / b
    return truncdiv(a, b)


def likely(cond) -> Expr:
    """TVM's ``tir.likely(cond)``, a branch hint: ``cond`` itself."""
    return convert(cond)


__all__ = ["BufferView", "Cast", "DeclBuffer", "FloatImm", "IntImm", "Select", "SizeVar",
           "Var", "ceildiv", "div", "abs", "acos", "all", "any", "asin",
           "atan", "atan2", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor",
           "call_extern", "call_intrin", "call_llvm_intrin", "call_llvm_pure_intrin",
           "call_packed", "call_pure_extern", "ceil", "clz", "const", "copysign", "cos", "cosh",
           "decl_buffer", "erf", "exp", "exp2", "expm1", "fast_erf", "fast_exp", "fast_tanh",
           "floor", "floordiv", "floormod", "fmod", "hypot", "if_then_else", "indexdiv",
           "indexmod", "ir_builder", "isfinite", "isinf", "isnan", "likely", "log", "log1p",
           "log2", "log10", "max_value", "min_value", "nearbyint", "popcount", "pow", "power", "round",
           "rsqrt", "shift_left", "shift_right", "sigmoid", "sin", "sinh", "sqrt", "tan", "tanh",
           "trunc", "truncdiv", "truncmod", "vscale"]


@dataclass(frozen=True, eq=False)
class DeclBuffer:
    """A declared operand layout (TVM's ``tir.decl_buffer`` in ``binds``): ``strides``
    None (compact) or a tuple of ints and ``te.var`` (free: the region's stride)."""

    shape: tuple
    dtype: str
    name: str
    strides: tuple | None = None
    elem_offset: object = None
    scope: str = ""
    data_alignment: int = -1
    offset_factor: int = 0


def decl_buffer(shape, dtype: str = "float32", name: str = "buffer", data=None, strides=None,
                elem_offset=None, scope: str = "", data_alignment: int = -1,
                offset_factor: int = 0, buffer_type: str = "", axis_separators=None,
                span=None) -> DeclBuffer:
    """Declare the layout of a tensor intrinsic operand (see the module docstring).

    Raises
    ------
    DefinitionTypeError
        For strides that are neither ints nor ``te.var``.
    """
    shape = tuple(int(s) for s in ((shape,) if isinstance(shape, int) else shape))
    if strides is not None:
        strides = tuple(strides)
        for s in strides:
            if not isinstance(s, (int, _IRVar)):
                raise DefinitionTypeError(format_error(
                    "decl_buffer", f"stride {s!r} of {name!r}",
                    "ints or te.var (a stride taken from the bound region)"))
        if len(strides) != len(shape):
            raise DefinitionTypeError(format_error(
                "decl_buffer", f"{name!r} has {len(shape)} dimensions but {len(strides)} "
                "strides", "one stride per dimension"))
    return DeclBuffer(shape, str(dtype), name, strides, elem_offset, scope, data_alignment,
                      offset_factor)


def _i64(x) -> Expr:
    e = convert(x, "int64")
    return e if e.dtype == "int64" else convert(e, "int64").astype("int64")


class BufferView:
    """The region of a buffer one intrinsic call works on (TVM's ``Buffer`` bound in
    ``fcompute``).

    Attributes
    ----------
    shape : tuple of int
        The intrinsic operand's shape.
    dtype : str
    strides : tuple of int
        Element strides of the region in the underlying buffer.
    elem_offset : Expr
        Flat element offset (``int64``) of the region's first element in the buffer.
    scope : str
        The buffer's storage scope (``global``, ``shared``, ``local``, ``stack``...).
    name : str
    """

    def __init__(self, buffer: Buffer, shape: tuple, strides: tuple, elem_offset: Expr,
                 name: str = "", indices: tuple | None = None):
        self.buffer = buffer
        # the region's start index per dimension of ``buffer`` (None where unknown)
        self.indices = indices
        self.shape = tuple(shape)
        self.dtype = buffer.dtype
        self.strides = tuple(strides)
        self.elem_offset = elem_offset
        self.scope = buffer.scope
        self.name = name or buffer.name
        self.data = buffer

    def __repr__(self) -> str:
        return (f"BufferView({self.buffer.name}, shape={list(self.shape)}, "
                f"strides={list(self.strides)}, offset={self.elem_offset})")

    def offset_of(self, indices) -> Expr:
        """Flat element offset of element ``indices`` of the region."""
        if not isinstance(indices, (tuple, list)):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise LoweringError(format_error(
                "BufferView", f"{len(indices)} indices for region {self.name!r} of shape "
                f"{list(self.shape)}", "one index per dimension"))
        off = self.elem_offset
        for i, s in zip(indices, self.strides):
            term = _i64(i)
            if not isinstance(s, int):    # a stride of symbolic sizes
                term = Binary("int64", "mul", term, _i64(s))
            elif s != 1:
                term = Binary("int64", "mul", term, Const("int64", s))
            off = Binary("int64", "add", off, term)
        return off

    def access_ptr(self, access_mask="rw", ptr_type: str = "handle", content_lanes: int = 1,
                   offset=0, extent=None) -> AccessPtr:
        """The address of the region's first element (plus ``offset`` elements): a pointer
        argument for ``call_extern``. ``access_mask`` is ``"r"``, ``"w"`` or ``"rw"`` (or
        TVM's 1, 2, 3)."""
        mode = {1: "r", 2: "w", 3: "rw"}.get(access_mask, access_mask)
        off = self.elem_offset
        if not (isinstance(offset, int) and offset == 0):
            off = Binary("int64", "add", off, _i64(offset))
        return AccessPtr("handle", self.buffer, off, str(mode))

    def vload(self, begin, dtype: str | None = None) -> Load:
        """Element ``begin`` (a tuple of indices into the region) as an expression."""
        if dtype is not None and dtype != self.dtype:
            raise LoweringError(format_error(
                "vload", f"dtype {dtype!r} of region {self.name!r}",
                f"the element dtype {self.dtype!r} (vector loads are not supported)"))
        return Load(self.dtype, self.buffer, (self.offset_of(begin),))

    def vstore(self, begin, value) -> Store:
        """The statement storing ``value`` at element ``begin`` of the region."""
        return Store(self.buffer, (self.offset_of(begin),), convert(value, self.dtype))


def _args(args) -> tuple:
    out = []
    for a in args:
        if isinstance(a, (ExprOp, Expr)):
            out.append(a)
        elif isinstance(a, bool):
            out.append(Const("bool", a))
        elif isinstance(a, int):
            out.append(Const("int32", a))
        elif isinstance(a, float):
            out.append(Const("float32", a))
        else:
            raise DefinitionTypeError(format_error(
                "call_extern", f"argument {a!r} of type {type(a).__name__}",
                "expressions, ints, floats or access_ptr(...)"))
    return tuple(a if isinstance(a, Expr) else convert(a) for a in out)


def _call(kind: str, dtype: str, name: str, args) -> ExternCall:
    if not isinstance(name, str) or not name:
        raise DefinitionTypeError(format_error(f"call_{kind}", f"function name {name!r}",
                                               "a non-empty string"))
    return ExternCall(str(dtype), name, _args(args), kind)


def call_extern(dtype: str, func_name: str, *args, span=None) -> ExternCall:
    """A call of C function ``func_name`` returning ``dtype`` (``"int32"``, ``"void"``...);
    pointer arguments from ``view.access_ptr(mode)``, Python ints are ``int32``."""
    return _call("extern", dtype, func_name, args)


def call_pure_extern(dtype: str, func_name: str, *args, span=None) -> ExternCall:
    """:func:`call_extern` of a function without side effects."""
    return _call("pure_extern", dtype, func_name, args)


def call_intrin(dtype: str, func_name: str, *args, span=None) -> ExternCall:
    """A builtin of the target's C dialect (printed as a call on CUDA)."""
    return _call("intrin", dtype, func_name, args)


def call_packed(*args, span=None) -> ExternCall:
    """TVM's ``tir.call_packed("name", args...)``: call the Python function registered
    with :func:`polytile.register_func` as ``name`` (looked up when the built code runs;
    ``llvm`` target only, see :mod:`polytile.registry`). A buffer argument (``ins[k]``,
    ``outs[k]`` of ``fcompute``) reaches it as a writable numpy array of the region (a
    ``polytile.nd.CPUArray``), a scalar expression as a Python number (Python ints as
    ``int64``, floats as ``float64``, bools as ``int32``). An exception it raises is
    raised again by the built function. The call evaluates to ``int32`` 0.

    Raises
    ------
    DefinitionTypeError
        Without a name, or for an argument that is neither a buffer nor a scalar of a
        fixed-width dtype (strings, float16, symbolic region strides).
    """
    from polytile.registry import _SCALAR_C, site_symbol

    if not args or not isinstance(args[0], str) or not args[0]:
        raise DefinitionTypeError(format_error(
            "tir.call_packed", f"first argument {args[0] if args else None!r}",
            "expected the registered name, then the arguments"))
    name, descs, exprs = args[0], [], []
    for a in args[1:]:
        if isinstance(a, Buffer):
            raise DefinitionTypeError(format_error(
                "tir.call_packed", f"argument {a.name!r} of {name!r} is a buffer's data "
                "handle (ins[k].data)", "expected the buffer itself (ins[k], outs[k]): the "
                "function receives it as a numpy array"))
        if isinstance(a, BufferView):
            if a.dtype not in _SCALAR_C:
                raise DefinitionTypeError(format_error(
                    "tir.call_packed", f"buffer {a.name!r} of {name!r} has dtype {a.dtype}",
                    f"expected one of {', '.join(_SCALAR_C)}"))
            # the address, then the region's shape and strides (symbolic ones too) as int64
            descs.append(("buffer", a.dtype, len(a.shape)))
            exprs.append(a.access_ptr("rw"))
            exprs.extend(_i64(x) for x in tuple(a.shape) + tuple(a.strides))
            continue
        if isinstance(a, bool):
            e = Const("int32", int(a))
        elif isinstance(a, int):
            e = Const("int64", a)
        elif isinstance(a, float):
            e = Const("float64", a)
        elif isinstance(a, (Expr, ExprOp)):
            e = convert(a)
            if e.dtype == "bool":
                e = e.astype("int32")
        else:
            e = None
        if e is None or e.dtype not in _SCALAR_C:
            raise DefinitionTypeError(format_error(
                "tir.call_packed", f"argument {a!r} of {name!r} "
                f"({getattr(e, 'dtype', type(a).__name__)})",
                "expected a buffer of fcompute, or a scalar of a fixed-width int or float "
                "dtype"))
        descs.append(("scalar", e.dtype))
        exprs.append(e)
    return ExternCall("int32", site_symbol(name, tuple(descs)), tuple(exprs), "packed")


def vscale(*args, **kwargs):
    """TVM's ``vscale`` (Arm SVE's scalable vector length): refused (``TypeError``);
    polytile's vectors have a fixed width (``vectorize`` of a constant extent)."""
    raise DefinitionTypeError(format_error(
        "tir.vscale", "scalable vectors (Arm SVE) are not supported", "fixed-width "
        "vectors: split by a constant factor and vectorize the inner loop"))


def call_llvm_intrin(dtype: str, name: str, *args, span=None) -> ExternCall:
    """An LLVM intrinsic (``llvm.fma.f32``, ``llvm.x86...``) on the ``llvm`` target; its
    signature is taken from the argument and result dtypes. TVM's form with the number of
    arguments first (``call_llvm_intrin(dtype, name, 3, a, b, c)``) is accepted."""
    if args and isinstance(args[0], int) and len(args) == args[0] + 1:
        args = args[1:]
    return _call("llvm_intrin", dtype, name, args)


call_llvm_pure_intrin = call_llvm_intrin


def _condition(where: str, cond, expected: str):
    """``cond`` as a bool expression of an ir_builder scope (``DefinitionTypeError``
    naming ``where`` otherwise)."""
    c = convert(cond, "bool")
    if c.dtype != "bool":
        raise DefinitionTypeError(format_error(where, f"condition {c} has dtype {c.dtype}",
                                               expected))
    return c


class IRBuilder:
    """TVM's ``tir.ir_builder``: statements appended in order, loops as context managers.

    >>> ib = ir_builder.create()
    >>> with ib.for_range(0, 16, name="i") as i:
    ...     ib.emit(out.vstore((i,), a.vload((i,)) + 1))
    >>> body = ib.get()
    """

    def __init__(self):
        self._stack: list[list] = [[]]

    def emit(self, stmt) -> None:
        """Append a statement, or an expression evaluated for its side effects."""
        if isinstance(stmt, Expr):
            stmt = Evaluate(stmt)
        if not isinstance(stmt, Stmt):
            raise DefinitionTypeError(format_error(
                "ir_builder.emit", f"got {type(stmt).__name__}",
                "a statement (vstore) or a call (call_extern)"))
        self._stack[-1].append(stmt)

    @contextlib.contextmanager
    def for_range(self, begin, end, name: str = "i", dtype: str = "int64", kind="serial"):
        """A serial loop ``name`` from ``begin`` to ``end`` (exclusive); yields its
        variable. TVM's ``kind`` (``"parallel"``, ``"vectorize"``, ``"unroll"``) is a hint:
        the loop runs serially (the same values)."""
        v = _IRVar("int64", name)
        self._stack.append([])
        yield v
        body = _block(self._stack.pop())
        lo, hi = _i64(begin), _i64(end)
        self._stack[-1].append(For(v, lo, Binary("int64", "sub", hi, lo), "serial", body))

    @contextlib.contextmanager
    def if_scope(self, cond):
        """Statements run where ``cond`` (a bool expression) holds (TVM's ``if_scope``);
        an ``else_scope`` may follow at once."""
        c = _condition("ir_builder.if_scope", cond, "a bool expression (compare it, e.g. "
                       "x != 0)")
        self._stack.append([])
        yield
        body = _block(self._stack.pop())
        self._stack[-1].append(IfThenElse(c, body))

    @contextlib.contextmanager
    def else_scope(self):
        """Statements run where the condition of the ``if_scope`` just before is false.

        Raises
        ------
        DefinitionValueError
            When the last statement is not an ``if_scope`` without an else.
        """
        last = self._stack[-1][-1] if self._stack[-1] else None
        if not isinstance(last, IfThenElse) or last.else_case is not None:
            raise DefinitionValueError(format_error(
                "ir_builder.else_scope", "it does not follow an if_scope",
                "with ib.if_scope(cond): ... then at once with ib.else_scope(): ..."))
        self._stack.append([])
        yield
        body = _block(self._stack.pop())
        self._stack[-1][-1] = IfThenElse(last.cond, last.then_case, body)

    @contextlib.contextmanager
    def while_loop(self, condition):
        """Statements repeated while ``condition`` (a bool expression, evaluated before
        each iteration) holds (TVM's ``ib.while_loop``). The condition reads memory the
        body writes, typically a one-element scratch array::

            i = ib.allocate("int32", (1,), name="i", scope="local")
            i[0] = 0
            with ib.while_loop(i[0] < n):
                ...
                i[0] = i[0] + 1

        A loop whose condition never becomes false does not end (as in TVM and C).

        Raises
        ------
        DefinitionTypeError
            For a condition that is not a bool expression.
        """
        c = _condition("ir_builder.while_loop", condition, "expected a bool expression "
                       "(compare it, e.g. i[0] < n)")
        self._stack.append([])
        yield
        body = _block(self._stack.pop())
        self._stack[-1].append(While(c, body))

    def let(self, var_name, value) -> _IRVar:
        """Bind ``value`` to a new variable for the statements emitted after this call in
        the current scope (TVM's ``ib.let``); returns the variable (of ``value``'s dtype).
        ``var_name`` is a name, or a ``te.var`` (its dtype then; ``value`` is cast to it).

        Raises
        ------
        DefinitionTypeError
            For a ``var_name`` that is neither a string nor a ``te.var``.
        """
        e = convert(value)
        if isinstance(var_name, str) and var_name:
            v = _IRVar(e.dtype, var_name)
        elif isinstance(var_name, _IRVar):
            v = var_name
        else:
            raise DefinitionTypeError(format_error(
                "ir_builder.let", f"variable {var_name!r}", "expected a name or a te.var"))
        if e.dtype != v.dtype:
            e = e.astype(v.dtype)
        self._stack[-1].append(_Let(v, e))
        return v

    def likely(self, expr) -> Expr:
        """TVM's ``ib.likely(expr)``, a branch hint: ``expr`` itself."""
        return convert(expr)

    def scope_attr(self, node, attr_key: str, value) -> None:
        """TVM's ``ib.scope_attr``: refused. With ``"thread_extent"`` it launched the code of
        a GPU ``te.extern`` on a grid of threads; polytile runs an extern's code in one
        GPU thread (or on the CPU), and its threads come from schedules (``bind``).

        Raises
        ------
        DefinitionValueError
            Always, naming the attribute.
        """
        raise DefinitionValueError(format_error(
            "ir_builder.scope_attr", f"attribute {attr_key!r} of {node}", "expected no "
            "scope attributes: the code of a te.extern or tensor intrinsic runs in one "
            "thread",
            hint="write the computation as te.compute stages and bind their loops with "
            "s[T].bind(axis, te.thread_axis('threadIdx.x')); keep te.extern for a call"))

    def pointer(self, content_type: str, name: str = "ptr", scope: str = ""):
        """TVM's ``ib.pointer`` (a raw pointer variable): refused; use :meth:`allocate`
        (a scratch array with ``p[i]`` access) or :meth:`buffer_ptr`.

        Raises
        ------
        DefinitionValueError
            Always.
        """
        raise DefinitionValueError(format_error(
            "ir_builder.pointer", f"a raw {content_type} pointer {name!r}",
            "expected ib.allocate(dtype, shape) for scratch memory, or ib.buffer_ptr(view) "
            "for an operand"))

    @contextlib.contextmanager
    def new_scope(self):
        """A block of statements (TVM's ``new_scope``; no attributes here)."""
        yield

    def buffer_ptr(self, buf, shape=None) -> _Pointer:
        """Flat access to the elements of ``buf`` (a ``BufferView`` of ``fcompute``), TVM's
        ``ib.buffer_ptr``: ``p[i]`` loads element ``i`` in row-major order of the region,
        ``p[i] = value`` emits the store.

        Raises
        ------
        DefinitionTypeError
            For anything but a ``BufferView``.
        DefinitionValueError
            For ``shape=`` (TVM's reinterpreting shape): index the flat elements instead.
        """
        if shape is not None:
            raise DefinitionValueError(format_error(
                "ir_builder.buffer_ptr", f"shape={shape!r} is given", "no shape: index the "
                "region's elements in row-major order, p[i * n + j]"))
        if not isinstance(buf, BufferView):
            raise DefinitionTypeError(format_error(
                "ir_builder.buffer_ptr", f"got {type(buf).__name__}",
                "one of the buffers fcompute receives (ins[k] or outs[k])"))
        return _Pointer(self, buf)

    def allocate(self, dtype: str, shape, name: str = "buf", scope: str = "") -> _Pointer:
        """A scratch array of ``shape`` (ints or size expressions) and ``dtype`` for the
        statements emitted after this call in the current scope (TVM's ``ib.allocate``);
        returns a flat pointer to it (``p[i]``, ``p[i] = v``: row-major element ``i``).
        ``scope`` ``""``, ``"global"`` or ``"local"``: on the stack when its size is a
        constant of at most :data:`STACK_ALLOCATE_BYTES`, else on the heap (freed at the
        end of the scope; a heap buffer is refused inside a GPU kernel when building);
        ``"shared"``: GPU shared memory. Its elements start undefined.

        Raises
        ------
        DefinitionValueError
            For another scope, or an extent that is not positive.
        DefinitionTypeError
            For an unknown dtype.
        """
        from polytile.te.dtype import nbytes

        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        dims = [_i64(d) for d in shape]
        if scope not in ("", "global", "local", "shared"):
            raise DefinitionValueError(format_error(
                "ir_builder.allocate", f"scope {scope!r} of buffer {name!r}",
                "expected '', 'global', 'local' or 'shared'"))
        size = 1
        for d in dims:
            if isinstance(d, Const):
                if d.value < 1:
                    raise DefinitionValueError(format_error(
                        "ir_builder.allocate", f"buffer {name!r} has extent {d.value} in "
                        f"shape {list(shape)}", "expected positive extents"))
                size = size * d.value if size is not None else None
            else:
                size = None
        try:
            width = nbytes(dtype)
        except Exception as e:
            raise DefinitionTypeError(format_error(
                "ir_builder.allocate", f"buffer {name!r} has dtype {dtype!r}",
                "expected a scalar dtype such as 'float32'")) from e
        if scope == "shared":
            where = "shared"
        else:
            small = size is not None and size * width <= STACK_ALLOCATE_BYTES
            where = "stack" if small else "heap"
        # one flat dimension: the pointer indexes it row-major, as buffer_ptr does
        flat = dims[0]
        for d in dims[1:]:
            flat = Binary("int64", "mul", flat, d)
        buf = Buffer(name, (size if size is not None else flat,), dtype, where)
        self._stack[-1].append(_Alloc(buf))
        view = BufferView(buf, (size if size is not None else flat,), (1,),
                          Const("int64", 0), name=name)
        return _Pointer(self, view)

    def get(self) -> Stmt:
        """The statement built so far."""
        return _block(self._stack[0])


# ``ib.allocate`` of a constant size at most this many bytes is a stack array
STACK_ALLOCATE_BYTES = 64 << 10


@dataclass(frozen=True)
class _Alloc:
    """Marks where ``ib.allocate`` was called in a scope's statement list."""

    buffer: Buffer


@dataclass(frozen=True)
class _Let:
    """Marks where ``ib.let`` was called in a scope's statement list."""

    var: _IRVar
    value: Expr


def _block(items: list) -> Stmt:
    """The statements of one scope; each buffer allocated in it lives over the statements
    after its ``allocate`` call."""
    out: list = []
    for x in reversed(items):
        if isinstance(x, _Alloc):
            out = [Allocate(x.buffer, seq(*reversed(out)))]
        elif isinstance(x, _Let):
            out = [LetStmt(x.var, x.value, seq(*reversed(out)))]
        else:
            out.append(x)
    return seq(*reversed(out))


class _Pointer:
    """``ib.buffer_ptr(view)``: element ``i`` in row-major order of ``view``'s region."""

    def __init__(self, ib: IRBuilder, view: BufferView):
        self._ib = ib
        self._view = view
        self.dtype = view.dtype

    def _index(self, i) -> tuple:
        v = self._view
        if not v.shape:      # a rank-0 region
            return ()
        idx = []
        rest = _i64(i)
        for ext in reversed(v.shape[1:]):
            idx.append(Binary("int64", "floormod", rest, _i64(ext)))
            rest = Binary("int64", "floordiv", rest, _i64(ext))
        return (rest, *reversed(idx))

    def __getitem__(self, i) -> Load:
        return self._view.vload(self._index(i))

    def __setitem__(self, i, value) -> None:
        self._ib.emit(self._view.vstore(self._index(i), value))


class _IRBuilderModule:
    """``polytile.tir.ir_builder`` (TVM's module of that name): ``create()``."""

    IRBuilder = IRBuilder

    @staticmethod
    def create() -> IRBuilder:
        return IRBuilder()


ir_builder = _IRBuilderModule()


# ------------------------------------------------------------------ used by tensorize
_PARTS = ("body", "reset", "update")


def _as_stmt(x, intrin, part: str) -> Stmt | None:
    if x is None:
        return None
    if isinstance(x, Expr):
        return Evaluate(x)
    if isinstance(x, Stmt):
        return x
    if isinstance(x, IRBuilder):
        return x.get()
    raise DefinitionTypeError(format_error(
        "decl_tensor_intrin", f"fcompute of {intrin.name!r} returned {type(x).__name__} "
        f"for its {part}", "a statement (ib.get()), a call, or a tuple (body, reset, update)"))


def _parts(intrin, ins, outs) -> dict:
    got = intrin.fcompute(ins, outs)
    if isinstance(got, (tuple, list)):
        if len(got) != 3:
            raise DefinitionTypeError(format_error(
                "decl_tensor_intrin", f"fcompute of {intrin.name!r} returned {len(got)} "
                "statements", "one body, or (body, reset, update)"))
        items = dict(zip(_PARTS, got))
    else:
        items = {"body": got}
    out = {k: _as_stmt(v, intrin, k) for k, v in items.items()}
    return {k: v for k, v in out.items() if v is not None}


def probe_parts(intrin) -> tuple:
    """The parts (``body``, ``reset``, ``update``) ``fcompute`` gives, found by calling it
    on the declared buffers (TVM calls it at declaration too)."""
    return tuple(probe_statements(intrin))


def probe_statements(intrin) -> dict:
    """``{part: statement}`` that ``fcompute`` gives on the declared buffers (offsets
    symbolic); parts it leaves None are absent."""
    views = []
    for t in list(intrin.inputs) + list(intrin.outputs):
        d = intrin.binds.get(t)
        compact, s = [], 1
        for e in reversed(t.shape):
            compact.append(s)
            s *= e
        strides = tuple(reversed(compact))
        if d is not None and d.strides is not None:
            strides = tuple(x if isinstance(x, int) else c for x, c in zip(d.strides, strides))
        buf = Buffer(d.name if d is not None else t.name, tuple(t.shape), t.dtype, "global")
        offset = _IRVar("int64", f"{buf.name}_elem_offset")
        views.append(BufferView(buf, t.shape, strides, offset))
    n = len(intrin.inputs)
    return _parts(intrin, views[:n], views[n:])


def code_of(intrin, ins: list, outs: list, part: str) -> Stmt:
    """The statement of ``part`` of ``intrin`` on the bound regions ``ins``, ``outs``.

    Raises
    ------
    LoweringError
        When ``fcompute`` gives no such part.
    """
    parts = _parts(intrin, ins, outs)
    if part not in parts:
        raise LoweringError(format_error(
            "tensorize", f"intrinsic {intrin.name!r} gives no {part!r} statement",
            "fcompute returning (body, reset, update)"))
    return parts[part]
