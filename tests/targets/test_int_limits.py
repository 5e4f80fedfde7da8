"""Integer limits on every path: the reference interpreter, LLVM (run) and CUDA (the source
compiled by nvcc, and run by the host emulation of the driver, or a GPU).

* ``INT_MIN // -1`` and ``INT_MIN % -1`` wrap like numpy (``INT_MIN`` and 0) for every
  signed width and all four division forms, with the divisor a constant (folded) or data;
  a zero divisor from data stays a clear ``ZeroDivisionError`` naming the stage.
* Values past ``int32``: an axis whose range leaves ``int32`` is an ``int64`` variable, a loop
  variable in ``int64`` arithmetic (``i.astype("int64") * 3_000_000_000``), an index whose
  intermediate values leave ``int32``, a flattened offset past ``2**31 - 1`` and ``int64``
  data are exact everywhere; the GPU's index narrowing keeps them ``int64`` (decided per
  expression from bounds) and still narrows the small indices.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import compile_with_nvcc
from test_cuda_numerics import _bind, _run

import polytile
from polytile import te
from polytile.schedule.interpreter import run as interpret

SIGNED = ("int8", "int16", "int32", "int64")
DIVS = {"floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
        "truncdiv": te.truncdiv, "truncmod": te.truncmod}
N = 11


def _numpy_div(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's results, exact in Python ints and wrapped to the dtype."""
    info = np.iinfo(a.dtype)
    out = []
    for x, y in zip(a.tolist(), b.tolist()):
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        r = {"floordiv": x // y, "floormod": x % y, "truncdiv": q, "truncmod": x - q * y}[name]
        out.append((r - int(info.min)) % (int(info.max) - int(info.min) + 1) + int(info.min))
    return np.array(out, a.dtype)


def _operands(dtype: str):
    lo = int(np.iinfo(dtype).min)
    a = np.array([lo, lo, lo + 1, 7, -7, lo, 0, 1, -1, 5, lo], dtype)
    b = np.array([-1, 1, -1, -2, 2, 3, -1, -1, -1, -3, -1], dtype)
    return a, b


def _division(dtype: str, name: str, const: bool):
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    f = DIVS[name]
    if const:   # folded at definition time: INT_MIN op -1 on constants, plus A[i]*0
        lo = int(np.iinfo(dtype).min)
        C = te.compute((N,), lambda i: f(te.const(lo, dtype), te.const(-1, dtype)) + A[i]
                       * te.const(0, dtype) + B[i] * te.const(0, dtype), name="C")
    else:
        C = te.compute((N,), lambda i: f(A[i], B[i]), name="C")
    return A, B, C


def _want(dtype, name, const):
    a, b = _operands(dtype)
    if const:
        lo = np.iinfo(dtype).min
        return a, b, _numpy_div(name, np.full(N, lo, dtype), np.full(N, -1, dtype))
    return a, b, _numpy_div(name, a, b)


@pytest.mark.parametrize("const", [False, True], ids=["data", "folded"])
@pytest.mark.parametrize("name", sorted(DIVS))
@pytest.mark.parametrize("dtype", SIGNED)
def test_int_min_by_minus_one_wraps_on_llvm_and_interpreter(dtype, name, const):
    A, B, C = _division(dtype, name, const)
    a, b, want = _want(dtype, name, const)
    s = te.create_schedule(C.op)
    out = np.full(N, 99, dtype)
    polytile.build(s, [A, B, C], target="llvm")(a, b, out)
    np.testing.assert_array_equal(out, want)
    out2 = np.full(N, 99, dtype)
    interpret(polytile.lower(s, [A, B, C]), a, b, out2)
    np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("name", sorted(DIVS))
@pytest.mark.parametrize("dtype", SIGNED)
def test_int_min_by_minus_one_wraps_on_cuda(dtype, name, cuda_build):
    A, B, C = _division(dtype, name, False)
    a, b, want = _want(dtype, name, False)
    s = te.create_schedule(C.op)
    _bind(s, C, factor=4)
    src = polytile.build(s, [A, B, C], target="cuda").get_source()
    if dtype in ("int32", "int64"):
        # C leaves INT_MIN / -1 undefined: the printer calls a guarded helper
        assert re.search(r"pt_s(div|mod)<", src), src
    compile_with_nvcc(src)
    np.testing.assert_array_equal(_run(s, [A, B, C], [a, b], cuda_build), want)


@pytest.mark.parametrize("name", sorted(DIVS))
@pytest.mark.parametrize("dtype", SIGNED)
def test_zero_divisor_from_data_stays_an_error(dtype, name):
    A, B, C = _division(dtype, name, False)
    a, b, _ = _want(dtype, name, False)
    b[4] = 0
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, B, C], target="llvm")
    with pytest.raises(ZeroDivisionError, match="stage 'C' divides by zero"):
        f(a, b, np.zeros(N, dtype))
    with pytest.raises(ZeroDivisionError):
        interpret(polytile.lower(s, [A, B, C]), a, b, np.zeros(N, dtype))


