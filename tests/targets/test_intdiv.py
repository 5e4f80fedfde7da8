"""The shared floor division helper (schedule/intdiv.py): a reference interpreter of its
output, and the LLVM backend on negative operands and INT_MIN, against Python's // and %."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llvm_ir_helpers import binop, buf, build, ld, loop, poison, seq, st, var

from polytile.schedule.intdiv import floordiv_expr, floormod_expr
from polytile.te import dtype as dt
from polytile.te.expr import And, Binary, Call, Cast, Cmp, Const, Select, Var

DIVISORS = (1, 3, 4, 32, 33, -3, -4)
INT_TYPES = ("int8", "int32", "int64")


def _wrap(v: int, dtype: str) -> int:
    bits = dt.bits(dtype)
    v &= (1 << bits) - 1
    if dt.is_signed(dtype) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _eval(e, env):
    """A tiny interpreter of the nodes intdiv emits (C semantics for truncdiv/truncmod)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Cast):
        v = _eval(e.value, env)
        return float(v) if dt.is_float(e.dtype) else _wrap(int(v), e.dtype)
    if isinstance(e, Cmp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                "ge": a >= b}[e.op]
    if isinstance(e, And):
        return _eval(e.a, env) and _eval(e.b, env)
    if isinstance(e, Select):
        return _eval(e.true_value, env) if _eval(e.cond, env) else _eval(e.false_value, env)
    if isinstance(e, Call):
        args = [_eval(a, env) for a in e.args]
        return {"floor": lambda x: float(math.floor(x)), "fmod": math.fmod}[e.name](*args)
    assert isinstance(e, Binary), type(e)
    a, b = _eval(e.a, env), _eval(e.b, env)
    if dt.is_float(e.dtype):
        return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[e.op]
    if e.op in ("truncdiv", "truncmod"):
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        return _wrap(q if e.op == "truncdiv" else a - q * b, e.dtype)
    return _wrap({"add": a + b, "sub": a - b, "mul": a * b}[e.op], e.dtype)


def _dividends(dtype):
    lo, hi = dt.min_value(dtype), dt.max_value(dtype)
    return sorted(set(range(max(lo, -100), min(hi, 100) + 1)) | {lo, lo + 1, hi, hi - 1})


@pytest.mark.parametrize("dtype", INT_TYPES)
@pytest.mark.parametrize("b", DIVISORS)
@pytest.mark.parametrize("const_divisor", (True, False), ids=("const", "var"))
def test_helper_matches_python_floor_semantics(dtype, b, const_divisor):
    x = Var(dtype, "x")
    d = Const(dtype, b) if const_divisor else Var(dtype, "d")
    fd, fm = floordiv_expr(x, d), floormod_expr(x, d)
    for a in _dividends(dtype):
        env = {x: a} if const_divisor else {x: a, d: b}
        assert _eval(fd, env) == _wrap(a // b, dtype), (a, b)
        assert _eval(fm, env) == a % b, (a, b)


def test_helper_shapes():
    x, n = Var("int32", "x"), Var("int32", "n")
    q = floordiv_expr(x, Const("int32", 4))
    assert isinstance(q, Binary) and q.op == "sub" and isinstance(q.b, Cast)
    assert isinstance(q.b.value, Cmp) and q.b.value.op == "lt"  # q - (r < 0)
    m = floormod_expr(x, Const("int32", 4))
    assert isinstance(m, Select) and m.cond.op == "lt" and m.false_value.op == "truncmod"
    assert m.cond.a is m.false_value  # the select's operands reuse the condition's r
    assert isinstance(floordiv_expr(x, n).b.value, And)
    assert floordiv_expr(x, Const("int32", 1)) is x
    assert floormod_expr(x, Const("int32", 1)).value == 0
    u = Var("uint16", "u")
    assert floordiv_expr(u, Const("uint16", 3)).op == "truncdiv"
    assert floormod_expr(u, Const("uint16", 3)).op == "truncmod"
    f = Var("float32", "f")
    assert floordiv_expr(f, f).name == "floor"
    assert floormod_expr(f, f).false_value.name == "fmod"


@pytest.mark.parametrize("b", (3.0, -3.0, 0.5, -0.25))
def test_helper_float_semantics(b):
    x = Var("float64", "x")
    for a in (-7.5, -3.0, -1.0, -0.1, 0.0, 0.1, 2.0, 7.25, 100.0):
        assert _eval(floordiv_expr(x, Const("float64", b)), {x: a}) == a // b
        assert _eval(floormod_expr(x, Const("float64", b)), {x: a}) == pytest.approx(a % b)


def test_helper_errors():
    with pytest.raises(TypeError, match="floordiv_expr: operands have dtypes int32 and int64"):
        floordiv_expr(Var("int32", "a"), Var("int64", "b"))
    with pytest.raises(TypeError, match="floormod_expr: operands are bool; expected numbers"):
        floormod_expr(Var("bool", "a"), Var("bool", "b"))


# ----------------------------------------------------------------------------- LLVM
@pytest.mark.parametrize("kind", ("serial", "vectorized"))
@pytest.mark.parametrize("dtype", INT_TYPES)
@pytest.mark.parametrize("b", DIVISORS)
def test_llvm_floordiv_floormod_by_constant(b, dtype, kind):
    vals = _dividends(dtype)
    n = len(vals) - len(vals) % 8
    a = np.array(vals[:n], dtype)
    A, Q, R = buf("A", n, dtype), buf("Q", n, dtype), buf("R", n, dtype)
    d = Const(dtype, b)
    if kind == "serial":
        i = var("i")
        body = loop(i, n, seq(st(Q, i, binop("floordiv", ld(A, i), d)),
                              st(R, i, binop("floormod", ld(A, i), d))))
    else:
        io, ii = var("i.outer"), var("i.inner")
        i = io * 8 + ii
        body = loop(io, n // 8, loop(ii, 8, seq(st(Q, i, binop("floordiv", ld(A, i), d)),
                                                st(R, i, binop("floormod", ld(A, i), d))),
                                     "vectorized"))
    q, r = poison(n, dtype), poison(n, dtype)
    build([A, Q, R], body)(a, q, r)
    np.testing.assert_array_equal(q, [_wrap(x // b, dtype) for x in a.tolist()])
    np.testing.assert_array_equal(r, [x % b for x in a.tolist()])


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_llvm_floordiv_floormod_by_variable_divisors(dtype):
    pairs = [(x, y) for x in _dividends(dtype)[::3] for y in DIVISORS]
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    n = len(pairs)
    A, B, Q, R = (buf(k, n, dtype) for k in "ABQR")
    i = var("i")
    body = loop(i, n, seq(st(Q, i, binop("floordiv", ld(A, i), ld(B, i))),
                          st(R, i, binop("floormod", ld(A, i), ld(B, i)))))
    q, r = poison(n, dtype), poison(n, dtype)
    build([A, B, Q, R], body)(a, b, q, r)
    np.testing.assert_array_equal(q, [_wrap(x // y, dtype) for x, y in pairs])
    np.testing.assert_array_equal(r, [x % y for x, y in pairs])
