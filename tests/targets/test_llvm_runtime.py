"""LLVM backend: targets, build(), the Python wrapper's checks, sources and timing."""

from __future__ import annotations

import time
import warnings

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest
from llvm_ir_helpers import (Call, Const, PrimFunc, buf, build, c64, ld, loop, poison, rand,
                             seq, st, var)

import polytile
from polytile.errors import BuildError, InternalError, LoweringError, TargetError
from polytile.targets import LLVMModule, Target
from polytile.targets.llvm import BenchmarkResult, codegen_llvm
from polytile.targets.llvm.runtime import get_num_threads, set_num_threads


def _axpy():
    n = 7
    X, Y, Z = buf("X", n), buf("Y", n), buf("Z", n)
    a = var("a", "float32")
    i = var("i")
    return PrimFunc("axpy", (X, Y, Z, a), loop(i, n, st(Z, i, ld(X, i) * a + ld(Y, i))))


# ----------------------------------------------------------------------------- targets
def test_target_parse_host_defaults():
    t = Target.parse("llvm")
    assert t.kind == "llvm" and t.cpu == llvm.get_host_cpu_name() and t.opt_level == 3
    assert not t.fast_math
    host = llvm.get_host_cpu_features()
    want = 64 if host.get("avx512f") else 32 if host.get("avx2") else 16
    assert t.vector_width == want


def test_target_parse_options():
    t = Target.parse("llvm -mcpu=znver4 -opt-level=2 -fast-math")
    assert (t.cpu, t.opt_level, t.fast_math, t.vector_width) == ("znver4", 2, True, 64)
    assert Target.parse("llvm -mcpu=haswell").vector_width == 32
    assert Target.parse("llvm -mcpu=x86-64").vector_width == 16
    assert Target.parse("llvm -mcpu=x86-64 -mattr=+avx2").vector_width == 32
    assert Target.parse("llvm -mattr=-avx512f").vector_width in (16, 32)
    assert "-avx512f" in Target.parse("llvm -mattr=-avx512f").features
    assert Target.parse(t) is t
    assert str(Target.parse("llvm -opt-level=1")) == "llvm -opt-level=1"


def test_target_parse_cuda():
    t = Target.parse("cuda -arch=sm_90")
    assert (t.kind, t.arch, t.vector_width) == ("cuda", "sm_90", 0)
    assert Target.parse("cuda").kind == "cuda"


@pytest.mark.parametrize("spec,match", [
    ("metal", "target: unknown target kind 'metal'"),
    ("", "target: empty target string"),
    ("llvm -mcpu", "option '-mcpu' in 'llvm -mcpu' has no value"),
    ("llvm -O3", "target: unknown option '-O3'"),
    ("llvm -opt-level=4", "bad optimisation level '4'.*0, 1, 2 or 3"),
    ("llvm -mattr=avx2", "malformed feature 'avx2'"),
    ("llvm -fast-math=1", "takes no value"),
    ("cuda -arch=90", "bad GPU architecture '90'"),
    ("cuda -mcpu=x", "unknown option '-mcpu=x'"),
])
def test_target_parse_errors(spec, match):
    with pytest.raises(TargetError, match=match):
        Target.parse(spec)


def test_target_refuses_a_feature_the_host_lacks():
    host = llvm.get_host_cpu_features()
    missing = next((f for f in ("avx512fp16", "amx-tile", "avx10.2") if not host.get(f)), None)
    if missing is None:
        pytest.skip("host has every probed feature")
    with pytest.raises(TargetError, match=f"feature '{missing}'.*not available"):
        Target.parse(f"llvm -mattr=+{missing}")


# ----------------------------------------------------------------------------- build
def test_build_primfunc_and_polytile_build():
    f = _axpy()
    for m in (polytile.targets.build(f), polytile.build(f, target="llvm -opt-level=1")):
        assert isinstance(m, LLVMModule)
        x, y = rand(7, "float32"), rand(7, "float32")
        z = poison(7, "float32")
        m(x, y, z, 2.0)
        np.testing.assert_allclose(z, x * 2 + y, rtol=1e-6)


