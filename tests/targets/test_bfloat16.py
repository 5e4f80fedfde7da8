"""bfloat16 end to end: every operation computes in float32 and rounds to nearest even.

The reference is numpy in float32 with the rounding of ``polytile.te.dtype.bfloat16_bits``
applied after each operation (``ml_dtypes``' arithmetic, checked against it below when it
is installed); basic operations and conversions are compared bit for bit, math functions
within one unit in the last place. Outputs are poisoned (NaN) before every run; sizes are
odd and splits do not divide them.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_schedule, poison, rand, run1

import polytile
from polytile import te
from polytile.errors import InternalError, PolytileWarning
from polytile.schedule.loop_ir import stmt_exprs, walk_stmts
from polytile.schedule.passes.bfloat16 import legalize_bfloat16
from polytile.te import dtype as dt
from polytile.te.expr import Binary, Call, Cmp
from polytile.te.visitor import post_order_visit

M, N = 5, 13


def r(x) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 (to nearest even), as float32."""
    return dt.bfloat16_values(dt.bfloat16_bits(np.asarray(x, np.float32)))


def v(a) -> np.ndarray:
    """The float32 values of a host bfloat16 array."""
    return dt.bfloat16_values(a)


def _pair(seed=0, scale=3.0):
    g = np.random.default_rng(seed)
    a = rand((M, N), "bfloat16", gen=g, low=-scale, high=scale)
    b = rand((M, N), "bfloat16", gen=g, low=-scale, high=scale)
    return a, b


# name, compute body on (A, B), reference on float32 values (a, b), exact?
CASES = [
    ("add", lambda A, B: lambda i, j: A[i, j] + B[i, j], lambda a, b: r(a + b)),
    ("sub", lambda A, B: lambda i, j: A[i, j] - B[i, j], lambda a, b: r(a - b)),
    ("mul", lambda A, B: lambda i, j: A[i, j] * B[i, j], lambda a, b: r(a * b)),
    ("div", lambda A, B: lambda i, j: A[i, j] / B[i, j], lambda a, b: r(a / b)),
    ("chain", lambda A, B: lambda i, j: A[i, j] * B[i, j] + A[i, j] / B[i, j] - 0.1,
     lambda a, b: r(r(r(a * b) + r(a / b)) - r(0.1))),
    ("max", lambda A, B: lambda i, j: te.max(A[i, j], B[i, j]), lambda a, b: np.maximum(a, b)),
    ("min3", lambda A, B: lambda i, j: te.min(A[i, j], B[i, j] * 2, -A[i, j]),
     lambda a, b: np.minimum(np.minimum(a, r(b * 2)), -a)),
    ("select", lambda A, B: lambda i, j: te.if_then_else(A[i, j] < B[i, j], A[i, j],
                                                         B[i, j] * 3),
     lambda a, b: np.where(a < b, a, r(b * 3))),
    ("sqrt", lambda A, B: lambda i, j: te.sqrt(te.abs(A[i, j])),
     lambda a, b: r(np.sqrt(np.abs(a)))),
    ("to_int32", lambda A, B: lambda i, j: (A[i, j] * 8).astype("int32"),
     lambda a, b: r(a * 8).astype(np.int32)),
    ("to_float16", lambda A, B: lambda i, j: (A[i, j] / B[i, j]).astype("float16"),
     lambda a, b: r(a / b).astype(np.float16)),
    ("to_float64", lambda A, B: lambda i, j: A[i, j].astype("float64") / B[i, j].astype(
        "float64"), lambda a, b: a.astype(np.float64) / b.astype(np.float64)),
    ("float32_mix", lambda A, B: lambda i, j: A[i, j].astype("float32") * 1.001,
     lambda a, b: a * np.float32(1.001)),
]


