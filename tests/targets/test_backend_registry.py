"""The backend registry: built-in kinds as data, a backend registered from outside the
package (``toy_c_backend``: C99 through the system C compiler, loaded with ctypes), device
limits flowing from the target into lowering, the phase table, the Module protocol."""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
import toy_c_backend as toy

import polytile
from polytile import te
from polytile.backend import (BUILTIN, Backend, DeviceLimits, get_backend, register_backend,
                              registered_kinds, unregister_backend)
from polytile.errors import ScheduleError, TargetError
from polytile.schedule.loop_ir import Allocate, walk_stmts
from polytile.schedule.pipeline import PHASE_NAMES, describe
from polytile.targets import Module, Target

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture
def toy_backends():
    toy.register()
    toy.PASS_LOG.clear()
    yield
    unregister_backend("ctoy")
    unregister_backend("toygpu")


def matmul(m, n, k):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    T = te.compute((m, k), lambda i, j: A[i, j] * 2.0, name="T")
    C = te.compute((m, n), lambda i, j: te.sum(T[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(io, jo, r, ii, ji)
    s[T].compute_at(s[C], io)
    s[C].vectorize(ji)
    return s, [A, B, C]


# --------------------------------------------------------------------------- built-ins
def test_builtin_kinds_are_registered_data():
    assert registered_kinds()[:3] == ("llvm", "cuda", "hip") == tuple(BUILTIN)
    llvm, cuda = get_backend("llvm"), get_backend("cuda")
    assert not llvm.is_gpu and llvm.tunable
    assert [n for n, _ in llvm.passes(Target.parse("llvm"))] == ["insert_prefetches"]
    assert cuda.is_gpu and cuda.tunable  # timed in the GPU runner (autotune/gpu_runner.py)
    assert [n for n, _ in cuda.passes(Target.parse("cuda"))] == [
        "warp_reduce", "elide_barriers", "narrow_indices", "group_guards"]
    lim = Target.parse("cuda").limits
    assert (lim.max_threads_per_block, lim.warp_size, lim.shared_bytes_per_block) == \
        (1024, 32, 48 * 1024)
    assert Target.parse("llvm").limits.vector_bytes == Target.parse("llvm").vector_width > 0
    assert Target.parse("cuda").is_gpu and not Target.parse("llvm").is_gpu


def test_registration_errors():
    with pytest.raises(TargetError, match="kind 'llvm' is already registered"):
        register_backend(type("Again", (Backend,), {"kind": "llvm"})())
    with pytest.raises(TargetError, match="expected a polytile.backend.Backend"):
        register_backend(object())
    with pytest.raises(TargetError, match="kind '9x'"):
        register_backend(type("Bad", (Backend,), {"kind": "9x"})())
    with pytest.raises(TargetError, match="kind 'llvm' is built in"):
        unregister_backend("llvm")
    with pytest.raises(TargetError, match="unknown target kind 'nope'; expected one of "
                       "'llvm', 'cuda'"):
        get_backend("nope")


# --------------------------------------------------------------------------- a toy backend
@needs_cc
def test_backend_registered_from_outside_runs_a_kernel(toy_backends):
    assert registered_kinds()[-2:] == ("ctoy", "toygpu")
    t = Target.parse("ctoy -O=1")
    assert t.kind == "ctoy" and t.attr("O") == "1" and str(t) == "ctoy -O=1"
    with pytest.raises(TargetError, match="unknown option '-mcpu=x' in 'ctoy -mcpu=x'"):
        Target.parse("ctoy -mcpu=x")
    s, args = matmul(13, 19, 7)
    f = polytile.build(s, args, target="ctoy -O=1")
    assert isinstance(f, Module) and f.entry_name == "main"
    (ran,) = toy.PASS_LOG  # the backend's own pass ran, once, on the flattened function
    assert ran[0] == "main" and ran[1] >= 3  # T, C's init and update (and partial tiles)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (13, 7)).astype("float32")
    b = rng.uniform(-1, 1, (7, 19)).astype("float32")
    c = np.full((13, 19), np.nan, "float32")
    f(a, b, c)
    want = (2.0 * a.astype("float64")) @ b.astype("float64")
    assert np.abs(c - want).max() <= 1e-5 * np.abs(want).max()
    with pytest.raises(TypeError, match="argument 'B' has dtype float64"):
        f(a, b.astype("float64"), c)
    r = f.time_evaluator(number=2, repeat=3)(a, b, c)  # the shared timing loop
    assert len(r.results) == 3 and all(x > 0 for x in r.results)
    assert "int main(" in f.get_source()


@needs_cc
def test_toy_limits_decide_allocation(toy_backends, tmp_path):
    s, args = matmul(13, 19, 7)
    scopes = {t: {x.buffer.scope for x in walk_stmts(polytile.lower(s, args, target=t).body)
                  if isinstance(x, Allocate)} for t in ("llvm", "ctoy")}
    assert scopes == {"llvm": {"stack"}, "ctoy": {"heap"}}  # ctoy has no stack budget
    f = polytile.build(s, args, target="ctoy")
    path = f.export_library(tmp_path / "k.c")
    assert open(path).read() == f.get_source()
    with pytest.raises(ValueError, match=r"export_library: cannot write 'k.so'.*expected a file "
                       r"name ending in \.c"):
        f.export_library(tmp_path / "k.so")


def test_device_limits_come_from_the_target(toy_backends):
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=512)
    s[B].bind(bo, te.thread_axis("blockIdx.x"))
    s[B].bind(bi, te.thread_axis("threadIdx.x"))
    assert "block=[512, 1, 1]" in str(polytile.lower(s, [A, B], target="cuda"))
    with pytest.raises(ScheduleError, match="threadIdx.x of the kernel of stage 'B' has "
                       "extent 512; at most 256"):
        polytile.lower(s, [A, B], target="toygpu")
    with pytest.raises(ScheduleError, match="build: target 'ctoy' runs on the CPU, but the "
                       "schedule binds loops to GPU indices; build for target 'cuda'"):
        polytile.build(s, [A, B], target="ctoy")


def test_toy_gpu_shared_memory_limit(toy_backends):
    n = 64
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    i, j = B.op.axis
    s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(j, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], i)
    polytile.lower(s, [A, B], target="toygpu")  # 256 bytes of shared memory per block


# --------------------------------------------------------------------------- the pipeline
def test_phase_table_and_dump(capsys):
    assert PHASE_NAMES[0] == "inputs" and PHASE_NAMES[-1] == "backend_passes"
    text = describe("cuda")
    assert "narrow_indices" in text and "allocation" in text
    s, args = matmul(5, 6, 3)
    readable = polytile.lower(s, args, dump=["ast", "allocation"])
    out = capsys.readouterr().out
    assert "# main: after ast" in out and "# main: after allocation" in out
    assert "after model" not in out
    flat = polytile.lower(s, args, stop_after=None)
    assert str(readable) != str(flat)  # flattened: one index per access
    with pytest.raises(ValueError, match="stop_after='model'; expected a phase"):
        polytile.lower(s, args, stop_after="model")
    with pytest.raises(ValueError, match="unknown phase 'nope' in dump"):
        polytile.lower(s, args, dump="nope")


def test_schedule_lower_is_the_function_after_any_import():
    import polytile.schedule
    import polytile.schedule.pipeline  # noqa: F401 - the module that used to shadow it

    s, args = matmul(5, 6, 3)
    assert callable(polytile.schedule.lower)
    assert "for" in str(polytile.schedule.lower(s, args))


# --------------------------------------------------------------------------- Module
@needs_cc
def test_llvm_export_library_is_a_loadable_shared_object(tmp_path):
    s, args = matmul(13, 19, 7)
    f = polytile.build(s, args)
    so = f.export_library(tmp_path / "mm.so")
    lib = ctypes.CDLL(so)
    fn = getattr(lib, f.entry_name)
    fn.restype = ctypes.c_int32
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (13, 7)).astype("float32")
    b = rng.uniform(-1, 1, (7, 19)).astype("float32")
    c = np.full((13, 19), np.nan, "float32")
    assert fn(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data),
              ctypes.c_void_p(c.ctypes.data)) == 0
    ref = np.full_like(c, np.nan)
    f(a, b, ref)
    assert np.array_equal(c, ref)
    assert "define" in open(f.export_library(tmp_path / "mm.ll")).read()
    with pytest.raises(ValueError, match="cannot write 'mm.cubin'"):
        f.export_library(tmp_path / "mm.cubin")


def test_limits_table_fields_are_documented():
    doc = DeviceLimits.__doc__
    for name in DeviceLimits.__slots__:
        assert name in doc, name
