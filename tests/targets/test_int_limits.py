"""Integer limits on every path: the reference interpreter, LLVM (run) and CUDA (the source
compiled by nvcc, and run by the host emulation of the driver, or a GPU).

* ``INT_MIN // -1`` and ``INT_MIN % -1`` wrap like numpy (``INT_MIN`` and 0) for every
  signed width and all four division forms, with the divisor a constant (folded) or data;
  a zero divisor from data stays a clear ``ZeroDivisionError`` naming the stage.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import compile_with_nvcc
from test_cuda_numerics import _bind, _run, device  # noqa: F401  (a fixture)

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
def test_int_min_by_minus_one_wraps_on_cuda(dtype, name, device):  # noqa: F811
    A, B, C = _division(dtype, name, False)
    a, b, want = _want(dtype, name, False)
    s = te.create_schedule(C.op)
    _bind(s, C, factor=4)
    src = polytile.build(s, [A, B, C], target="cuda").get_source()
    if dtype in ("int32", "int64"):
        # C leaves INT_MIN / -1 undefined: the printer calls a guarded helper
        assert re.search(r"pt_s(div|mod)<", src), src
    compile_with_nvcc(src)
    np.testing.assert_array_equal(_run(s, [A, B, C], [a, b], device), want)


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
