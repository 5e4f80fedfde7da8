"""Operator overloading, result dtypes, te.if_then_else, te.all/any, intrinsics dtype checks,
``Expr.__bool__`` and the printer; numeric checks run through lowered computes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, lowered, rand, run1
from polytile.te.visitor import structural_equal

from polytile import te

N = 11  # odd, small: the interpreter is slow


def _x(dtype="float32", name="x"):
    return te.var(name, dtype)


# --------------------------------------------------------------------------- dtypes of ops
@pytest.mark.parametrize("op", ["+", "-", "*", "//", "%"])
def test_arithmetic_result_dtype(op):
    a, b = _x("int16", "a"), _x("int32", "b")  # noqa: F841 - used by eval
    e = eval(f"a {op} b")
    assert e.dtype == "int32"
    # the narrower operand is cast, the wider one is untouched
    assert e.b is b and e.a.dtype == "int32"


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_reflected_operators_keep_operand_order(op):
    x = _x()  # noqa: F841 - used by eval
    e = eval(f"2.0 {op} x")
    assert str(e) == f"(2.0f {op} x)"
    e = eval(f"x {op} 2.0")
    assert str(e) == f"(x {op} 2.0f)"


@pytest.mark.parametrize("op, py", [("<", "lt"), ("<=", "le"), (">", "gt"), (">=", "ge"),
                                    ("==", "eq"), ("!=", "ne")])
def test_comparisons_are_bool_nodes(op, py):
    e = eval(f"_x('int8') {op} 3")
    assert e.dtype == "bool"
    assert e.op == py


def test_unary_operators():
    x = _x("int8")
    assert (-x).dtype == "int8"
    assert (~x).dtype == "int8"
    assert (+x) is x
    assert abs(x).dtype == "int8"
    u = _x("uint8")
    assert abs(u) is u  # abs of unsigned is the identity
    with pytest.raises(TypeError, match="expected bool or an integer"):
        ~_x("float32")


def test_shift_and_bitwise_dtypes():
    assert (_x("uint16") << 2).dtype == "uint16"
    assert (_x("int32") >> _x("int8", "y")).dtype == "int32"
    assert (_x("int8") ^ _x("int8", "y")).dtype == "int8"


def test_both_operands_python_raise():
    from polytile.te.expr import binary
    with pytest.raises(TypeError, match="at least one operand must be an expression"):
        binary("add", 1, 2)


def test_unsupported_operand_type():
    with pytest.raises(TypeError, match="cannot convert str"):
        _x() + "a"


# ---------------------------------------------------------------------- Expr.__bool__
def test_bool_of_expression_raises_with_hint():
    with pytest.raises(TypeError, match="te.if_then_else"):
        bool(_x() < 1.0)


def test_python_if_inside_compute_lambda_raises():
    n = 10
    A = te.placeholder((n,), name="A")

    def body(i):
        if i < n:
            return A[i]
        return 0.0

    with pytest.raises(TypeError, match=r"no truth value.*te\.if_then_else"):
        te.compute((n,), body)


@pytest.mark.parametrize("src", ["A[i] if 0 <= i < 10 else 0.0",  # chained comparison
                                 "A[i] if (i > 1 and i < 5) else 0.0",
                                 "A[i] if not i < 5 else 0.0"])
def test_python_logic_inside_compute_lambda_raises(src):
    A = te.placeholder((10,), name="A")
    with pytest.raises(TypeError, match=r"te\.all\(\.\.\.\)/te\.any\(\.\.\.\)"):
        te.compute((10,), eval(f"lambda i: {src}", {"A": A}))


def test_eq_used_as_python_bool_compares_identity():
    # like TVM's EqualOp: usable in lists and dict keys
    x, y = _x(name="x"), _x(name="y")
    assert bool(x == x)
    assert not bool(x == y)
    assert x in [y, x]
    assert {x: 1}[x] == 1


# ----------------------------------------------------------------------- if_then_else
def test_if_then_else_dtype_promotion():
    c = _x("int8") < 0
    assert te.if_then_else(c, 1, 2).dtype == "int32"
    assert te.if_then_else(c, _x("int8"), 2).dtype == "int8"
    assert te.if_then_else(c, _x("int8"), 2.0).dtype == "float32"
    assert te.if_then_else(c, _x("float16"), _x("int32", "y")).dtype == "float16"


def test_if_then_else_needs_bool_condition():
    with pytest.raises(TypeError, match="expected bool"):
        te.if_then_else(_x("int32"), 1.0, 2.0)


def test_if_then_else_numeric(backend):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: te.if_then_else(A[i] > 0.0, A[i] * 2.0, -A[i]), name="B")
    a = rand((N,), seed=1)
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    check(out, np.where(a > 0, a.astype("float64") * 2, -a.astype("float64")))


def test_if_then_else_guards_out_of_bounds_read(backend):
    # only the chosen operand is evaluated: A[i + 1] at i = N - 1 is never read
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: te.if_then_else(i < N - 1, A[i + 1], 0.5), name="B")
    a = rand((N,), seed=2)
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    check(out, np.append(a[1:], 0.5))


# ---------------------------------------------------------------------------- all / any
def test_all_any_build_and_or():
    a, b, c = _x("int32", "a") > 0, _x("int32", "b") > 0, _x("int32", "c") > 0
    assert str(te.all(a, b, c)) == "(((a > 0) and (b > 0)) and (c > 0))"
    assert str(te.any(a, b)) == "((a > 0) or (b > 0))"
    assert te.all().value is True and te.any().value is False
    assert te.all(a).dtype == "bool"


def test_all_any_refuse_non_bool():
    with pytest.raises(TypeError, match=r"te\.all: condition .* expected bool"):
        te.all(_x("int32"), _x("int32", "y") > 0)
    with pytest.raises(TypeError, match=r"te\.any: condition"):
        te.any(_x("float32"))


def test_all_any_numeric(backend):
    A = te.placeholder((N, N), name="A")
    B = te.compute((N, N), lambda i, j: te.if_then_else(
        te.any(te.all(i >= 2, j < 7, A[i, j] > 0.0), i == j), A[i, j], 0.25), name="B")
    a = rand((N, N), seed=3)
    ii, jj = np.indices((N, N))
    mask = ((ii >= 2) & (jj < 7) & (a > 0)) | (ii == jj)
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    check(out, np.where(mask, a, 0.25))


def test_bitwise_operators_on_bool_conditions(backend):
    A = te.placeholder((N,), name="A")
    B = te.compute((N,), lambda i: te.if_then_else(((i > 2) & (i < 8)) | ~(A[i] < 0.0),
                                                    1.0, 0.0), name="B")
    a = rand((N,), seed=4)
    i = np.arange(N)
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    check(out, np.where(((i > 2) & (i < 8)) | ~(a < 0), 1.0, 0.0))


# --------------------------------------------------------------------------- intrinsics
FLOAT_UNARY = ["exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid",
               "erf", "sin", "cos", "floor", "ceil", "round", "trunc"]


@pytest.mark.parametrize("name", FLOAT_UNARY)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_intrinsic_keeps_dtype(name, dtype):
    e = getattr(te, name)(_x(dtype))
    assert e.dtype == dtype
    assert str(e) == f"{name}(x)"


@pytest.mark.parametrize("name", FLOAT_UNARY + ["isnan"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_float_intrinsic_refuses_ints(name, dtype):
    with pytest.raises(TypeError, match=rf"te\.{name}: .*expected a float"):
        getattr(te, name)(_x(dtype))


def test_intrinsic_of_python_float_is_float32():
    assert te.exp(1.0).dtype == "float32"


def test_isnan_is_bool():
    assert te.isnan(_x("float16")).dtype == "bool"


def test_power_and_fmod_dtypes():
    assert te.power(_x("float16"), 2.0).dtype == "float16"
    assert (_x("float64") ** 2).dtype == "float64"
    assert (2.0 ** _x("float32")).dtype == "float32"
    assert te.fmod(_x("float32"), _x("float64", "y")).dtype == "float64"
    with pytest.raises(TypeError, match=r"te\.power: operands have dtype int32"):
        _x("int32") ** 2
    with pytest.raises(TypeError, match=r"te\.fmod"):
        te.fmod(_x("int32"), 2)


MATH = {"exp": np.exp, "log": lambda x: np.log(np.abs(x)), "sqrt": lambda x: np.sqrt(np.abs(x)),
        "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "floor": np.floor,
        "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "sin": np.sin, "cos": np.cos,
        "exp2": np.exp2, "log2": lambda x: np.log2(np.abs(x)),
        "rsqrt": lambda x: 1 / np.sqrt(np.abs(x))}


@pytest.mark.parametrize("name", sorted(MATH))
def test_intrinsic_numeric(name, backend):
    A = te.placeholder((N,), name="A")
    fn = getattr(te, name)
    needs_abs = name in ("log", "sqrt", "log2", "rsqrt")
    B = te.compute((N,), lambda i: fn(abs(A[i]) if needs_abs else A[i]), name="B")
    a = rand((N,), seed=5) * 3
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    check(out, MATH[name](a.astype("float64")))


def test_abs_and_isnan_numeric(backend):
    A = te.placeholder((N,), name="A")
    Iv = te.placeholder((N,), dtype="int32", name="I")
    B = te.compute((N,), lambda i: te.if_then_else(te.isnan(A[i]), -1.0, abs(A[i]))
                   + abs(Iv[i]).astype("float32"), name="B")
    a = rand((N,), seed=6)
    a[3] = np.nan
    ii = rand((N,), "int32", seed=7)
    out = run1(te.create_schedule(B.op), [A, Iv, B], [a, ii], backend)
    check(out, np.where(np.isnan(a), -1.0, np.abs(a)) + np.abs(ii))


def test_negation_of_zero_is_negative_zero(backend):
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: 1.0 / (-A[i]), name="B")
    a = np.array([0.0, 1.0, -0.0], dtype="float32")
    out = run1(te.create_schedule(B.op), [A, B], [a], backend)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(out, 1.0 / (-a))


# ------------------------------------------------------------------------------ printer
def _program():
    n = 7
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n,), lambda i: te.sum(A[i, k] * 2.0, axis=k, where=k < i), name="C")
    D = te.compute((n,), lambda i: te.if_then_else(C[i] > 0.0, te.exp(C[i]), -C[i]), name="D")
    s = te.create_schedule(D.op)
    xo, _ = s[D].split(D.op.axis[0], factor=3)
    s[C].compute_at(s[D], xo)
    return C, D, s, A


def test_printer_is_deterministic():
    C1, D1, s1, A1 = _program()
    C2, D2, s2, A2 = _program()
    assert str(C1.op.body[0]) == str(C2.op.body[0])
    assert str(D1.op.body[0]) == str(D2.op.body[0])
    assert lowered(s1, [A1, D1]) == lowered(s2, [A2, D2])
    assert lowered(s1, [A1, D1]) == lowered(s1, [A1, D1])


def test_printer_text():
    C, D, _, _ = _program()
    assert str(C.op.body[0]) == "sum((A[i, k] * 2.0f), axis=[k], where=(k < i))"
    assert str(D.op.body[0]) == "(exp(C[i]) if (C[i] > 0.0f) else (-C[i]))"


@pytest.mark.parametrize("value, dtype, text", [
    (3, "int32", "3"), (3, "int64", "int64(3)"), (1.5, "float32", "1.5f"),
    (1.5, "float64", "1.5"), (1.5, "float16", "float16(1.5)"), (True, "bool", "True"),
    (float("inf"), "float32", "float32('inf')"), (float("-inf"), "float64", "float64('-inf')"),
])
def test_constant_printing(value, dtype, text):
    assert str(te.const(value, dtype)) == text


def test_structural_equal_is_separate_from_eq():
    A = te.placeholder((3,), name="A")
    i = te.var("i")
    e1, e2 = A[i] + 1.0, A[i] + 1.0
    assert e1 is not e2
    assert structural_equal(e1, e2)
    assert not structural_equal(e1, A[i] + 2.0)


def test_python_equality_inside_a_compute_body_raises():
    A = te.placeholder((4,), name="A")
    with pytest.raises(TypeError, match="te.if_then_else"):
        te.compute((4,), lambda i: A[i] if i == 3 else 0.0)


def test_reducer_misuse_has_clear_errors():
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 4), "k")
    with pytest.raises(TypeError, match="te.max: too many arguments"):
        te.compute((4,), lambda i: te.max(A[k], k, A[k] > 0, 0.0, 1.0))
    with pytest.raises(TypeError, match="te.max: axis=, where= and init= belong to a reduction"):
        te.compute((4,), lambda i: te.max(A[i], 3.0, where=A[i] > 0))
    with pytest.raises(TypeError, match="te.sum: axis i is a spatial axis"):
        te.compute((4,), lambda i: te.sum(A[i], i))
