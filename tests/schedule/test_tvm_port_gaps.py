"""TVM schedule programs that needed more than import changes: ``Schedule.normalize()``
and loops bound to ``vthread`` on the CPU (TVM injects virtual threads on every target;
polytile runs them as unrolled loops). Results against numpy float64 at odd sizes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import rand, run1

import polytile
from polytile import ScheduleError, te


def test_normalize_returns_a_schedule_that_lowers():
    # TVM's bound-inference tests: s = s.normalize(); bounds = InferBound(s)
    n = 11
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((2, n), "k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op).normalize()
    a = rand((n,), seed=3)
    b = run1(s, [A, B], [a], "llvm")
    np.testing.assert_allclose(b, [a[2:].astype("float64").sum()], rtol=1e-5)


def vthread_matmul(n: int):
    """TVM's GPU tiling idiom (a local accumulator tile per virtual thread) on the CPU."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], nparts=2)
    jo, ji = s[C].split(C.op.axis[1], nparts=3)
    s[C].reorder(io, jo, ii, ji)
    s[C].bind(io, te.thread_axis("vthread"))
    s[C].bind(jo, te.thread_axis("vthread"))
    s[CL].compute_at(s[C], jo)
    return s, [A, B, C]


@pytest.mark.parametrize("n", [1, 7, 37])
def test_vthread_on_llvm_runs_as_unrolled_loops(n):
    s, args = vthread_matmul(n)
    a, b = rand((n, n), seed=1), rand((n, n), seed=2)
    c = run1(s, args, [a, b], "llvm")
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-5, atol=1e-6)
    text = str(polytile.lower(s, args))     # default target of a vthread-only schedule: llvm
    # one copy of the body per virtual thread (2 x 3), as TVM's InjectVirtualThread
    assert "vthread" not in text and (text.count("C.local[i.c, j.c] = 0f") == 6 or n < 3)


def test_vthread_schedule_still_builds_for_cuda_after_llvm():
    s, args = vthread_matmul(37)
    polytile.build(s, args, "llvm")   # the user's schedule keeps its vthread bindings
    assert any(k.value == "vthread" for k in s[args[-1]].annotations.values())


@pytest.mark.parametrize("split", ["factor", "nparts"])
def test_vthread_of_symbolic_extent_on_llvm(split):
    m = te.var("m")
    X = te.placeholder((m,), name="X")
    Y = te.compute((m,), lambda i: X[i] * 3.0, name="Y")
    s = te.create_schedule(Y.op)
    _, xi = s[Y].split(Y.op.axis[0], **{split: 4})
    s[Y].bind(xi, te.thread_axis("vthread"))
    f = polytile.build(s, [X, Y], "llvm")
    for size in (1, 11):
        x, y = rand((size,), seed=size), np.full(size, np.nan, "float32")
        f(x, y)
        np.testing.assert_allclose(y, x.astype("float64") * 3, rtol=1e-6)


def test_hardware_thread_index_on_llvm_is_still_refused():
    X = te.placeholder((16,), name="X")
    Y = te.compute((16,), lambda i: X[i] + 1.0, name="Y")
    s = te.create_schedule(Y.op)
    xo, xi = s[Y].split(Y.op.axis[0], factor=4)
    s[Y].bind(xi, te.thread_axis("vthread"))
    s[Y].bind(xo, te.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match="binds loops to GPU indices"):
        polytile.build(s, [X, Y], "llvm")


def test_tvm_tensor_expression_tutorial_runtime_surface():
    # TVM's "Working with Operators Using Tensor Expression": target.kind.name, tvm.nd
    # arrays on tvm.device(...), repeated calls (nd arrays took the checked slow path on
    # every call: a time_evaluator of the 1024-element add read about 80 us, not 1)
    tgt = polytile.target.Target(target="llvm", host="llvm")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    fadd = polytile.build(te.create_schedule(C.op), [A, B, C], tgt, name="myadd")
    dev = polytile.device(tgt.kind.name, 0)
    assert tgt.kind == "llvm" and tgt.kind.name == "llvm"
    a = polytile.nd.array(rand((1031,), seed=1), dev)
    b = polytile.nd.array(rand((1031,), seed=2), dev)
    c = polytile.nd.array(np.full(1031, np.nan, "float32"), dev)
    for _ in range(2):
        c[:] = np.nan   # (a CPUArray is a numpy array; numpy() is a copy)
        fadd(a, b, c)
        np.testing.assert_allclose(c.numpy(), a.numpy().astype("float64") + b.numpy(),
                                   rtol=1e-6)
    assert fadd._fast is not None   # the checks of these arrays are remembered
    with pytest.raises(ValueError, match="disagree on the symbolic size 'n'"):
        fadd(a, b, polytile.nd.array(np.zeros(1030, "float32"), dev))


def test_tvm_lower_signature_with_binds():
    # TVM's lower(inp, args, name, binds, simple_mode): binds by keyword or in fourth place
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    assert "def f(" in str(polytile.lower(s, [A, B], "f", None, True))
    assert "def f(" in str(polytile.lower(s, [A, B], name="f", binds={}, simple_mode=True))
    with pytest.raises(polytile.TargetError, match="lower: binds of 1 tensors are given"):
        polytile.lower(s, [A, B], "f", {A: polytile.tir.decl_buffer(A.shape, A.dtype)})


def test_tir_bitwise_helpers_and_likely():
    from polytile import tir

    A = te.placeholder((8,), name="A", dtype="int32")
    B = te.compute((8,), lambda i: tir.bitwise_xor(tir.bitwise_and(A[i], 0x0F0F), tir.bitwise_or(
        tir.shift_left(A[i], 3), tir.shift_right(A[i], 2))) + tir.bitwise_not(A[i]), name="B")
    C = te.compute((8,), lambda i: tir.if_then_else(tir.likely(A[i] > 0), A[i], 0), name="C")
    f = polytile.build(te.create_schedule([B.op, C.op]), [A, B, C])
    a = np.array([-9, -1, 0, 1, 2, 7, 255, 2 ** 28 - 3], "int32")
    b, c = np.zeros(8, "int32"), np.zeros(8, "int32")
    f(a, b, c)
    np.testing.assert_array_equal(b, ((a & 0x0F0F) ^ ((a << 3) | (a >> 2))) + ~a)
    np.testing.assert_array_equal(c, np.maximum(a, 0))
