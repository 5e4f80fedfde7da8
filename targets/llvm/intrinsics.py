"""LLVM types, constants and lane-polymorphic operations of the LLVM backend.

Every function here takes LLVM values that are either scalars or vectors (``<N x T>``) of
one element type and emits the same instructions for both, so the scalar code generator
(:mod:`.codegen`) and the vector widener (:mod:`.vectorize`) share them.

Type mapping: ``bool`` is ``i1`` in registers and ``i8`` in memory (numpy's layout), signed
and unsigned ints are ``iN`` (signedness lives in the polytile dtype, which picks ``sdiv`` or
``udiv``, ``ashr`` or ``lshr``, ...), ``float16/32/64`` are ``half/float/double``.
``bfloat16`` is its ``i16`` bit pattern, in registers as in memory: after
:mod:`polytile.schedule.passes.bfloat16` it is only loaded, stored, selected and converted
to and from ``float``, with integer instructions (the rounding to nearest even is
``(u + 0x7fff + ((u >> 16) & 1)) >> 16`` on the float's bits, NaN kept quiet), so no
libgcc routine and no bfloat16 instruction set is needed.

Float semantics: ``contract`` on ``fadd``/``fsub``/``fmul`` (FMA formation only, as C
compilers do by default), or ``fast`` when the target asks for ``-fast-math``. Float
``min``/``max`` are ``select(a < b, a, b)`` (TVM's choice; lowers to ``vminps``).
"""

from __future__ import annotations

import llvmlite.ir as ir

from polytile.errors import BuildError, InternalError, format_error
from polytile.te import dtype as dt

from . import vecmath

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
VOID = ir.VoidType()
I8P = I8.as_pointer()

_FLOAT_TYPES = {"float16": ir.HalfType(), "float32": ir.FloatType(),
                "float64": ir.DoubleType()}

STATUS_OK = 0
STATUS_NO_MEMORY = 1
#: a ``tir.call_packed`` function raised (the exception waits in :mod:`polytile.registry`)
STATUS_PACKED = 2
#: statuses from this value on are failed run-time checks: ``STATUS_ASSERT + k`` is the
#: ``k``-th ``Assert`` of the function (``loop_ir.asserts``)
STATUS_ASSERT = 16


def llvm_type(dtype: str, lanes: int = 1) -> ir.Type:
    """Register type of ``dtype`` (``<lanes x T>`` when ``lanes > 1``)."""
    t = I1 if dtype == "bool" else _FLOAT_TYPES.get(dtype) or ir.IntType(dt.bits(dtype))
    return ir.VectorType(t, lanes) if lanes > 1 else t


def mem_type(dtype: str, lanes: int = 1) -> ir.Type:
    """In-memory type of ``dtype`` (``bool`` is one byte)."""
    return llvm_type("int8" if dtype == "bool" else dtype, lanes)


def lanes_of(v: ir.Value) -> int:
    """Number of lanes of an LLVM value (1 for scalars)."""
    return v.type.count if isinstance(v.type, ir.VectorType) else 1


def const(dtype: str, value, lanes: int = 1) -> ir.Constant:
    """An LLVM constant of ``dtype`` (a splat vector when ``lanes > 1``)."""
    t = llvm_type(dtype)
    if dtype == "bool":
        c = ir.Constant(t, int(bool(value)))
    elif dtype == "bfloat16":
        bits = int(dt.bfloat16_bits(value))
        c = ir.Constant(t, bits - (1 << 16) if bits >= 1 << 15 else bits)
    elif dt.is_float(dtype):
        c = ir.Constant(t, float(value))
    else:
        bits = dt.bits(dtype)
        v = int(value) & ((1 << bits) - 1)
        if v >= 1 << (bits - 1):
            v -= 1 << bits  # print as signed two's complement
        c = ir.Constant(t, v)
    if lanes > 1:
        return ir.Constant(ir.VectorType(t, lanes), [c] * lanes)
    return c