def test_build_cuda_refuses_loops_outside_kernels():
    # the CUDA backend has its own tests (test_cuda_*.py); a CPU loop nest is not a kernel
    with pytest.raises(LoweringError, match="statement For 'for i in range.*lies outside "
                                            "every kernel"):
        polytile.targets.build(_axpy(), target="cuda -arch=sm_90")
    with pytest.raises(TargetError, match="options \\['compiler'\\] are not understood"):
        polytile.targets.build(_axpy(), target="llvm", compiler="nvcc")


def test_build_from_a_schedule():
    pytest.importorskip("polytile.schedule.pipeline")
    from polytile import te

    n = 37
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    m = polytile.build(s, [A, B], name="affine")
    a = rand(n, "float32")
    b = poison(n, "float32")
    m(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    assert m.name == "affine"


def test_codegen_returns_an_llvmlite_module_with_noalias_params():
    mod = codegen_llvm(_axpy(), Target.parse("llvm"))
    assert isinstance(mod, ir.Module)
    fn = mod.get_global("axpy")
    assert str(fn.ftype.return_type) == "i32"
    assert all("noalias" in a.attributes for a in fn.args[:3])


# ----------------------------------------------------------------------------- errors
def test_codegen_errors():
    A = buf("A", 4)
    i, ghost = var("i"), var("ghost")
    with pytest.raises(BuildError, match="variable 'ghost' is used but not defined"):
        build([A], loop(i, 4, st(A, i + ghost, Const("float32", 0.0))))
    with pytest.raises(BuildError, match="unknown intrinsic 'frobnicate'"):
        build([A], loop(i, 4, st(A, i, Call("float32", "frobnicate", (ld(A, i),)))))
    S = buf("S", 4, "float32", "shared")
    with pytest.raises(BuildError, match="parameter buffer 'S' has scope 'shared'"):
        build([S], loop(i, 4, st(S, i, Const("float32", 0.0))))
    T = buf("T", 4, "float32")
    with pytest.raises(BuildError, match="buffer 'T' is used outside its allocation"):
        build([A], loop(i, 4, st(T, i, Const("float32", 0.0))))
    from polytile.schedule.loop_ir import Load, Store

    with pytest.raises(InternalError, match="has 2 indices; expected exactly one"):
        build([A], Store(A, (c64(0), c64(1)), Const("float32", 0.0)))
    with pytest.raises(InternalError, match="has 2 indices"):
        build([A], st(A, 0, Load("float32", A, (c64(0), c64(1)))))
    n = var("n")
    from polytile.schedule.loop_ir import Allocate

    with pytest.raises(InternalError, match="loop 'j' has variable dtype int32 and step 1; "
                                            "expected an int64 loop variable"):
        build([A], loop(var("j", "int32"), 4, st(A, 0, Const("float32", 0.0))))
    stack = buf("tmp", (n,), "float32", "stack")
    with pytest.raises(InternalError, match="stack buffer 'tmp' has the non-constant shape"):
        build([A, n], Allocate(stack, st(A, 0, ld(stack, 0))))


# ----------------------------------------------------------------------------- wrapper
@pytest.fixture(scope="module")
def axpy():
    return LLVMModule(_axpy(), Target.parse("llvm"))


def _args():
    return [rand(7, "float32"), rand(7, "float32"), poison(7, "float32"), 1.5]


def test_wrapper_argument_count(axpy):
    with pytest.raises(TypeError, match=r"axpy: takes 4 arguments \(X, Y, Z, a\) but 3 "
                                        "were given"):
        axpy(*_args()[:3])


def test_wrapper_rejects_non_arrays_and_wrong_dtypes(axpy):
    x, y, z, a = _args()
    with pytest.raises(TypeError, match="argument 'X' is a list; expected a numpy.ndarray"):
        axpy(list(x), y, z, a)
    with pytest.raises(TypeError, match="argument 'Y' has dtype float64; expected dtype "
                                        "float32"):
        axpy(x, y.astype("float64"), z, a)


def test_wrapper_rejects_shape_layout_and_readonly(axpy):
    x, y, z, a = _args()
    with pytest.raises(ValueError, match=r"argument 'X' has shape \(8,\); expected shape "
                                         r"\(7,\)"):
        axpy(rand(8, "float32"), y, z, a)
    with pytest.raises(ValueError, match=r"argument 'X' has shape \(7, 1\)"):
        axpy(x.reshape(7, 1), y, z, a)
    strided = rand(14, "float32")[::2]
    with pytest.raises(ValueError, match="(?s)'X' is not C-contiguous.*hint: pass np.ascontiguousarray"):
        axpy(strided, y, z, a)
    z.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'Z' is read-only but the function "
                                         "writes it"):
        axpy(x, y, z, a)
    x.flags.writeable = False  # read-only inputs are fine
    z2 = poison(7, "float32")
    axpy(x, y, z2, a)
    np.testing.assert_allclose(z2, x * 1.5 + y, rtol=1e-6)