@pytest.mark.parametrize("dtype", SIGNED)
def test_constant_zero_divisor_is_refused_at_definition(dtype):
    A = te.placeholder((N,), dtype, name="A")
    with pytest.raises(ZeroDivisionError):
        te.compute((N,), lambda i: A[i] // te.const(0, dtype), name="C")


# ------------------------------------------------------------------ values past int32
BIG = (1 << 31) - 5     # an axis from here runs past 2**31 - 1


def _reduce_past_int32():
    k = te.reduce_axis((BIG, BIG + 12), name="k")
    A = te.placeholder((12,), "int64", name="A")
    S = te.compute((3,), lambda i: te.sum(k.astype("int64") * (i + 1).astype("int64")
                                          + A[k - BIG], axis=k), name="S")
    a = np.arange(12, dtype="int64") * 1000 - 5000
    want = np.array([sum(kk * (i + 1) + int(a[kk - BIG]) for kk in range(BIG, BIG + 12))
                     for i in range(3)], "int64")
    return [A, S], [a], want


def _times_three_billion():
    A = te.placeholder((13,), "int64", name="A")
    C = te.compute((13,), lambda i: i.astype("int64") * 3_000_000_000 + A[i], name="C")
    a = np.arange(13, dtype="int64") - 6
    return [A, C], [a], np.arange(13, dtype="int64") * 3_000_000_000 + a


def _index_via_int64():
    A = te.placeholder((40,), "float32", name="A")
    C = te.compute((13,), lambda i: A[(i.astype("int64") * 3_000_000_000) // 1_000_000_000],
                   name="C")
    a = np.random.default_rng(2).uniform(-1, 1, 40).astype("float32")
    return [A, C], [a], a[np.arange(13) * 3]


def _int64_data():
    A = te.placeholder((13,), "int64", name="A")
    B = te.placeholder((13,), "int64", name="B")
    C = te.compute((13,), lambda i: A[i] * 3 + te.truncdiv(A[i], B[i]) + (A[i] % B[i])
                   - te.max(A[i], B[i]), name="C")
    g = np.random.default_rng(4)
    a = g.integers(-(1 << 40), 1 << 40, 13).astype("int64")
    b = g.integers(1 << 31, 1 << 33, 13).astype("int64") * np.where(np.arange(13) % 2, 1, -1)
    q = np.array([abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
                  for x, y in zip(a.tolist(), b.tolist())], "int64")
    return [A, B, C], [a, b], a * 3 + q + a % b - np.maximum(a, b)


CASES = {"reduce_axis_past_int32": _reduce_past_int32,
         "loop_var_times_3e9": _times_three_billion,
         "index_through_int64": _index_via_int64, "int64_data": _int64_data}


@pytest.mark.parametrize("case", sorted(CASES))
def test_past_int32_exact_on_llvm_and_interpreter(case):
    args, inputs, want = CASES[case]()
    s = te.create_schedule(args[-1].op)
    out = np.full(want.shape, 7, want.dtype)
    polytile.build(s, args, target="llvm")(*inputs, out)
    np.testing.assert_array_equal(out, want)
    out2 = np.full(want.shape, 7, want.dtype)
    interpret(polytile.lower(s, args), *inputs, out2)
    np.testing.assert_array_equal(out2, want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_past_int32_exact_on_cuda(case, cuda_build):
    args, inputs, want = CASES[case]()
    s = te.create_schedule(args[-1].op)
    _bind(s, args[-1], factor=4)
    src = polytile.build(s, args, target="cuda").get_source()
    compile_with_nvcc(src)
    body = src[src.index('extern "C"'):]
    # the hardware indices stay 32-bit (small ranges)...
    assert "const int32_t threadIdx_x" in body, body
    # ...and nothing that may leave int32 is computed in int32
    if case == "reduce_axis_past_int32":
        assert re.search(r"for \(int64_t k = ", body), body
    if case == "loop_var_times_3e9":   # (the index case isl simplifies to 3 * i)
        assert "3000000000LL *" in body and "(int32_t)(3000000000" not in body, body
    if case == "int64_data":
        assert "pt_sdiv<int64_t>" in body and "pt_smod<int64_t>" in body, body
    np.testing.assert_array_equal(_run(s, args, inputs, cuda_build), want)


def test_flat_offset_past_int32_stays_int64_in_cuda_source():
    # 3 x 2**31 elements, never allocated here: only the source is checked
    A = te.placeholder((3, 1 << 31), "float32", name="A")
    C = te.compute((3, 5), lambda i, j: A[i, (1 << 31) - 1 - j] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    src = polytile.build(s, [A, C], target="cuda").get_source()
    compile_with_nvcc(src)
    body = src[src.index('extern "C"'):]
    load = re.search(r"= A\[(.*)\] \* 2\.0f;", body).group(1)
    assert "2147483648LL * ((int64_t)blockIdx_x)" in load, body
    # the store's offset is small: int32
    assert "C[(5 * blockIdx_x) + threadIdx_x]" in body, body
    # the LLVM build of the same definition indexes in int64 (its IR: i64 offsets only)
    f = polytile.build(te.create_schedule(C.op), [A, C], target="llvm")
    assert "i32 " not in "".join(x for x in f.get_source("ll").splitlines()
                                 if "getelementptr" in x)


def test_literal_index_past_int32_is_int64():
    A = te.placeholder((2, (1 << 31) + 9), "int8", name="A")
    C = te.compute((2,), lambda i: A[i, (1 << 31) + 3], name="C")
    assert C.op.body[0].indices[1].dtype == "int64"
    text = str(polytile.lower(te.create_schedule(C.op), [A, C]))
    assert "A[i, 2147483651]" in text, text


def test_small_axes_stay_int32():
    A = te.placeholder((17,), "float32", name="A")
    k = te.reduce_axis((0, 1 << 20), name="k")
    C = te.compute((17,), lambda i: A[i] + 1, name="C")
    assert C.op.axis[0].var.dtype == "int32" and k.var.dtype == "int32"
    big = te.reduce_axis((0, (1 << 31) + 1), name="big")
    assert big.var.dtype == "int64"


# ------------------------------------------------------------------ past int64: refused
def test_shape_past_int64_is_refused_naming_the_tensor():
    from polytile.errors import DefinitionValueError
    with pytest.raises(DefinitionValueError, match=r"compute 'C': shape \(9223372036854775808,\) "
                       r"has 9223372036854775808 elements(.|\n)*int64(.|\n)*hint: split"):
        te.compute((1 << 63,), lambda i: i, name="C")
    with pytest.raises(DefinitionValueError, match=r"placeholder 'A': shape \(1099511627776, "
                       r"1073741824\) has \d+ elements, more than an int64 offset reaches"):
        te.placeholder((1 << 40, 1 << 30), name="A")
    # the largest legal one is accepted (lowered, never allocated)
    A = te.placeholder((1 << 31, 1 << 31), "int8", name="A")
    C = te.compute((2,), lambda i: A[i, (1 << 31) - 1], name="C")
    assert "A[i, 2147483647]" in str(polytile.lower(te.create_schedule(C.op), [A, C]))


@pytest.mark.parametrize("dom", [(0, 1 << 64), (-(1 << 63) - 1, 0), (1 << 63, (1 << 63) + 2)])
def test_reduce_axis_past_int64_is_refused_naming_the_axis(dom):
    from polytile.errors import DefinitionValueError
    with pytest.raises(DefinitionValueError, match=r"reduce_axis 'kk': range .* leaves int64"):
        te.reduce_axis(dom, name="kk")
