"""The libm-backed intrinsics (tan, asin, ..., atan2, hypot, copysign) and the float
classification ones (isinf, isfinite), on every backend; float32 relative tolerance 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compile_with_nvcc, run1

import polytile
from polytile import ScheduleError, te

UNARY = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
         "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p, "expm1": np.expm1}
BINARY = {"atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign}


@pytest.mark.parametrize("vec", [False, True])
@pytest.mark.parametrize("name", UNARY)
def test_unary(backend, name, vec):
    a = np.random.default_rng(1).uniform(-0.9, 0.9, 37).astype("float32")
    A = te.placeholder((37,), name="A")
    C = te.compute((37,), lambda i: getattr(te, name)(A[i]), name="C")
    s = te.create_schedule(C.op)
    if vec:
        s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    np.testing.assert_allclose(run1(s, [A, C], [a], backend), UNARY[name](a.astype("f8")),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", BINARY)
def test_binary(backend, name):
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-2, 2, (2, 31)).astype("float32")
    A, B = te.placeholder((31,), name="A"), te.placeholder((31,), name="B")
    C = te.compute((31,), lambda i: getattr(te, name)(A[i], B[i]), name="C")
    s = te.create_schedule(C.op)
    np.testing.assert_allclose(run1(s, [A, B, C], [a, b], backend),
                               BINARY[name](a.astype("f8"), b.astype("f8")), rtol=1e-5)


def test_isinf_isfinite(backend):
    x = np.array([1.0, np.inf, -np.inf, np.nan, 0.0, -3.5], dtype="float32")
    X = te.placeholder((6,), name="X")
    C = te.compute((6,), lambda i: te.isinf(X[i]).astype("int32") * 2
                   + te.isfinite(X[i]).astype("int32"), name="C")
    out = run1(te.create_schedule(C.op), [X, C], [x], backend)
    np.testing.assert_array_equal(out, np.isinf(x) * 2 + np.isfinite(x))


def test_cuda_source_uses_libm_names():
    A, B = te.placeholder((32,), name="A"), te.placeholder((32,), name="B")
    C = te.compute((32,), lambda i: te.atan2(A[i], B[i]) + te.log1p(A[i]), name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    src = polytile.build(s, [A, B, C], target="cuda").get_source()
    assert "atan2f(" in src and "log1pf(" in src
    compile_with_nvcc(src)


def test_target_and_bindings_must_agree():
    A = te.placeholder((32,), name="A")
    C = te.compute((32,), lambda i: A[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="needs GPU kernels, but no loop of the schedule is "
                       "bound"):
        polytile.build(s, [A, C], target="cuda")
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="runs on the CPU, but the schedule binds loops"):
        polytile.build(s, [A, C], target="llvm")


def test_unknown_cpu_is_a_target_error_not_an_abort():
    from polytile import TargetError

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(TargetError, match="LLVM does not know the CPU 'nonsense'"):
        polytile.build(te.create_schedule(B.op), [A, B], target="llvm -mcpu=nonsense")
