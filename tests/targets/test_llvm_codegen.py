"""LLVM backend: expressions (every op, cast and intrinsic) on hand-written loop IR.

Each test builds a loop nest by hand, runs it on random non-zero data at awkward sizes with
the output poisoned (NaN or a sentinel) and compares with numpy. Every elementwise test runs
twice: as a serial loop, and split into a vectorized loop of 8 lanes plus a serial tail (so
the vector widening of every node is checked too).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from llvm_ir_helpers import (SIZES, Call, Cast, Cmp, Const, IfThenElse, LetStmt, Select, binop,
                             buf, build, c64, ld, loop, poison, rand, seq, st, var)

from polytile.te.expr import And, Not, Or

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
KINDS = ("serial", "vectorized")
RTOL = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}
LANES = 8


def elementwise(n: int, body, kind: str):
    """``body(i)`` for i in [0, n): serial, or vectorized by LANES with a serial tail."""
    if kind == "serial":
        i = var("i")
        return loop(i, n, body(i))
    io, ii, t = var("i.outer"), var("i.inner"), var("i.tail")
    main = loop(io, n // LANES, loop(ii, LANES, body(io * LANES + ii), "vectorized"))
    tail = loop(t, n % LANES, body(t + (n // LANES) * LANES))
    return seq(main, tail)


def run(params, body_fn, n, kind, arrays):
    m = build(params, elementwise(n, body_fn, kind))
    m(*arrays)
    return m


def check(out, ref, dtype):
    if dtype in RTOL:
        np.testing.assert_allclose(out.astype("float64"), ref.astype("float64"),
                                   rtol=RTOL[dtype], atol=RTOL[dtype])
    else:
        np.testing.assert_array_equal(out, ref)


# ----------------------------------------------------------------------------- binary ops
def _trunc_ref(a, b, what):
    a64, b64 = a.astype(object), b.astype(object)
    q = np.array([abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
                  for x, y in zip(a64, b64)], dtype=object)
    r = q if what == "div" else a64 - q * b64
    info = np.iinfo(a.dtype)   # INT_MIN / -1 wraps to INT_MIN, as numpy's // does
    span = int(info.max) - int(info.min) + 1
    return np.array([(int(x) - int(info.min)) % span + int(info.min) for x in r], a.dtype)


_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
       "min": np.minimum, "max": np.maximum, "bitand": np.bitwise_and,
       "bitor": np.bitwise_or, "bitxor": np.bitwise_xor, "shl": np.left_shift,
       "shr": np.right_shift, "floordiv": np.floor_divide, "floormod": np.remainder,
       "truncdiv": lambda a, b: _trunc_ref(a, b, "div"),
       "truncmod": lambda a, b: _trunc_ref(a, b, "mod")}
ARITH = ("add", "sub", "mul", "min", "max")


def _cases():
    for t in INTS:
        for op in ARITH + ("bitand", "bitor", "bitxor", "shl", "shr", "truncdiv", "truncmod",
                           "floordiv", "floormod"):
            yield op, t
    for t in FLOATS:
        for op in ARITH + ("div", "floordiv", "floormod"):
            yield op, t
    for op in ("bitand", "bitor", "bitxor", "min", "max"):
        yield op, "bool"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_binary(op, dtype, kind):
    n = 31
    # a stable seed (hash() of a str changes with every process)
    rng = np.random.default_rng(zlib.crc32(f"{op}/{dtype}".encode()))
    if op in ("shl", "shr"):
        info = np.iinfo(dtype)  # the full range: the sign bit decides ashr vs lshr
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        b = rand(n, dtype, 0, np.dtype(dtype).itemsize * 8 - 1, nonzero=False, rng=rng)
    elif dtype.startswith("int") or dtype.startswith("uint"):
        big = 1 << 40 if dtype.endswith("64") else 1 << 30
        lo = -big if op not in ("truncdiv", "truncmod", "floordiv", "floormod") else -1000
        a = rand(n, dtype, lo, -lo, rng=rng)
        b = rand(n, dtype, -40, 40, rng=rng)
        if op in ("truncdiv", "truncmod", "floordiv", "floormod") and dtype.startswith("int"):
            # INT_MIN / -1 wraps like numpy (x86's idiv would trap: the code generator
            # guards a divisor of -1); every seed has the pair
            a[0], b[0] = np.iinfo(dtype).min, -1
            a[1], b[1] = np.iinfo(dtype).min, 1
    else:
        a, b = rand(n, dtype, rng=rng), rand(n, dtype, rng=rng)
    A, B, C = buf("A", n, dtype), buf("B", n, dtype), buf("C", n, dtype)
    c = poison(n, dtype)
    if dtype == "bool":
        c = ~_NP[op](a, b)
    run([A, B, C], lambda i: st(C, i, binop(op, ld(A, i), ld(B, i))), n, kind, (a, b, c))
    with np.errstate(all="ignore"):
        check(c, _NP[op](a, b), dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ("int32", "uint8", "float32", "float64", "bool"))
@pytest.mark.parametrize("op", ("eq", "ne", "lt", "le", "gt", "ge"))
def test_compare(op, dtype, kind):
    n = 130
    rng = np.random.default_rng(1)
    a = rand(n, dtype, -3, 3, nonzero=False, rng=rng)
    b = rand(n, dtype, -3, 3, nonzero=False, rng=rng)
    if dtype == "float32":
        a[:3] = np.nan  # unordered: only ne holds
    ref = getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                       "gt": "greater", "ge": "greater_equal"}[op])(a, b)
    A, B, C = buf("A", n, dtype), buf("B", n, dtype), buf("C", n, "bool")
    c = ~ref
    run([A, B, C], lambda i: st(C, i, Cmp("bool", op, ld(A, i), ld(B, i))), n, kind, (a, b, c))
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("kind", KINDS)
def test_logic_ops(kind):
    n = 17
    rng = np.random.default_rng(2)
    a, b = rand(n, "bool", rng=rng), rand(n, "bool", rng=rng)
    A, B = buf("A", n, "bool"), buf("B", n, "bool")
    outs = [buf(f"C{k}", n, "bool") for k in range(3)]
    refs = [a & b, a | ~b, ~a]
    arrays = [~r for r in refs]

    def body(i):
        x, y = ld(A, i), ld(B, i)
        return seq(st(outs[0], i, And("bool", x, y)), st(outs[1], i, Or("bool", x, Not("bool", y))),
                   st(outs[2], i, Not("bool", x)))

    run([A, B, *outs], body, n, kind, (a, b, *arrays))
    for got, ref in zip(arrays, refs):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_fused_expression_at_awkward_sizes(n, kind):
    A, B, C = buf("A", n, "float64"), buf("B", n, "float64"), buf("C", n, "float64")
    rng = np.random.default_rng(n)
    a, b = rand(n, "float64", rng=rng), rand(n, "float64", rng=rng)
    c = poison(n, "float64")

    def body(i):
        x = ld(A, i)
        return st(C, i, x * ld(B, i) + Call("float64", "sqrt", (Call("float64", "abs", (x,)),))
                  - binop("floormod", x, Const("float64", 3.0)))

    run([A, B, C], body, n, kind, (a, b, c))
    np.testing.assert_allclose(c, a * b + np.sqrt(np.abs(a)) - np.mod(a, 3.0), rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS + ("int64", "uint64", "int8", "uint8", "bool"))
def test_constants(dtype):
    if dtype in FLOATS:
        vals = [0.1, 1e-8, float("inf"), float("nan"), -0.0]
    elif dtype == "bool":
        vals = [True, False, True, False, True]
    else:
        info = np.iinfo(dtype)
        vals = [int(info.min), int(info.max), 0, 1, int(info.max) - 1]
    C = buf("C", len(vals), dtype)
    m = build([C], seq(*[st(C, k, Const(dtype, v)) for k, v in enumerate(vals)]))
    ref = np.array(vals, dtype)
    c = ~ref if dtype == "bool" else poison(len(vals), dtype)
    if dtype not in FLOATS and dtype != "bool":
        c[:] = 3
    m(c)
    np.testing.assert_array_equal(c, ref)
    if dtype in FLOATS:
        assert np.signbit(c[-1])


def test_integer_wraparound():
    n = 7
    A, C = buf("A", n, "int32"), buf("C", n, "int32")
    a = np.array([2**31 - 1, -(2**31), 5, -5, 2**30, 1, 0], "int32")
    c = poison(n, "int32")
    run([A, C], lambda i: st(C, i, ld(A, i) * 2 + 1), n, "serial", (a, c))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(c, a * np.int32(2) + np.int32(1))


def test_float_division_by_zero_and_negative_zero():
    n = 4
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    a = np.array([1, -1, 0, 2], "float32")
    b = np.array([0, 0, 0, -0.0], "float32")
    c = poison(n, "float32")
    run([A, B, C], lambda i: st(C, i, ld(A, i) / ld(B, i)), n, "serial", (a, b, c))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(c, a / b)


def test_negation_keeps_ieee_signed_zero():
    # te's -x is 0 - x: it must stay fsub (0 - 0 = +0), never become fneg (-0)
    n = 3
    A, C = buf("A", n), buf("C", n)
    a = np.array([0.0, 1.5, -2.0], "float32")
    c = poison(n, "float32")
    run([A, C], lambda i: st(C, i, Const("float32", 0.0) - ld(A, i)), n, "serial", (a, c))
    np.testing.assert_array_equal(np.signbit(c), [False, True, False])


# ----------------------------------------------------------------------------- casts
CAST_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float16",
              "float32", "float64")


def _cast_input(src, dst, n, rng):
    if src == "bool":
        return rand(n, "bool", rng=rng)
    if dst == "bool":
        x = rand(n, src, -3, 3, nonzero=False, rng=rng)
        if src.startswith("float"):
            x[:2] = (np.nan, -0.0)
        return x
    # values representable in both types (float -> int truncates toward zero)
    lo = 0 if dst.startswith("uint") or src.startswith("uint") else -100
    x = rand(n, src, lo, 100, rng=rng)
    if src.startswith("float"):
        x = (x + np.array(0.75, src)).astype(src)
        if lo < 0:
            x[:2] = (-3.75, -0.5)
    return x


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("src,dst", [(s, d) for s in CAST_TYPES for d in CAST_TYPES if s != d])
def test_cast(src, dst, kind):
    n = 17
    rng = np.random.default_rng(3)
    a = _cast_input(src, dst, n, rng)
    ref = a.astype(dst)
    A, C = buf("A", n, src), buf("C", n, dst)
    c = ~ref if dst == "bool" else poison(n, dst)
    run([A, C], lambda i: st(C, i, Cast(dst, ld(A, i))), n, kind, (a, c))
    np.testing.assert_array_equal(c, ref)


def test_cast_int_narrowing_wraps_and_sign_extends():
    n = 6
    A, C, D = buf("A", n, "int32"), buf("C", n, "int8"), buf("D", n, "uint32")
    a = np.array([300, -129, 127, -1, 255, 0], "int32")
    c, d = poison(n, "int8"), poison(n, "uint32")
    run([A, C, D], lambda i: seq(st(C, i, Cast("int8", ld(A, i))),
                                  st(D, i, Cast("uint32", Cast("int8", ld(A, i))))),
        n, "serial", (a, c, d))
    np.testing.assert_array_equal(c, a.astype("int8"))
    np.testing.assert_array_equal(d, a.astype("int8").astype("uint32"))


# ----------------------------------------------------------------------------- intrinsics
def _erf(x):
    return np.vectorize(math.erf)(x.astype("float64")).astype(x.dtype)


UNARY = {
    "exp": (np.exp, -4, 4), "exp2": (np.exp2, -4, 4), "log": (np.log, 0.1, 9),
    "log2": (np.log2, 0.1, 9), "log10": (np.log10, 0.1, 9), "sqrt": (np.sqrt, 0.1, 9),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 9), "tanh": (np.tanh, -3, 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -6, 6), "erf": (_erf, -2, 2),
    "sin": (np.sin, -4, 4), "cos": (np.cos, -4, 4), "floor": (np.floor, -9, 9),
    "ceil": (np.ceil, -9, 9), "round": (np.round, -9, 9), "trunc": (np.trunc, -9, 9),
    "abs": (np.abs, -9, 9),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_intrinsic(name, dtype, kind):
    fn, lo, hi = UNARY[name]
    n = 31
    a = rand(n, dtype, lo, hi, rng=np.random.default_rng(4))
    if name == "round":
        a[:6] = (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)  # half to even
    A, C = buf("A", n, dtype), buf("C", n, dtype)
    c = poison(n, dtype)
    run([A, C], lambda i: st(C, i, Call(dtype, name, (ld(A, i),))), n, kind, (a, c))
    ref = fn(a.astype("float64")).astype(dtype)
    np.testing.assert_allclose(c.astype("float64"), ref.astype("float64"),
                               rtol=RTOL[dtype] * 4, atol=RTOL[dtype] * 4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ("pow", "fmod"))
def test_binary_intrinsic(name, dtype, kind):
    n = 17
    rng = np.random.default_rng(5)
    a = rand(n, dtype, 0.5, 3, rng=rng) if name == "pow" else rand(n, dtype, -9, 9, rng=rng)
    b = rand(n, dtype, -2, 2, rng=rng)
    A, B, C = buf("A", n, dtype), buf("B", n, dtype), buf("C", n, dtype)
    c = poison(n, dtype)
    run([A, B, C], lambda i: st(C, i, Call(dtype, name, (ld(A, i), ld(B, i)))), n, kind,
        (a, b, c))
    ref = (np.power if name == "pow" else np.fmod)(a.astype("float64"), b.astype("float64"))
    np.testing.assert_allclose(c.astype("float64"), ref.astype(dtype).astype("float64"),
                               rtol=RTOL[dtype] * 4, atol=RTOL[dtype] * 4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ("int8", "int32", "int64"))
def test_int_abs_wraps_at_minimum(dtype, kind):
    n = 17
    a = rand(n, dtype, -100, 100, rng=np.random.default_rng(6))
    a[0] = np.iinfo(dtype).min
    A, C = buf("A", n, dtype), buf("C", n, dtype)
    c = poison(n, dtype)
    run([A, C], lambda i: st(C, i, Call(dtype, "abs", (ld(A, i),))), n, kind, (a, c))
    np.testing.assert_array_equal(c, np.abs(a))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_isnan(dtype, kind):
    n = 17
    a = rand(n, dtype, rng=np.random.default_rng(7))
    a[::3] = np.nan
    a[1] = np.inf
    A, C = buf("A", n, dtype), buf("C", n, "bool")
    c = ~np.isnan(a)
    run([A, C], lambda i: st(C, i, Call("bool", "isnan", (ld(A, i),))), n, kind, (a, c))
    np.testing.assert_array_equal(c, np.isnan(a))


# ----------------------------------------------------------------------------- fp flags
def _fma_ir(target):
    n = 16
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    i = var("i")
    m = build([A, B, C], loop(i, n, st(C, i, ld(A, i) * ld(B, i) + ld(C, i))), target=target)
    return m.get_source("ll", optimized=False)


def test_float_ops_are_contract_by_default_and_fast_with_fast_math():
    plain = _fma_ir("llvm")
    assert "fmul contract float" in plain and "fadd contract float" in plain
    assert "fast" not in plain
    fast = _fma_ir("llvm -fast-math")
    assert "fmul fast float" in fast and "fadd fast float" in fast


# ----------------------------------------------------------------------------- select
def _guarded_shift(kind, n):
    """C[i] = A[i - 1] if i > 0 else -7: the read of A[-1] must never happen."""
    A, C = buf("A", n), buf("C", n)

    def body(i):
        return st(C, i, Select("float32", Cmp("bool", "gt", i, c64(0)), ld(A, i - 1),
                               Const("float32", -7.0)))

    return [A, C], body


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", (1, 17, 130))
def test_select_guarded_read_values(n, kind):
    # A is a view one element into a bigger array whose element 0 is a sentinel: a select
    # that picked the wrong operand at i == 0 would read it.
    big = rand(n + 1, "float32", rng=np.random.default_rng(8))
    big[0] = 12345.0
    a = big[1:]
    c = poison(n, "float32")
    params, body = _guarded_shift(kind, n)
    run(params, body, n, kind, (a, c))
    ref = np.concatenate([[-7.0], a[:-1]]).astype("float32")
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("kind", KINDS)
def test_select_with_load_is_lazy(kind):
    # the guarded index is 2**40 elements away: evaluating it eagerly would crash
    n = 17
    A, C = buf("A", n), buf("C", n)
    far = c64(1 << 40)

    def body(i):
        return st(C, i, Select("float32", Cmp("bool", "lt", i, c64(n)), ld(A, i),
                               ld(A, i + far)))

    a = rand(n, "float32")
    c = poison(n, "float32")
    m = build([A, C], elementwise(n, body, kind))
    assert "phi  float" in m.get_source("ll", optimized=False)  # checked before running it
    m(a, c)
    np.testing.assert_array_equal(c, a)


def test_select_with_integer_division_is_lazy():
    # C[i] = 100 // B[i] if B[i] != 0 else -1: the division by zero must not run
    n = 17
    B, C = buf("B", n, "int32"), buf("C", n, "int32")
    b = rand(n, "int32", -5, 5, nonzero=False, rng=np.random.default_rng(9))
    b[:3] = 0
    c = poison(n, "int32")

    def body(i):
        x = ld(B, i)
        return st(C, i, Select("int32", Cmp("bool", "ne", x, Const("int32", 0)),
                               binop("truncdiv", Const("int32", 100), x), Const("int32", -1)))

    m = build([B, C], elementwise(n, body, "serial"))
    assert "phi  i32" in m.get_source("ll", optimized=False)  # checked before running it
    m(b, c)
    ref = np.where(b != 0, np.trunc(100 / np.where(b == 0, 1, b)), -1).astype("int32")
    np.testing.assert_array_equal(c, ref)


def test_select_without_loads_is_a_plain_select():
    n = 7
    A, C = buf("A", n), buf("C", n)
    i = var("i")
    body = loop(i, n, st(C, i, Select("float32", Cmp("bool", "lt", i, c64(3)),
                                      Const("float32", 1.0), Const("float32", 2.0))))
    m = build([A, C], body)
    text = m.get_source("ll", optimized=False)
    assert "select" in text and "phi  float" not in text
    c = poison(n, "float32")
    m(np.zeros(n, "float32"), c)
    np.testing.assert_array_equal(c, [1, 1, 1, 2, 2, 2, 2])


def test_and_short_circuits_a_guarded_read():
    # C[i] = (i > 0) and (A[i - 1] > 0), A[-1] lies 2**40 elements away when i == 0
    n = 9
    A, C = buf("A", n), buf("C", n, "bool")
    i = var("i")
    far = c64(1 << 40)
    idx = Select("int64", Cmp("bool", "gt", i, c64(0)), i - 1, far)
    cond = And("bool", Cmp("bool", "gt", i, c64(0)),
               Cmp("bool", "gt", ld(A, idx), Const("float32", 0.0)))
    m = build([A, C], loop(i, n, st(C, i, cond)))
    assert "phi  i1" in m.get_source("ll", optimized=False)  # checked before running it
    a = rand(n, "float32", rng=np.random.default_rng(10))
    ref = np.concatenate([[False], a[:-1] > 0])
    c = ~ref
    m(a, c)
    np.testing.assert_array_equal(c, ref)


# ----------------------------------------------------------------------------- statements
@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 3, 5), (17, 1, 31), (2, 13, 11)])
def test_nested_loops_3d_transpose(shape):
    d0, d1, d2 = shape
    A, C = buf("A", shape, "float64"), buf("C", (d2, d0, d1), "float64")
    i, j, k = var("i"), var("j"), var("k")
    body = loop(i, d0, loop(j, d1, loop(k, d2, st(C, (k * d0 + i) * d1 + j,
                                                  ld(A, (i * d1 + j) * d2 + k) * 2.0))))
    a = rand(shape, "float64")
    c = poison((d2, d0, d1), "float64")
    build([A, C], body)(a, c)
    np.testing.assert_array_equal(c, np.transpose(a, (2, 0, 1)) * 2)


@pytest.mark.parametrize("lo,extent,step", [(3, 20, 1), (2, 29, 3), (-5, 12, 4), (0, 0, 1),
                                            (4, -3, 1)])
def test_loop_bounds_and_step(lo, extent, step):
    n = 64
    C = buf("C", n, "int32")
    i = var("i")
    body = loop(i, extent, st(C, i + 8, Cast("int32", i)), lo=lo, step=step)
    c = np.full(n, -1, "int32")
    build([C], body)(c)
    ref = np.full(n, -1, "int32")
    for v in range(lo, lo + extent, step):
        ref[v + 8] = v
    np.testing.assert_array_equal(c, ref)


def test_let_and_if_then_else():
    n = 31
    A, C = buf("A", n, "int64"), buf("C", n, "int64")
    i, x = var("i"), var("x")
    body = loop(i, n, LetStmt(x, ld(A, i) * 3,
                              IfThenElse(Cmp("bool", "lt", x, c64(0)), st(C, i, x - 1),
                                         st(C, i, x + 1))))
    a = rand(n, "int64")
    c = poison(n, "int64")
    build([A, C], body)(a, c)
    np.testing.assert_array_equal(c, np.where(a * 3 < 0, a * 3 - 1, a * 3 + 1))


def test_let_shadowing_restores_the_outer_binding():
    C = buf("C", 2, "int64")
    x = var("x")
    body = LetStmt(x, c64(5), seq(LetStmt(x, c64(7), st(C, 0, x)), st(C, 1, x)))
    c = poison(2, "int64")
    build([C], body)(c)
    np.testing.assert_array_equal(c, [7, 5])


def test_if_without_else_and_bool_buffers():
    n = 17
    M, C = buf("M", n, "bool"), buf("C", n, "float32")
    i = var("i")
    body = loop(i, n, IfThenElse(ld(M, i), st(C, i, Const("float32", 1.0))))
    mask = rand(n, "bool")
    c = np.zeros(n, "float32")
    build([M, C], body)(mask, c)
    np.testing.assert_array_equal(c, mask.astype("float32"))


def test_float16_arithmetic_and_scalar_param():
    n = 31
    A, C = buf("A", n, "float16"), buf("C", n, "float16")
    s = var("s", "float16")
    i = var("i")
    m = build([A, C, s], loop(i, n, st(C, i, ld(A, i) * s + Const("float16", 0.5))))
    a = rand(n, "float16", -4, 4)
    c = poison(n, "float16")
    m(a, c, 1.5)
    np.testing.assert_allclose(c.astype("float32"),
                               (a * np.float16(1.5) + np.float16(0.5)).astype("float32"),
                               rtol=1e-3)
