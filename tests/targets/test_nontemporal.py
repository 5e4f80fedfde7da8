"""The ``nontemporal`` pragma: streamed vector stores on the LLVM target.

Numeric runs at odd sizes (tails narrower than a vector, prime rows), on arrays whose data
start is 16-byte aligned (non-temporal path) and on arrays offset by one element (the
run-time alignment check picks the ordinary store), serial and parallel; the IR and the
assembly carry the non-temporal stores and the fences; refusals name the pragma.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import llvm_status, poison

import polytile
from polytile import te
from polytile.errors import ScheduleError

pytestmark = pytest.mark.skipif(not llvm_status()[0], reason="llvm backend unavailable")


def _scaled(m: int, n: int, *, lanes: int = 16, parallel: bool = False, on: str = "outer"):
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] * te.const(3.0, "float32"), name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=lanes)
    s[B].vectorize(ji)
    if parallel:
        s[B].parallel(i)
    s[B].pragma({"outer": jo, "row": i, "vector": ji}[on], "nontemporal")
    return s, [A, B]


def _offset_array(shape, offset_elems: int, rng) -> np.ndarray:
    """A C-contiguous float32 array whose data start is ``4 * offset_elems`` bytes past a
    64-byte boundary (a view into a larger buffer)."""
    n = int(np.prod(shape))
    raw = np.empty(n + 32, dtype="float32")
    skip = (-raw.ctypes.data % 64) // 4 + offset_elems
    a = raw[skip:skip + n].reshape(shape)
    a[...] = rng.uniform(-1, 1, shape)
    return a


@pytest.mark.parametrize("m,n", [(1, 1), (3, 17), (5, 31), (2, 130), (7, 64), (1, 257)])
@pytest.mark.parametrize("offset", [0, 1, 4])
@pytest.mark.parametrize("parallel", [False, True])
def test_streamed_stores_compute_the_definition(m, n, offset, parallel):
    rng = np.random.default_rng(m * 1000 + n)
    s, args = _scaled(m, n, parallel=parallel)
    f = polytile.build(s, args, target="llvm")
    a = _offset_array((m, n), 0, rng)
    b = _offset_array((m, n), offset, rng)
    b[...] = poison((m, n), "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3))


@pytest.mark.parametrize("on", ["row", "vector"])
def test_pragma_on_any_enclosing_loop(on):
    s, args = _scaled(4, 100, on=on, parallel=on == "row")
    f = polytile.build(s, args, target="llvm")
    a = np.random.default_rng(0).uniform(-1, 1, (4, 100)).astype("float32")
    b = poison((4, 100), "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3))


def test_ir_has_nontemporal_stores_and_fences():
    s, args = _scaled(8, 256, parallel=True)
    f = polytile.build(s, args, target="llvm")
    ll = f.get_source("ll")
    assert "!nontemporal" in ll
    assert ll.count("fence seq_cst") >= 2  # before the threads start and in each thread
    assert "movnt" in f.get_source("s")


def test_without_pragma_no_streaming():
    A = te.placeholder((8, 256), name="A")
    B = te.compute((8, 256), lambda i, j: A[i, j] * te.const(3.0, "float32"), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(s[B].split(B.op.axis[1], factor=16)[1])
    ll = polytile.build(s, [A, B], target="llvm").get_source("ll")
    assert "nontemporal" not in ll and "fence" not in ll


def test_streamed_stage_read_by_a_parallel_consumer():
    """A serial stage streams its stores, a parallel stage reads them on other threads."""
    m, n = 6, 96
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + te.const(1.0, "float32"), name="B")
    C = te.compute((m, n), lambda i, j: B[m - 1 - i, j] * te.const(2.0, "float32"), name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].vectorize(ji)
    s[B].pragma(jo, "nontemporal")
    s[C].parallel(C.op.axis[0])
    f = polytile.build(s, [A, C], target="llvm")
    a = np.random.default_rng(1).uniform(-1, 1, (m, n)).astype("float32")
    c = poison((m, n), "float32")
    f(a, c)
    np.testing.assert_array_equal(c, (a[::-1] + np.float32(1)) * np.float32(2))


def test_pragma_trace_replays():
    s, args = _scaled(3, 40)
    steps = [st for st in s.trace if st.primitive == "pragma"]
    assert [st.args[1] for st in steps] == ["nontemporal"]
    f = polytile.build(s.copy(), args, target="llvm")
    assert "!nontemporal" in f.get_source("ll")
    a = np.random.default_rng(2).uniform(-1, 1, (3, 40)).astype("float32")
    b = poison((3, 40), "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3))


def test_nontemporal_with_a_value_is_refused():
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match=r"pragma: 'nontemporal' on stage 'B' has value 1; "
                       r"expected no value"):
        s[B].pragma(B.op.axis[1], "nontemporal", 1)


@pytest.mark.parametrize("dtype", ["float64", "float16", "int8", "int64", "bool"])
def test_streamed_stores_of_other_dtypes(dtype):
    m, n = 3, 77
    A = te.placeholder((m, n), name="A", dtype=dtype)
    B = te.compute((m, n), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=32)
    s[B].vectorize(ji)
    s[B].pragma(jo, "nontemporal")
    f = polytile.build(s, [A, B], target="llvm")
    rng = np.random.default_rng(5)
    a = (rng.integers(0, 2, (m, n)) if dtype == "bool" else rng.integers(-9, 9, (m, n)))
    a = a.astype(dtype)
    b = np.zeros((m, n), dtype=dtype) if dtype == "bool" else poison((m, n), dtype)
    if dtype == "bool":
        b[...] = ~a
    f(a, b)
    np.testing.assert_array_equal(b, a)