def splat(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """Broadcast scalar ``v`` to ``<lanes x T>`` (insertelement + shufflevector)."""
    if isinstance(v, ir.Constant) and not isinstance(v.type, ir.VectorType):
        return ir.Constant(ir.VectorType(v.type, lanes), [v] * lanes)
    vt = ir.VectorType(v.type, lanes)
    one = b.insert_element(ir.Constant(vt, ir.Undefined), v, I32(0))
    return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def _fm(fast: bool) -> tuple[str, ...]:
    return ("fast",) if fast else ("contract",)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    """Declare (once) an external function or intrinsic ``name`` in ``module``."""
    g = module.globals.get(name)
    if g is None:
        g = ir.Function(module, ir.FunctionType(ret, args), name=name)
    return g


def _suffix(t: ir.Type) -> str:
    """LLVM's overload suffix of a type: ``f32``, ``i64``, ``v16f32``, ``p0``."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    if isinstance(t, ir.PointerType):
        return f"p{t.addrspace}"
    return t.intrinsic_name


def call_intrinsic(b: ir.IRBuilder, base: str, args: list, ret: ir.Type | None = None,
                   extra: tuple = (), fastmath: tuple = ()) -> ir.Value:
    """Call ``llvm.<base>.<type suffix>`` overloaded on the first argument's type; ``extra``
    are additional (non-overloaded) constant arguments appended to ``args``."""
    t = args[0].type
    fn = declare(b.module, f"llvm.{base}.{_suffix(t)}", ret or t,
                 [a.type for a in args] + [x.type for x in extra])
    return b.call(fn, list(args) + list(extra), fastmath=fastmath)


# arithmetic ------------------------------------------------------------------------------


def binop(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dtype: str,
          fast: bool = False) -> ir.Value:
    """``x <op> y`` for the ``Binary`` ops except ``floordiv``/``floormod`` (rewritten by
    :mod:`polytile.schedule.intdiv` before reaching here).

    Raises
    ------
    BuildError
        For an op that does not exist for ``dtype`` (``div`` on ints, shifts on floats).
    """
    _not_bfloat16("binary op " + repr(op), dtype)
    if dt.is_float(dtype):
        fl = _fm(fast)
        if op == "add":
            return b.fadd(x, y, flags=fl)
        if op == "sub":
            return b.fsub(x, y, flags=fl)
        if op == "mul":
            return b.fmul(x, y, flags=fl)
        if op == "div":
            return b.fdiv(x, y, flags=("fast",) if fast else ())
        if op in ("min", "max"):
            # numpy's maximum/minimum: ``x >= y || isnan(x) ? x : y`` propagates a NaN in
            # either operand (llvm.maxnum and x86 maxps drop one; llvm.maximum would also
            # order -0 below +0, which numpy does not)
            c = b.or_(b.fcmp_ordered("<=" if op == "min" else ">=", x, y),
                      b.fcmp_unordered("uno", x, x))
            return b.select(c, x, y)
    else:
        signed = dt.is_signed(dtype)
        simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "bitand": b.and_,
                  "bitor": b.or_, "bitxor": b.xor, "shl": b.shl}
        if op in simple:
            return simple[op](x, y)
        if op in ("truncdiv", "truncmod") and signed:
            return _signed_div(b, op, x, y)
        if op == "truncdiv":
            return b.udiv(x, y)
        if op == "truncmod":
            return b.urem(x, y)
        if op == "shr":
            return b.ashr(x, y) if signed else b.lshr(x, y)
        if op in ("min", "max"):
            name = ("s" if signed else "u") + op
            return call_intrinsic(b, name, [x, y])
    raise BuildError(format_error("codegen_llvm", f"binary op {op!r} on {dtype} operands",
                                  "expected an op that polytile.te defines for this dtype"))


def _splat(t: ir.Type, v: int) -> ir.Constant:
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [ir.Constant(t.element, v)] * t.count)
    return ir.Constant(t, v)


def _signed_div(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """``sdiv``/``srem`` that wrap like numpy at ``INT_MIN / -1`` (LLVM's are undefined
    there and x86's ``idiv`` traps): a divisor of -1 divides by 1 instead, and the
    quotient is then negated with wrapping (``0 - x``); the remainder is 0 either way.
    Constant divisors other than -1 (and 0) need no guard."""
    c = getattr(y, "constant", None)
    if isinstance(c, int) and c not in (-1, 0):
        return b.sdiv(x, y) if op == "truncdiv" else b.srem(x, y)
    if isinstance(c, int) and c == -1:
        return b.sub(_splat(x.type, 0), x) if op == "truncdiv" else _splat(x.type, 0)
    minus_one = b.icmp_signed("==", y, _splat(y.type, -1))
    safe = b.select(minus_one, _splat(y.type, 1), y)
    if op == "truncmod":
        return b.srem(x, safe)
    return b.select(minus_one, b.sub(_splat(x.type, 0), x), b.sdiv(x, safe))


_ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compare(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
    """``x <op> y`` giving ``i1`` lanes; floats compare ordered except ``ne`` (unordered,
    so ``NaN != x`` holds, as in C)."""
    _not_bfloat16("comparison " + repr(op), dtype)
    if dt.is_float(dtype):
        if op == "ne":
            return b.fcmp_unordered("!=", x, y)
        return b.fcmp_ordered(_ICMP[op], x, y)
    if dt.is_signed(dtype):
        return b.icmp_signed(_ICMP[op], x, y)
    return b.icmp_unsigned(_ICMP[op], x, y)


def freeze(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """LLVM's ``freeze v``: ``v``, or where ``v`` is poison (in a lane), some fixed value
    (llvmlite has no builder method for it)."""
    instr = ir.instructions.Instruction(b.block, v.type, "freeze", [v])
    b._insert(instr)
    return instr


def cast(b: ir.IRBuilder, v: ir.Value, src: str, dst: str) -> ir.Value:
    """Convert ``v`` from dtype ``src`` to ``dst`` with C rules: floats truncate toward zero
    into ints, anything to ``bool`` is ``!= 0``, ints narrow by truncation and widen by sign
    (signed source) or zero (unsigned source, bool) extension.

    A float beyond the range of the int type (or NaN) converts to an unspecified value of
    that element (C's undefined behaviour; the interpreter wraps): LLVM's ``fptosi`` gives
    poison there, which is frozen, since poison spreads beyond the element (an ``int4``
    byte holding the element and its neighbour stored as poison is a store LLVM deletes:
    fuzz llvm 83624's neighbour was never written)."""
    if src == dst:
        return v
    if "bfloat16" in (src, dst):
        if src == "bfloat16":
            return cast(b, _bfloat16_to_float(b, v), "float32", dst)
        return _float_to_bfloat16(b, cast(b, v, src, "float32"))
    lanes = lanes_of(v)
    to = llvm_type(dst, lanes)
    if dst == "bool":
        zero = const(src, 0, lanes)
        if dt.is_float(src):
            return b.fcmp_unordered("!=", v, zero)
        return b.icmp_unsigned("!=", v, zero)
    if dt.is_float(src):
        if dt.is_float(dst):
            return b.fpext(v, to) if dt.bits(dst) > dt.bits(src) else b.fptrunc(v, to)
        return freeze(b, b.fptosi(v, to) if dt.is_signed(dst) else b.fptoui(v, to))
    # src is an int or bool
    if dt.is_float(dst):
        return b.sitofp(v, to) if dt.is_signed(src) else b.uitofp(v, to)
    sb, db = dt.bits(src), dt.bits(dst)
    if sb == db:
        return v
    if sb > db:
        return b.trunc(v, to)
    return b.sext(v, to) if dt.is_signed(src) else b.zext(v, to)


def _bfloat16_to_float(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """The ``float`` value of ``bfloat16`` bits ``v`` (exact: the bits are the high half)."""
    lanes = lanes_of(v)
    wide = b.shl(b.zext(v, llvm_type("int32", lanes)), const("int32", 16, lanes))
    return b.bitcast(wide, llvm_type("float32", lanes))


def _float_to_bfloat16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """``float`` ``v`` rounded to the nearest ``bfloat16`` (ties to even; NaN stays a quiet
    NaN with its sign and high payload; overflow gives the infinity of its sign), as bits."""
    lanes = lanes_of(v)

    def k(n: int) -> ir.Constant:
        return const("int32", n, lanes)

    u = b.bitcast(v, llvm_type("int32", lanes))
    high = b.lshr(u, k(16))
    rounded = b.lshr(b.add(b.add(u, k(0x7FFF)), b.and_(high, k(1))), k(16))
    quiet = b.or_(high, k(0x40))
    bits = b.select(b.fcmp_unordered("uno", v, v), quiet, rounded)
    return b.trunc(bits, llvm_type("int16", lanes))


def _not_bfloat16(what: str, dtype: str) -> None:
    if dtype == "bfloat16":
        raise InternalError(format_error(
            "codegen_llvm", f"{what} on bfloat16 operands reached code generation",
            "expected float32 arithmetic and conversions (legalize_bfloat16 writes them)"))


# math intrinsics -------------------------------------------------------------------------

_LLVM_UNARY = {"log10": "log10", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "floor": "floor",
               "ceil": "ceil", "round": "roundeven", "trunc": "trunc"}
_LIBM = {name: (name + "f", name) for name in (
    "tan", "asin", "acos", "atan", "sinh", "cosh", "atan2", "hypot")}
CALL_NAMES = vecmath.NAMES + tuple(_LLVM_UNARY) + tuple(_LIBM) + (
    "rsqrt", "abs", "isnan", "pow", "fmod", "isinf", "isfinite", "copysign")


def _libm(b: ir.IRBuilder, name: str, xs: list, dtype: str) -> ir.Value:
    """A libm call (``tanhf``, ``atan2f``...) on one or two arguments, per lane for vectors;
    ``half`` goes through ``float``."""
    fname, dname = _LIBM[name]
    x = xs[0]
    lanes = lanes_of(x)
    if dtype == "float16":
        xf = [b.fpext(v, llvm_type("float32", lanes)) for v in xs]
        return b.fptrunc(_libm(b, name, xf, "float32"), x.type)
    st = llvm_type(dtype)
    fn = declare(b.module, fname if dtype == "float32" else dname, st, [st] * len(xs))
    if lanes == 1:
        return b.call(fn, xs)
    out = ir.Constant(x.type, ir.Undefined)
    for k in range(lanes):
        lane = [b.extract_element(v, I32(k)) for v in xs]
        out = b.insert_element(out, b.call(fn, lane), I32(k))
    return out


def math_call(b: ir.IRBuilder, name: str, args: list, arg_dtype: str,
              fast: bool = False, fma: bool = True) -> ir.Value:
    """Emit the ``Call`` intrinsic ``name`` on lane-polymorphic ``args`` of ``arg_dtype``.

    ``exp``, ``exp2``, ``expm1``, ``log``, ``log2``, ``log1p``, ``tanh``, ``sigmoid``, ``erf``
    and the ``fast_*`` variants are :mod:`.vecmath` routines, the same code for scalars and
    vectors (``fast`` selects the fast variants; ``fma``: the target has FMA instructions);
    ``sqrt``, ``floor``... are LLVM intrinsics and the rest libm calls (per lane).

    Raises
    ------
    BuildError
        For an unknown intrinsic name or an int argument to a float intrinsic.
    """
    _not_bfloat16(f"intrinsic {name!r}", arg_dtype)
    fm = ("fast",) if fast else ()
    x = args[0]
    if name == "abs":
        if dt.is_float(arg_dtype):
            return call_intrinsic(b, "fabs", [x])
        if dt.is_unsigned(arg_dtype) or arg_dtype == "bool":
            return x
        return call_intrinsic(b, "abs", [x], extra=(I1(0),))  # INT_MIN stays INT_MIN
    if name == "isnan" and dt.is_float(arg_dtype):
        return b.fcmp_unordered("uno", x, x)
    if name in ("popcount", "clz") and dt.is_int(arg_dtype):
        # ctlz with is_zero_poison false: clz(0) is the bit width, as CUDA's __clz
        if name == "popcount":
            return call_intrinsic(b, "ctpop", [x])
        return call_intrinsic(b, "ctlz", [x], extra=(I1(0),))
    if not dt.is_float(arg_dtype) or name not in CALL_NAMES:
        raise BuildError(format_error(
            "codegen_llvm", f"unknown intrinsic {name!r} for {arg_dtype} arguments",
            f"expected one of {', '.join(CALL_NAMES)} on float arguments (abs, popcount, clz on ints)"))
    if name in vecmath.NAMES:
        return vecmath.emit(b, name, x, arg_dtype, fast=fast, fma=fma)
    lanes = lanes_of(x)
    one = const(arg_dtype, 1.0, lanes)
    if name in _LLVM_UNARY:
        return call_intrinsic(b, _LLVM_UNARY[name], [x], fastmath=fm)
    if name in _LIBM:
        return _libm(b, name, args, arg_dtype)
    if name in ("isinf", "isfinite"):
        inf = const(arg_dtype, float("inf"), lanes)
        mag = call_intrinsic(b, "fabs", [x])
        if name == "isinf":
            return b.fcmp_ordered("==", mag, inf)
        return b.fcmp_ordered("<", mag, inf)  # false for NaN and infinities
    if name == "copysign":
        return call_intrinsic(b, "copysign", [x, args[1]])
    if name == "rsqrt":
        return b.fdiv(one, call_intrinsic(b, "sqrt", [x], fastmath=fm), flags=fm)
    if name == "pow":
        return call_intrinsic(b, "pow", [x, args[1]], fastmath=fm)
    # fmod: C fmod, the remainder with the sign of x
    return b.frem(x, args[1], flags=fm)
