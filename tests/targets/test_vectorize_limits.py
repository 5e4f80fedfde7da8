"""Vectorized loops longer than a SIMD register (case B3): the CPU backend strip-mines them
into native vectors plus one narrower vector for the remainder; builds stay fast and the
numbers right."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import check, rand, run1

import polytile
from polytile import te
from polytile.targets import Target

HOST = Target.parse("llvm")


def _vector_widths(ir: str, ty: str) -> set[int]:
    return {int(n) for n in re.findall(rf"<(\d+) x {ty}>", ir)}


#: The case runs in a child process with a time limit: without strip-mining, LLVM works
#: on one <1048576 x float> vector for minutes (or runs out of memory).
B3_CHILD = textwrap.dedent("""
    import re, sys, time
    import numpy as np
    import polytile
    from polytile import te
    n = int(sys.argv[1])
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    t0 = time.perf_counter()
    f = polytile.build(s, [A, B])
    took = time.perf_counter() - t0
    a = np.random.default_rng(1).uniform(-1, 1, n).astype("float32")
    b = np.full_like(a, np.nan)
    f(a, b)
    assert (b == a * 2).all()
    ir = f.get_source("ll", optimized=False)
    print(took, *sorted({int(w) for w in re.findall(r"<(\\d+) x float>", ir)}))
""")


@pytest.mark.parametrize("n", (1 << 20, 1000))
def test_b3_vectorize_long_loops(n):
    r = subprocess.run([sys.executable, "-c", B3_CHILD, str(n)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    took, *widths = r.stdout.split()
    assert float(took) < 20
    widths = {int(w) for w in widths}
    lanes = HOST.vector_lanes(4)
    assert lanes in widths and max(widths) == lanes
    if n % lanes:
        assert n % lanes in widths      # the remainder is one narrower vector


@pytest.mark.parametrize("dtype, n", (("float64", 203), ("int8", 1001), ("int32", 67),
                                      ("float16", 130)))
def test_vectorize_non_multiples_of_the_width(dtype, n):
    A = te.placeholder((3, n), dtype, name="A")
    B = te.compute((3, n), lambda i, j: A[i, j] * te.const(3, dtype) + A[i, n - 1 - j],
                   name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    if dtype.startswith("int"):
        a = np.random.default_rng(2).integers(-40, 40, (3, n)).astype(dtype)
    else:
        a = rand((3, n), dtype, seed=2)
    out = run1(s, [A, B], [a], "llvm")
    ref = a.astype("float64") * 3 + a[:, ::-1].astype("float64")
    if dtype == "int8":
        ref = (ref.astype("int64") + 128) % 256 - 128     # int8 arithmetic wraps
    check(out, ref, dtype)
    ir = polytile.build(s, [A, B]).get_source("ll", optimized=False)
    ty = {"float64": "double", "int8": "i8", "int32": "i32", "float16": "half"}[dtype]
    lanes = HOST.vector_lanes(np.dtype(dtype).itemsize)
    assert max(_vector_widths(ir, ty)) == lanes


def test_vectorize_widest_element_sets_the_width():
    """float16 loaded, float64 stored: one register of float64 per chunk."""
    n = 100
    A = te.placeholder((n,), "float16", name="A")
    B = te.compute((n,), lambda i: A[i].astype("float64") * 0.5, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    a = rand((n,), "float16", seed=3)
    check(run1(s, [A, B], [a], "llvm"), a.astype("float64") * 0.5)
    ir = polytile.build(s, [A, B]).get_source("ll", optimized=False)
    assert max(_vector_widths(ir, "double")) == HOST.vector_lanes(8)


def test_vectorize_strip_mines_the_scalar_fallback():
    """A body that cannot be widened (a load guarded by a varying condition) runs as
    scalar code, one register's worth of copies per chunk, not 4099 copies."""
    n = 4099
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.if_then_else(i > 0, A[i - 1], 0.0), name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    t0 = time.perf_counter()
    f = polytile.build(s, [A, B])
    assert time.perf_counter() - t0 < 20
    a = rand((n,), seed=4)
    b = np.full_like(a, np.nan)
    f(a, b)
    check(b, np.concatenate([[0.0], a[:-1].astype("float64")]))
    ir = f.get_source("ll", optimized=False)
    assert ir.count("load float") < 4 * HOST.vector_lanes(4)


def test_vectorize_inside_an_attached_stage_region(backend="llvm"):
    """A vectorized axis of a stage computed inside another: its extent is the region."""
    A = te.placeholder((5, 300), name="A")
    P = te.compute((5, 300), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((5, 299), lambda i, j: P[i, j] + P[i, j + 1], name="C")
    s = te.create_schedule(C.op)
    s[P].compute_at(s[C], C.op.axis[0])
    s[P].vectorize(P.op.axis[1])
    s[C].vectorize(C.op.axis[1])
    a = rand((5, 300), seed=5)
    out = run1(s, [A, C], [a], backend)
    a64 = a.astype("float64")
    check(out, 2 * a64[:, :-1] + 2 * a64[:, 1:])


@pytest.mark.parametrize("n, pragma", ((100, True), (1000, False)))
def test_cuda_long_vectorized_loops_are_not_fully_unrolled(n, pragma):
    """CUDA C has no vector types of arbitrary width: a vectorized loop is an unrolled
    loop, and beyond MAX_UNROLL iterations a plain one (nvcc would stall unrolling it)."""
    from polytile.schedule.pipeline import finalize, lower
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda import CUDADialect

    A = te.placeholder((4, n), name="A")
    B = te.compute((4, n), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("threadIdx.x"))
    s[B].vectorize(B.op.axis[1])
    source = print_c_module(finalize(lower(s, [A, B])), CUDADialect()).source
    assert re.search(rf"for \(int\w* j = 0\w*; j < {n}\w*; \+\+j\)", source), source
    assert ("#pragma unroll" in source) == pragma