@pytest.mark.parametrize("name, body, ref", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("sched", ["default", "split_vectorize", "parallel"])
def test_operations_round_each_result_to_bfloat16(name, body, ref, sched, backend):
    A = te.placeholder((M, N), "bfloat16", name="A")
    B = te.placeholder((M, N), "bfloat16", name="B")
    C = te.compute((M, N), body(A, B), name="C")
    s = te.create_schedule(C.op)
    if sched == "split_vectorize":
        _, ji = s[C].split(C.op.axis[1], factor=8)   # 13 = 8 + 5: a partial tile
        s[C].vectorize(ji)
    elif sched == "parallel":
        s[C].parallel(C.op.axis[0])
    a, b = _pair()
    out = run1(s, [A, B, C], [a, b], backend)
    want = ref(v(a), v(b))
    got = v(out) if C.dtype == "bfloat16" else out
    assert out.dtype == dt.to_numpy(C.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn, ref", [(te.exp, np.exp), (te.tanh, np.tanh),
                                     (te.log, lambda x: np.log(np.abs(x)))])
def test_math_functions_within_one_ulp(fn, ref, backend):
    A = te.placeholder((M, N), "bfloat16", name="A")
    arg = (lambda x: te.abs(x)) if fn is te.log else (lambda x: x)
    C = te.compute((M, N), lambda i, j: fn(arg(A[i, j])), name="C")
    s = te.create_schedule(C.op)
    _, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].vectorize(ji)
    a, _ = _pair(1)
    got = v(run1(s, [A, C], [a], backend))
    want = r(ref(v(a)))
    np.testing.assert_allclose(got, want, rtol=2.0**-7, atol=0)


def test_reference_is_ml_dtypes_arithmetic():
    ml = pytest.importorskip("ml_dtypes")
    a, b = _pair(2)
    x, y = v(a).astype(ml.bfloat16), v(b).astype(ml.bfloat16)
    for got, want in [(x + y, r(v(a) + v(b))), (x * y, r(v(a) * v(b))),
                      (x / y, r(v(a) / v(b)))]:
        np.testing.assert_array_equal(got.astype(np.float32), want)


def test_rounding_is_per_operation_so_inlining_changes_nothing(backend):
    """(a * b) + c rounds a*b first: with or without an intermediate stage the bits agree,
    and differ from a single rounding of the float32 expression on these data."""
    A = te.placeholder((M, N), "bfloat16", name="A")
    B = te.placeholder((M, N), "bfloat16", name="B")
    P = te.compute((M, N), lambda i, j: A[i, j] * B[i, j], name="P")
    C = te.compute((M, N), lambda i, j: P[i, j] + A[i, j], name="C")
    a, b = _pair(3)
    outs = []
    for inline in (False, True):
        s = te.create_schedule(C.op)
        if inline:
            s[P].compute_inline()
        outs.append(v(run1(s, [A, B, C], [a, b], backend)))
    want = r(r(v(a) * v(b)) + v(a))
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[1], want)
    assert not np.array_equal(want, r(v(a) * v(b) + v(a)))  # the test can fail