def test_wrapper_rejects_overlapping_output(axpy):
    x, y, z, a = _args()
    with pytest.raises(ValueError, match="arguments 'X' and 'Z' overlap in memory"):
        axpy(x, y, x, a)
    big = rand(10, "float32")
    with pytest.raises(ValueError, match="arguments 'Y' and 'Z' overlap"):
        axpy(x, big[:7], big[3:], a)
    # the same array for two inputs that are only read is allowed
    axpy(x, x, z, a)
    np.testing.assert_allclose(z, x * 1.5 + x, rtol=1e-6)


@pytest.mark.parametrize("dtype,good,bad,err,match", [
    ("int8", 127, 128, ValueError, r"'s' = 128 does not fit in int8.*\[-128, 127\]"),
    ("uint32", 0, -1, ValueError, "does not fit in uint32"),
    ("int64", np.int64(-5), 2.5, TypeError, "argument 's' is the float 2.5; expected an "
                                            "integer"),
    ("float32", 3, 1e39, ValueError, "overflows float32"),
    ("float16", 0.5, 70000.0, ValueError, "overflows float16"),
    ("bool", True, 2, TypeError, "expected a bool"),
    ("float64", np.float32(0.25), "1.0", TypeError, "argument 's' is a str"),
])
def test_scalar_params(dtype, good, bad, err, match):
    Y = buf("Y", 3, "float64")
    s = var("s", dtype)
    i = var("i")
    from polytile.te.expr import Cast

    m = build([Y, s], loop(i, 3, st(Y, i, Cast("float64", s))))
    y = poison(3, "float64")
    m(y, good)
    np.testing.assert_array_equal(y, float(np.array(good).astype(dtype)))
    with pytest.raises(err, match=match):
        m(y, bad)


def test_symbolic_shape_is_checked_against_the_scalar_argument():
    n = var("n")
    X = buf("X", (n, 3), "int32")
    i = var("i")
    m = build([X, n], loop(i, n * 3, st(X, i, ld(X, i) + 1)))
    x = np.zeros((5, 3), "int32")
    m(x, 5)
    assert (x == 1).all()
    with pytest.raises(ValueError, match=r"has shape \(5, 3\); expected shape \(4, 3\)"):
        m(x, 4)


# ----------------------------------------------------------------------------- sources
def test_get_source(axpy):
    raw = axpy.get_source("ll", optimized=False)
    opt = axpy.get_source("ll")
    assert 'define i32 @"axpy"' in raw and "define" in opt and raw != opt
    assert "noalias" in opt
    assert "axpy" in axpy.get_source("asm")
    with pytest.raises(ValueError, match="get_source: unknown format 'ptx'; expected 'll'"):
        axpy.get_source("ptx")


def test_opt_level_zero_keeps_the_code_unoptimised():
    f = _axpy()
    m = LLVMModule(f, Target.parse("llvm -opt-level=0"))
    assert "phi" in m.get_source("ll")
    x, y, z, a = _args()
    m(x, y, z, a)
    np.testing.assert_allclose(z, x * 1.5 + y, rtol=1e-6)


# ----------------------------------------------------------------------------- timing
def test_time_evaluator(axpy):
    r = axpy.time_evaluator(number=5, repeat=3)(*_args())
    assert isinstance(r, BenchmarkResult) and len(r.results) == 3
    assert all(t > 0 for t in r.results)
    arr = np.array(r.results)
    assert r.mean == pytest.approx(arr.mean()) and r.median == pytest.approx(np.median(arr))
    assert r.std == pytest.approx(arr.std()) and (r.min, r.max) == (arr.min(), arr.max())
    assert r.min <= r.mean <= r.max < 0.01


