"""Dtype promotion rules (module docstring of te/dtype.py), checked through the operators
that apply them, plus canonicalisation and the weak-scalar rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import PolytileWarning
from polytile.te import dtype as dt

INTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
ALL = ("bool",) + INTS + UINTS + FLOATS


def _x(dtype: str, name: str = "x"):
    return te.var(name, dtype)


@pytest.mark.parametrize("dtype", ALL)
def test_same_dtype_is_kept(dtype):
    assert dt.promote(dtype, dtype) == dtype
    assert (_x(dtype) == _x(dtype, "y")).dtype == "bool"


@pytest.mark.parametrize("other", INTS + UINTS + FLOATS)
def test_bool_promotes_to_the_other_operand(other):
    assert dt.promote("bool", other) == other
    assert dt.promote(other, "bool") == other
    assert (_x("bool") + _x(other)).dtype == other


def test_logical_ops_on_bools_stay_bool():
    assert (_x("bool") & _x("bool", "y")).dtype == "bool"
    assert (_x("bool") | _x("bool", "y")).dtype == "bool"
    assert (_x("bool") ^ _x("bool", "y")).dtype == "bool"
    assert (~_x("bool")).dtype == "bool"


@pytest.mark.parametrize("i, f", list(itertools.product(INTS + UINTS, FLOATS)))
def test_int_with_float_gives_the_float(i, f):
    assert dt.promote(i, f) == f
    assert dt.promote(f, i) == f
    assert (_x(i) * _x(f, "y")).dtype == f


@pytest.mark.parametrize("a, b", list(itertools.combinations(FLOATS, 2)))
def test_two_floats_give_the_wider(a, b):
    wider = max(a, b, key=dt.bits)
    assert dt.promote(a, b) == wider == dt.promote(b, a)


@pytest.mark.parametrize("a, b", list(itertools.combinations(INTS, 2))
                         + list(itertools.combinations(UINTS, 2)))
def test_same_signedness_ints_give_the_wider(a, b):
    wider = max(a, b, key=dt.bits)
    assert dt.promote(a, b) == wider == dt.promote(b, a)
    assert (_x(a) - _x(b, "y")).dtype == wider


@pytest.mark.parametrize("s, u", [(s, u) for s in INTS for u in UINTS if u != "uint64"])
def test_signed_with_unsigned_matches_numpy(s, u):
    expected = np.promote_types(s, u).name
    assert dt.promote(s, u) == expected
    assert dt.promote(u, s) == expected
    assert (_x(s) + _x(u, "y")).dtype == expected


def test_int8_plus_uint8_is_int16():
    assert dt.promote("int8", "uint8") == "int16"


@pytest.mark.parametrize("s", INTS)
def test_uint64_with_signed_raises(s):
    with pytest.raises(TypeError, match="no integer type holds both"):
        dt.promote("uint64", s)
    with pytest.raises(TypeError, match="cast one explicitly"):
        _x(s) + _x("uint64", "y")


@pytest.mark.parametrize("d", INTS + UINTS + FLOATS)
def test_python_int_is_weak(d):
    e = _x(d) + 1
    assert e.dtype == d
    assert (1 + _x(d)).dtype == d
    assert (_x(d) * 3).dtype == d


@pytest.mark.parametrize("d", FLOATS)
def test_python_float_adopts_float_dtype(d):
    assert (_x(d) + 1.5).dtype == d
    assert (2.5 * _x(d)).dtype == d


@pytest.mark.parametrize("d", INTS + UINTS)
def test_python_float_makes_int_float32(d):
    # TVM's rule (numpy 2 would give float64)
    assert (_x(d) + 1.5).dtype == "float32"
    assert (1.5 - _x(d)).dtype == "float32"


def test_python_int_that_does_not_fit_raises():
    # NEP 50: a Python int out of range of the other operand's dtype is an error
    with pytest.raises(OverflowError, match="does not fit in int8"):
        _x("int8") + 1000
    with pytest.raises(OverflowError, match="uint8"):
        _x("uint8") + (-1)


def test_python_bool_adopts_other_dtype():
    assert (_x("int16") * True).dtype == "int16"


def test_scalar_alone_defaults():
    assert te.const(3).dtype == "int32"
    assert te.const(2**40).dtype == "int64"
    assert te.const(1.0).dtype == "float32"
    assert te.const(True).dtype == "bool"
    assert te.const(3, "float16").dtype == "float16"


@pytest.mark.parametrize("d", INTS + UINTS + ("bool",))
def test_true_division_refuses_ints(d):
    with pytest.raises(TypeError, match="true division needs floats"):
        _x(d) / _x(d, "y")


def test_true_division_of_int_by_python_float_is_float32():
    assert (_x("int32") / 2.0).dtype == "float32"


@pytest.mark.parametrize("d", INTS + UINTS)
def test_floor_division_and_mod_keep_int_dtype(d):
    assert (_x(d) // _x(d, "y")).dtype == d
    assert (_x(d) % 3).dtype == d
    assert te.truncdiv(_x(d), 2).dtype == d
    assert te.truncmod(_x(d), 2).dtype == d


def test_floordiv_of_floats_is_float():
    assert (_x("float32") // 2.0).dtype == "float32"


@pytest.mark.parametrize("d", FLOATS)
def test_bitwise_ops_refuse_floats(d):
    with pytest.raises(TypeError, match="expected integers"):
        _x(d) & _x(d, "y")
    with pytest.raises(TypeError, match="expected integers"):
        _x(d) << 1


def test_comparison_operands_are_promoted():
    e = _x("int8") < _x("float16", "y")
    assert e.dtype == "bool"
    assert e.a.dtype == e.b.dtype == "float16"


@pytest.mark.parametrize("spec, name", [("float32", "float32"), (np.float16, "float16"),
                                        (np.dtype("int8"), "int8"), ("uint16", "uint16"),
                                        (bool, "bool"), ("f8", "float64"), ("i4", "int32")])
def test_canonical(spec, name):
    assert dt.canonical(spec) == name


@pytest.mark.parametrize("alias, name", [("float", "float32"), ("int", "int32"),
                                         ("uint", "uint32"), ("double", "float64")])
def test_tvm_aliases(alias, name):
    # numpy reads "float"/"int"/"uint" as 64-bit; TVM (and polytile) as 32-bit
    assert dt.canonical(alias) == name
    assert te.placeholder((3,), dtype=alias).dtype == name
    assert te.var("v", alias).dtype == name
    assert te.const(1, alias).dtype == name


def test_bfloat16_is_a_float_dtype():
    assert dt.canonical("bfloat16") == "bfloat16"
    assert dt.is_float("bfloat16") and dt.nbytes("bfloat16") == 2
    assert dt.promote("bfloat16", "float16") == "float32"
    assert dt.promote("bfloat16", "float32") == "float32"
    assert dt.promote("bfloat16", "int8") == "bfloat16"
    assert dt.accumulation_dtype("bfloat16") == "float32"


def test_bfloat16_bits_round_to_nearest_even():
    b = dt.bfloat16_bits([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.0, 3.4e38,
                          float("inf"), 0.0, -0.0, 1e-40])
    assert [hex(int(v)) for v in b] == ["0x3f80", "0x3f80", "0x3f82", "0x3f81", "0xc000",
                                        "0x7f80", "0x7f80", "0x0", "0x8000",
                                        hex(int(np.float32(1e-40).view(np.uint32)) >> 16)]
    nan = dt.bfloat16_bits(float("nan"))
    assert np.isnan(dt.bfloat16_to_float32(nan))
    # every bfloat16 value round-trips, and rounding is to the nearest representable value
    allbits = np.arange(2**16, dtype=np.uint16)
    vals = dt.bfloat16_to_float32(allbits)
    finite = np.isfinite(vals)
    np.testing.assert_array_equal(dt.bfloat16_bits(vals[finite]), allbits[finite])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(10001).astype(np.float32) * 100
    r = dt.bfloat16_to_float32(dt.bfloat16_bits(x))
    assert np.all(np.abs(r - x) <= np.abs(x) * 2.0**-8)
    assert dt.round_float(1 + 2**-7 + 2**-9, "bfloat16") == 1 + 2**-7


def test_max_and_min_value_are_tvms_finite_extremes():
    assert te.max_value("float32").value == float(np.finfo(np.float32).max)
    assert te.min_value("float32").value == -float(np.finfo(np.float32).max)
    assert te.max_value("float16").value == 65504.0
    assert te.max_value("bfloat16").value == float(dt.bfloat16_to_float32(0x7F7F))
    assert te.min_value("int32").value == -2**31 and te.max_value("int8").value == 127
    assert te.min_value("uint16").value == 0 and te.max_value("uint16").value == 2**16 - 1
    assert te.max_value("float").dtype == "float32"


@pytest.mark.parametrize("bad", ["complex64", "float128x", object, "float31x4"])
def test_canonical_refuses_unsupported(bad):
    with pytest.raises(TypeError, match="unsupported dtype"):
        dt.canonical(bad)


@pytest.mark.parametrize("vec,base,lanes", [("float32x4", "float32", 4),
                                            ("int8x16", "int8", 16), ("floatx2", "float32", 2),
                                            ("float16x8", "float16", 8)])
def test_vector_dtypes_of_scalars_are_refused(vec, base, lanes):
    # vector dtypes are tensor elements (tests/te/test_vector_dtypes.py), not scalars
    with pytest.raises(TypeError, match=rf"dtype: '{vec}' is a vector dtype \({lanes} lanes "
                       rf"of {base}\).*te.placeholder\(\(n, {lanes}\), dtype='{base}'\)"):
        te.var("x", dtype=vec)


def test_one_lane_vector_dtype_is_the_scalar_dtype():
    assert te.placeholder((3,), dtype="float32x1").dtype == "float32"
    assert dt.canonical("int8x1") == "int8"


@pytest.mark.parametrize("d", ["int4", "uint4"])
def test_int4_scalars_are_refused_clearly(d):
    # int4 tensors are packed storage (tests/targets/test_int4.py); a scalar is not
    assert te.placeholder((8,), dtype=d).dtype == d
    with pytest.raises(TypeError, match=rf"var: dtype '{d}' for 'x'; a scalar dtype: "
                       r"int4/uint4 are a storage format[\s\S]*hint: declare te.var\('x', "
                       rf"dtype='{d[:-1]}8'\)"):
        te.var("x", dtype=d)
    with pytest.raises(TypeError, match="size_var: dtype"):
        te.size_var("n", dtype=d)


def test_the_trailing_axis_form_of_a_vector_dtype_program():
    # TVM's vectorize-add test (A: (n,) float32x4, B = A + 1) written with a lanes axis
    n, lanes = 37, 4
    A = te.placeholder((n, lanes), name="A")
    B = te.compute((n, lanes), lambda i, l: A[i, l] + te.const(1, "float32"), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    f = polytile.build(s, [A, B])
    a = np.random.default_rng(0).uniform(-1, 1, (n, lanes)).astype("float32")
    b = np.full((n, lanes), np.nan, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a.astype(np.float64) + 1, rtol=1e-6)


def test_placeholder_canonicalises_dtype():
    assert te.placeholder((2,), dtype=np.float16).dtype == "float16"
    with pytest.raises(TypeError, match="unsupported dtype"):
        te.placeholder((2,), dtype="complex64")


def test_astype_is_noop_for_same_dtype_and_casts_otherwise():
    x = _x("int32")
    assert x.astype("int32") is x
    c = x.astype("float16")
    assert c.dtype == "float16"
    assert str(c) == "float16(x)"


def test_constant_cast_wraps_like_the_machine():
    assert te.const(300, "int32").astype("int8").value == 44
    assert te.const(-1, "int32").astype("uint8").value == 255
    assert te.const(2.9).astype("int32").value == 2
    assert te.const(-2.9).astype("int32").value == -2


# ------------------------------------------- integer wrap-around and literals (numerics rule)
def test_wrap_is_two_complement_in_pure_python():
    assert dt.wrap(128, "int8") == -128
    assert dt.wrap(-1, "uint8") == 255
    assert dt.wrap(2**64, "uint64") == 0
    assert dt.wrap((2**64 - 1) ** 2, "uint64") == 1
    assert dt.wrap(2**63, "int64") == -(2**63)
    assert dt.wrap(2**31 * 3, "int32") == -(2**31)


def _fold_and_run(expr_fn, dtype: str, backend: str):
    from helpers import run1

    C = te.compute((1,), lambda i: expr_fn(), name="C")
    return run1(te.create_schedule(C.op), [C], [], backend)[0]


FOLDS = [
    ("int8 127 + 1", lambda: te.const(127, "int8") + te.const(1, "int8"), "int8", -128),
    ("uint8 0 - 1", lambda: te.const(0, "uint8") - te.const(1, "uint8"), "uint8", 255),
    ("int16 * ", lambda: te.const(300, "int16") * te.const(300, "int16"), "int16",
     np.int16(np.array(90000).astype("int16"))),
    ("int32 overflow", lambda: te.const(2**31 - 1, "int32") * te.const(3, "int32"), "int32",
     2**31 - 3),
    ("uint64 max", lambda: te.const(2**64 - 1, "uint64"), "uint64", 2**64 - 1),
    ("uint64 max + 1", lambda: te.const(2**64 - 1, "uint64") + te.const(1, "uint64"),
     "uint64", 0),
    ("uint64 max * max", lambda: te.const(2**64 - 1, "uint64") * te.const(2**64 - 1, "uint64"),
     "uint64", 1),
    ("uint64 // 2", lambda: te.const(2**64 - 1, "uint64") // te.const(2, "uint64"), "uint64",
     2**63 - 1),
    ("int64 min - 1", lambda: te.const(-2**63, "int64") - te.const(1, "int64"), "int64",
     2**63 - 1),
    ("int8 astype", lambda: te.const(300).astype("int8"), "int8", 44),
    ("uint64 -> int64", lambda: te.const(2**64 - 1, "uint64").astype("int64"), "int64", -1),
    ("float16 65535", lambda: te.const(65504, "float16") * te.const(2, "float16"), "float16",
     np.inf),
    ("float32 1e39", lambda: te.const(3e38, "float32") * te.const(2, "float32"), "float32",
     np.inf),
    ("float16 0.1", lambda: te.const(0.1, "float16") * te.const(3, "float16"), "float16",
     np.float16(0.1) * np.float16(3)),
]


@pytest.mark.parametrize("name, fn, dtype, want", FOLDS, ids=[f[0] for f in FOLDS])
def test_constant_arithmetic_wraps_in_the_operands_dtype(name, fn, dtype, want, backend):
    """Folded by the simplifier (or by LLVM), and interpreted: the same value as numpy's
    arithmetic on arrays of that dtype; never a Python OverflowError."""
    out = _fold_and_run(fn, dtype, backend)
    assert out.dtype == np.dtype(dtype)
    assert out == np.array(want).astype(dtype)


def test_simplifier_folds_at_the_operands_dtype():
    from polytile.schedule.passes.simplify import simplify_expr

    e = simplify_expr(te.const(127, "int8") + te.const(1, "int8"))
    assert isinstance(e, te.Const) and e.value == -128 and e.dtype == "int8"
    e = simplify_expr(te.const(2**64 - 1, "uint64") + te.const(2, "uint64"))
    assert e.value == 1 and e.dtype == "uint64"
    e = simplify_expr(te.const(200, "uint8").astype("int64") + te.const(100, "int64"))
    assert e.value == 300


def test_literals_outside_their_dtype():
    # floats overflow to inf, as np.float16(65535); ints are refused as np.int8(300) is in
    # numpy 2, with a hint that astype wraps
    with pytest.warns(PolytileWarning, match=r"const: 65535 overflows float16 .*65504"):
        assert te.const(65535, "float16").value == np.inf
    with pytest.warns(PolytileWarning, match="overflows float32"):
        assert te.const(-1e39, "float32").value == -np.inf
    assert te.const(0.1, "float32").value == float(np.float32(0.1))
    assert te.const(2**64 - 1, "uint64").value == 2**64 - 1
    with pytest.raises(OverflowError, match=r"const: 300 does not fit in int8 .*astype"):
        te.const(300, "int8")
    with pytest.raises(OverflowError, match="does not fit in uint64"):
        te.const(2**64, "uint64")
    assert te.const(300).astype("int8").value == 44


def test_float_to_int_cast_of_nan_or_out_of_range_is_not_folded():
    # unspecified (as in C and numpy): left to the machine, never a Python error
    for v in (float("nan"), float("inf"), 1e20):
        e = te.const(v, "float64").astype("int32")
        assert isinstance(e, te.Cast)
    assert te.const(-7.9, "float64").astype("int8").value == -7


def test_uint64_scalar_argument_beyond_int64(backend):
    from helpers import compile_schedule

    n = te.var("n", "uint64")
    C = te.compute((2,), lambda i: n * te.const(3, "uint64") + i.astype("uint64"), name="C")
    f = compile_schedule(te.create_schedule(C.op), [C, n], backend)
    o = np.zeros(2, "uint64")
    f(o, 2**64 - 1)
    np.testing.assert_array_equal(o, [2**64 - 3, 2**64 - 2])