@pytest.mark.parametrize("sched", ["default", "split_k", "rfactor"])
def test_sums_accumulate_in_float32(sched, backend):
    """256 + 1 is 256 in bfloat16 (ties to even), so a bfloat16 accumulator stalls; the
    float32 sum is exact and rounded once."""
    K = 37
    rows = np.array([[256.0] + [1.0] * (K - 1),
                     [1.0] * (K - 1) + [256.0],
                     [-512.0] + [-3.0] * (K - 2) + [5.0]], np.float32)
    X = te.placeholder((3, K), "bfloat16", name="X")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((3,), lambda i: te.sum(X[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    if sched == "split_k":
        s[S].split(k, factor=8)
    elif sched == "rfactor":
        ko, _ = s[S].split(k, factor=8)
        s.rfactor(S, ko)
    out = v(run1(s, [X, S], [dt.bfloat16_array(rows)], backend))
    np.testing.assert_array_equal(out, r(rows.astype(np.float64).sum(axis=1)))
    assert out[0] != 256.0


def test_matmul_products_round_then_accumulate_in_float32(backend):
    A = te.placeholder((M, 11), "bfloat16", name="A")
    B = te.placeholder((11, 7), "bfloat16", name="B")
    k = te.reduce_axis((0, 11), name="k")
    C = te.compute((M, 7), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(C.op.axis[0], jo, k, ji)
    g = np.random.default_rng(4)
    a, b = rand((M, 11), "bfloat16", gen=g), rand((11, 7), "bfloat16", gen=g)
    prods = r(v(a)[:, :, None] * v(b)[None, :, :])         # each product rounded
    want = r(prods.astype(np.float64).sum(axis=1))          # float32 accumulation: exact here
    np.testing.assert_allclose(v(run1(s, [A, B, C], [a, b], backend)), want, rtol=2.0**-8)


def test_conversions_into_bfloat16(backend):
    """int32 and float64 go through float32 first (as ml_dtypes and torch do)."""
    ints = np.array([1, 257, 259, -65535, 16777217, 2**31 - 1, -7], np.int32)
    dbl = np.array([1 + 2**-8 + 2**-30, 3.0e38, -1e39, 1e-40, np.nan, -0.0, 0.1],
                   np.float64)
    n = len(ints)
    I_ = te.placeholder((n,), "int32", name="I")
    D = te.placeholder((n,), "float64", name="D")
    C = te.compute((2, n), lambda t, i: te.if_then_else(t == 0, I_[i].astype("bfloat16"),
                                                        D[i].astype("bfloat16")), name="C")
    s = te.create_schedule(C.op)
    with np.errstate(over="ignore"):
        want = np.stack([dt.bfloat16_bits(ints.astype(np.float32)),
                         dt.bfloat16_bits(dbl.astype(np.float32))])
    got = dt.as_bfloat16_bits(run1(s, [I_, D, C], [ints, dbl], backend))
    np.testing.assert_array_equal(got, want)
    assert got[1, 0] == 0x3F80   # double rounding: 1 + 2**-8 + 2**-30 -> float32 tie -> 1


def test_host_arrays_uint16_bits_or_ml_dtypes(backend):
    A = te.placeholder((N,), "bfloat16", name="A")
    C = te.compute((N,), lambda i: A[i] * 2 + 1, name="C")
    s = te.create_schedule(C.op)
    a = rand((N,), "bfloat16")
    want = r(r(v(a) * 2) + 1)
    bits = dt.as_bfloat16_bits(a).copy()
    out = np.full(N, 0x7FC0, np.uint16)
    f = compile_schedule(s, [A, C], backend)
    f(bits, out)
    np.testing.assert_array_equal(v(out), want)
    ml = dt.ml_dtypes()
    if ml is not None:
        out2 = np.full(N, np.nan, ml.bfloat16)
        f(bits.view(ml.bfloat16), out2)
        np.testing.assert_array_equal(out2.astype(np.float32), want)


def test_without_ml_dtypes_host_arrays_are_uint16(monkeypatch, backend):
    monkeypatch.setattr(dt, "ml_dtypes", lambda: None)
    assert dt.to_numpy("bfloat16") == np.uint16
    assert dt.bfloat16_array([1.0, 0.1]).tolist() == [0x3F80, 0x3DCD]
    A = te.placeholder((N,), "bfloat16", name="A")
    C = te.compute((N,), lambda i: A[i] - 0.5, name="C")
    s = te.create_schedule(C.op)
    a = rand((N,), "bfloat16")
    assert a.dtype == np.uint16
    out = run1(s, [A, C], [a], backend)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(v(out), r(v(a) - 0.5))
    assert polytile.nd.array([1.5], dtype="bfloat16").dtype == np.uint16


def test_wrong_array_dtype_is_refused():
    A = te.placeholder((N,), "bfloat16", name="A")
    C = te.compute((N,), lambda i: A[i] + 1, name="C")
    f = polytile.build(te.create_schedule(C.op), [A, C], target="llvm")
    with pytest.raises(TypeError, match=r"(?s)argument 'A' has dtype float32; expected a "
                                        r"bfloat16 array.*bfloat16_array\(A\)"):
        f(np.zeros(N, np.float32), poison((N,), "bfloat16"))


def test_scalar_parameter(backend):
    x = te.var("x", "bfloat16")
    A = te.placeholder((N,), "bfloat16", name="A")
    C = te.compute((N,), lambda i: A[i] * x, name="C")
    s = te.create_schedule(C.op)
    a = rand((N,), "bfloat16")
    f = compile_schedule(s, [A, x, C], backend)
    out = poison((N,), "bfloat16")
    f(a, 0.3, out)                        # 0.3 rounds to 0.30078125 first
    np.testing.assert_array_equal(v(out), r(v(a) * r(0.3)))
    if backend == "llvm":
        with pytest.raises(ValueError, match="overflows bfloat16"):
            f(a, 1e39, out)


def test_constants_and_extremes():
    assert te.const(0.1, "bfloat16").value == float(r(0.1))
    with pytest.warns(PolytileWarning, match="overflows bfloat16"):
        assert te.const(3.4e38, "bfloat16").value == np.inf
    assert te.max_value("bfloat16").value == float(v(np.uint16(0x7F7F)))
    A = te.placeholder((3,), "bfloat16", name="A")
    C = te.compute((3,), lambda i: te.max(A[i], te.min_value("bfloat16")), name="C")
    a = dt.bfloat16_array([-np.inf, -3e38, 2.0])
    out = run1(te.create_schedule(C.op), [A, C], [a], "llvm")
    np.testing.assert_array_equal(v(out), [v(np.uint16(0xFF7F)), r(-3e38), 2.0])


def _bfloat16_ops(body) -> list:
    """Arithmetic, comparisons and calls with a bfloat16 operand or result in ``body``."""
    bad = []

    def see(x):
        ops = (x.a, x.b) if isinstance(x, (Binary, Cmp)) else getattr(x, "args", ())
        if isinstance(x, (Binary, Cmp, Call)) and "bfloat16" in (x.dtype, *(o.dtype
                                                                          for o in ops)):
            bad.append(x)

    for st in walk_stmts(body):
        for e in stmt_exprs(st):
            post_order_visit(e, see)
    return bad


def test_legalized_ir_has_no_bfloat16_arithmetic(monkeypatch):
    from polytile.schedule import pipeline

    A = te.placeholder((N,), "bfloat16", name="A")
    C = te.compute((N,), lambda i: te.exp(A[i] * A[i]) + (A[i] < 0.5).astype("bfloat16"),
                   name="C")
    f = polytile.lower(te.create_schedule(C.op), [A, C])
    assert _bfloat16_ops(f.body) == []
    assert "bfloat16(exp(float32(bfloat16((float32(A[i]) * float32(A[i])))))" in str(f)
    monkeypatch.setattr(pipeline, "LOOP_PASSES", tuple(
        p for p in pipeline.LOOP_PASSES if p[0] != "legalize_bfloat16"))
    raw = polytile.lower(te.create_schedule(C.op), [A, C]).body
    assert len(_bfloat16_ops(raw)) == 4    # mul, exp, compare, add
    assert _bfloat16_ops(legalize_bfloat16(raw)) == []
    F = te.compute((N,), lambda i: i * 2.0, name="F")
    plain = polytile.lower(te.create_schedule(F.op), [F]).body
    assert legalize_bfloat16(plain) is plain


def test_unlegalized_bfloat16_arithmetic_is_an_internal_error():
    from polytile.targets.llvm import intrinsics as llx

    with pytest.raises(InternalError, match="bfloat16 operands reached code generation"):
        llx.binop(None, "add", None, None, "bfloat16")