def test_time_evaluator_runs_one_warmup_then_number_times_repeat():
    C = buf("C", 1, "int64")
    m = build([C], st(C, 0, ld(C, 0) + 1))
    c = np.zeros(1, "int64")
    m.time_evaluator(number=3, repeat=4)(c)
    assert c[0] == 1 + 3 * 4


def test_time_evaluator_times_the_users_call(axpy):
    # the tuner, `polytile run` and time_evaluator time f(*arrays), checks included (the
    # definition of autotune/timing.py), never a bare ctypes call beside it
    calls = []
    real = axpy.__call__

    def counted(*args):
        calls.append(len(args))
        return real(*args)

    axpy.__call__ = counted
    try:
        axpy.time_evaluator(number=3, repeat=2)(*_args())
    finally:
        del axpy.__call__
    assert calls == [4] * 7  # warm-up + number * repeat


def test_time_evaluator_min_repeat_ms_grows_number(axpy):
    t0 = time.perf_counter()
    r = axpy.time_evaluator(number=1, repeat=2, min_repeat_ms=30)(*_args())
    elapsed = time.perf_counter() - t0
    assert elapsed >= 2 * 0.030
    assert r.mean < 0.005  # a mean per call, not the total of a repeat


def test_time_evaluator_checks_arguments(axpy):
    with pytest.raises(ValueError, match="time_evaluator:.*number >= 1"):
        axpy.time_evaluator(number=0)
    ev = axpy.time_evaluator()
    with pytest.raises(TypeError, match="takes 4 arguments"):
        ev(1)


def test_num_threads_roundtrip_and_errors():
    old = get_num_threads()
    try:
        set_num_threads(1)
        assert get_num_threads() == 1
        set_num_threads(2)
        assert get_num_threads() == 2
    finally:
        set_num_threads(old)
    with pytest.raises(ValueError, match="set_num_threads: got 0; expected a positive"):
        set_num_threads(0)


def test_status_of_unknown_code_raises(axpy):
    with pytest.raises(RuntimeError, match="unknown status 7"):
        axpy._check_status(7)


def test_module_keeps_its_engine_alive():
    def make():
        y = buf("Y", 4, "int64")
        return build([y], seq(*[st(y, k, c64(k * k)) for k in range(4)]))

    m = make()
    import gc

    gc.collect()
    y = poison(4, "int64")
    m(y)
    np.testing.assert_array_equal(y, [0, 1, 4, 9])


def test_repeated_calls_skip_the_checks_only_for_the_same_unchanged_arrays():
    # the checks of the last call are reused when the same arrays come back unchanged (a
    # 64^3 matmul called directly spent 17 of its 24 us checking); any change is checked
    from polytile import te

    n = 37
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    f = polytile.build(s, [A, B], target="llvm")
    a, b = rand(n, "float32"), poison(n, "float32")
    for _ in range(3):
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    a[:] = a[::-1] + 3.0  # new values, same array: still computed
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
    b.flags.writeable = False
    with pytest.raises(ValueError, match="read-only|writeable"):
        f(a, b)
    b.flags.writeable = True
    f(a, b)
    b.shape = (1, n)  # reshaped in place
    with pytest.raises(ValueError, match="shape"):
        f(a, b)
    b.shape = (n,)
    with pytest.raises(TypeError, match="dtype"):
        f(a.astype("float64"), b)
    with pytest.raises(ValueError, match="overlap"):
        f(b, b)
    f(a, b)
    a2 = a.copy()
    del a  # a new array (maybe at the old address) is checked again
    b2 = poison(n, "float32")
    f(a2, b2)
    np.testing.assert_allclose(b2, a2 * 2 + 1, rtol=1e-6)
    with pytest.raises(TypeError, match="ndarray"):
        f(list(a2), b2)
    f(a2, b2)
    with pytest.raises(ValueError, match="contiguous"):
        f(a2, poison(2 * n, "float32")[::2])  # a strided view of the right shape
    f(a2, b2)
    with warnings.catch_warnings():  # dtype set in place: deprecated, still possible
        warnings.simplefilter("ignore")
        b2.dtype = np.int32
    with pytest.raises(TypeError, match="dtype"):
        f(a2, b2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b2.dtype = np.float32
    f(a2, b2)
    np.testing.assert_allclose(b2, a2 * 2 + 1, rtol=1e-6)
