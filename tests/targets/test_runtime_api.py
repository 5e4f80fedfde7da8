"""The runtime API as TVM users call it: ``time_evaluator(f.entry_name, dev, ...)``,
``f[name]``, devices and their attributes, ``NDArray.copyto``, ``polytile.target.Target``.
CUDA devices and arrays run on the emulated driver (``cuda_emulator``) and, where there is
one, on a GPU (``gpu`` marker).
"""

from __future__ import annotations


import numpy as np
import pytest
from helpers import poison, rand

import polytile
from polytile import te
from polytile.backend import Target as BackendTarget
from polytile.errors import DeviceNotFoundError, TargetError
from polytile.targets.cuda import runtime as cuda_runtime


@pytest.fixture(scope="module")
def axpy():
    A = te.placeholder((17,), name="A")
    B = te.placeholder((17,), name="B")
    C = te.compute((17,), lambda i: A[i] * 3.0 + B[i], name="C")
    return polytile.build(te.create_schedule(C.op), [A, B, C], "llvm", name="axpy")


def _args():
    return rand((17,), seed=1), rand((17,), seed=2), poison((17,), "float32")


# ------------------------------------------------------------------ time_evaluator
def test_time_evaluator_tvm_form(axpy):
    a, b, c = _args()
    ev = axpy.time_evaluator(axpy.entry_name, polytile.cpu(0), number=3, repeat=4,
                             min_repeat_ms=0)
    r = ev(a, b, c)
    assert len(r.results) == 4 and all(t > 0 for t in r.results)
    assert r.min <= r.median <= r.max and r.mean > 0
    np.testing.assert_allclose(c, a * 3.0 + b, rtol=1e-6)


def test_time_evaluator_tvm_form_positional_and_keywords(axpy):
    a, b, c = _args()
    assert len(axpy.time_evaluator("axpy", "cpu", 2, 3)(a, b, c).results) == 3
    assert len(axpy.time_evaluator(func_name="axpy", dev=polytile.cpu(), repeat=2)(
        a, b, c).results) == 2
    # the old polytile form, positional and by keyword
    assert len(axpy.time_evaluator(2, 5, 0)(a, b, c).results) == 5
    assert len(axpy.time_evaluator(number=1, repeat=2)(a, b, c).results) == 2


def test_time_evaluator_min_repeat_ms_in_tvm_form(axpy):
    r = axpy.time_evaluator(axpy.entry_name, polytile.cpu(), number=1, repeat=2,
                            min_repeat_ms=5)(*_args())
    assert len(r.results) == 2 and r.mean > 0


def test_time_evaluator_tvm_form_errors(axpy):
    with pytest.raises(KeyError, match=r"no function named 'main'; expected one of \['axpy'\]"):
        axpy.time_evaluator("main", polytile.cpu())
    with pytest.raises(ValueError, match="device 'cuda' is not the one 'axpy' runs on; "
                                         "expected cpu:0"):
        axpy.time_evaluator("axpy", "cuda")
    with pytest.raises(TypeError, match="'number' given twice"):
        axpy.time_evaluator("axpy", polytile.cpu(), 3, number=3)
    with pytest.raises(TypeError, match="6 positional arguments; expected at most 5"):
        axpy.time_evaluator("axpy", polytile.cpu(), 1, 1, 0, 7)
    with pytest.raises(TypeError, match="4 positional arguments; expected at most 3"):
        axpy.time_evaluator(1, 1, 0, 7)
    with pytest.raises(ValueError):
        axpy.time_evaluator("axpy", polytile.cpu(), number=0)


# ------------------------------------------------------------------ mod[name]
def test_getitem_and_entry_name(axpy):
    assert axpy.entry_name == "axpy"
    f = axpy[axpy.entry_name]
    a, b, c = _args()
    f(a, b, c)
    np.testing.assert_allclose(c, a * 3.0 + b, rtol=1e-6)
    with pytest.raises(KeyError, match=r"LLVMModule\['default'\]: no function named "
                                       r"'default'; expected one of \['axpy'\]"):
        axpy["default"]
    assert axpy.get_function("axpy") is axpy
    with pytest.raises(KeyError, match="no function named 'other'"):
        axpy.get_function("other")


def test_imported_modules(axpy, cuda_build):
    # TVM's reduction tutorial: fcuda.imported_modules[0].get_source() is the CUDA source
    assert axpy.imported_modules == []
    A = te.placeholder((70,), name="A")
    B = te.compute((70,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    fcuda = cuda_build(s, [A, B])
    src = fcuda.imported_modules[0].get_source()
    assert "__global__" in src and src == fcuda.get_source()


# ------------------------------------------------------------------ devices on the host
def test_cpu_device_attributes():
    dev = polytile.cpu(0)
    assert dev.exist is True
    assert dev.available_global_memory > 0
    assert dev.total_global_memory >= dev.available_global_memory
    assert dev.compute_version is None and dev.max_threads_per_block is None
    assert dev.warp_size is None and dev.device_name == "cpu"
    assert dev.multi_processor_count >= 1
    dev.sync()  # nothing pending on the host


def test_cuda_device_without_driver_says_so(monkeypatch):
    saved = dict(cuda_runtime._state)
    cuda_runtime._state.clear()
    cuda_runtime._state["driver"] = None  # no cuda-python
    try:
        dev = polytile.cuda(0)
        assert dev.exist is False
        with pytest.raises(DeviceNotFoundError, match="no CUDA device was found"):
            dev.compute_version
        with pytest.raises(DeviceNotFoundError):
            dev.sync()
    finally:
        cuda_runtime._state.clear()
        cuda_runtime._state.update(saved)


# ------------------------------------------------------------------ copyfrom on the host
def test_cpu_array_copyfrom():
    # TVM's NDArray.copyfrom (the GPU NDArray had it, the host array did not)
    x = polytile.nd.array(np.zeros((3, 5), "float32"))
    src = rand((3, 5), seed=4).astype("float64")
    assert x.copyfrom(src) is x
    np.testing.assert_array_equal(x.numpy(), src.astype("float32"))
    with pytest.raises(ValueError, match=r"NDArray.copyfrom: source has shape \(5, 3\); "
                                         r"expected shape \(3, 5\)"):
        x.copyfrom(np.zeros((5, 3)))


# ------------------------------------------------------------------ copyto on the host
def test_cpu_array_copyto():
    x = polytile.nd.array(rand((3, 5), seed=3))
    assert x.shape == (3, 5) and x.dtype == np.float32 and x.device == polytile.cpu()
    y = x.copyto(polytile.cpu())
    assert isinstance(y, polytile.nd.CPUArray) and y is not x
    np.testing.assert_array_equal(y, x)
    z = np.full((3, 5), np.nan, "float32")
    assert x.copyto(z) is z
    np.testing.assert_array_equal(z, x)
    with pytest.raises(ValueError, match=r"target has shape \(5, 3\) and dtype float32; "
                                         r"expected shape \(3, 5\)"):
        x.copyto(np.zeros((5, 3), "float32"))
    with pytest.raises(ValueError, match="dtype float64; expected shape"):
        x.copyto(np.zeros((3, 5), "float64"))
    ro = np.zeros((3, 5), "float32")
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        x.copyto(ro)
    with pytest.raises(TypeError, match="target is a list"):
        x.copyto([1, 2])
    with pytest.raises(TargetError, match="device 'opencl' is not supported"):
        x.copyto("opencl")


# ------------------------------------------------------------------ CUDA devices and arrays
def test_cuda_device_attributes(cuda_device):
    dev = polytile.cuda(0)
    assert dev.exist is True
    major, minor = map(int, dev.compute_version.split("."))
    assert major >= 5 and minor >= 0
    assert dev.max_threads_per_block == 1024 and dev.warp_size == 32
    assert 0 < dev.available_global_memory <= dev.total_global_memory
    assert dev.multi_processor_count >= 1 and dev.max_shared_memory_per_block >= 48 * 1024
    assert isinstance(dev.device_name, str) and dev.device_name
    dev.sync()
    if cuda_device == "emulated":
        assert dev.device_name == "Emulated H100" and dev.compute_version == "9.0"
        before = dev.available_global_memory
        x = polytile.nd.empty((1024,), "float32", device="cuda")
        assert dev.available_global_memory == before - 4096
        del x


def test_cuda_copyto(cuda_device):
    a = rand((4, 7), seed=5)
    x = polytile.nd.array(a, device="cuda")
    assert x.shape == (4, 7) and x.dtype == np.float32 and x.device == polytile.cuda(0)
    h = x.copyto(polytile.cpu())  # device -> host
    assert isinstance(h, polytile.nd.CPUArray)
    np.testing.assert_array_equal(h, a)
    y = x.copyto(polytile.cuda(0))  # device -> new device array
    assert isinstance(y, polytile.nd.NDArray) and y.data_ptr != x.data_ptr
    np.testing.assert_array_equal(y.numpy(), a)
    z = polytile.nd.array(poison((4, 7), "float32"), device="cuda")
    assert x.copyto(z) is z  # device -> existing device array
    np.testing.assert_array_equal(z.numpy(), a)
    out = np.zeros((4, 7), "float32")
    assert x.copyto(out) is out  # device -> existing host array
    np.testing.assert_array_equal(out, a)
    w = polytile.nd.empty((4, 7), "float32", device="cuda")
    polytile.nd.array(a * 2).copyto(w)  # host -> existing device array
    np.testing.assert_array_equal(w.numpy(), a * 2)
    with pytest.raises(ValueError, match=r"target has shape \(7, 4\)"):
        x.copyto(polytile.nd.empty((7, 4), "float32", device="cuda"))
    with pytest.raises(ValueError, match="dtype int32"):
        x.copyto(np.zeros((4, 7), "int32"))


def test_cuda_time_evaluator_tvm_form(cuda_device):
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = polytile.build(s, [A, B], "cuda", name="inc")
    assert f["inc"] is f and f.device == polytile.cuda(0)
    a = rand((37,), seed=6)
    x = polytile.nd.array(a, device="cuda")
    y = polytile.nd.array(poison((37,), "float32"), device="cuda")
    r = f.time_evaluator(f.entry_name, polytile.cuda(0), number=2, repeat=3)(x, y)
    assert len(r.results) == 3
    np.testing.assert_allclose(y.numpy(), a + 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="expected cuda:0"):
        f.time_evaluator(f.entry_name, polytile.cpu())


# ------------------------------------------------------------------ polytile.target
def test_target_by_tvm_name():
    from polytile.target import Target

    t = Target("llvm -mcpu=skylake-avx512")
    assert isinstance(t, BackendTarget) and isinstance(t, Target)
    assert not isinstance("llvm", Target)
    assert t.kind == "llvm" and t.cpu == "skylake-avx512" and t.has_feature("avx512f")
    assert Target(t) is t and str(Target("llvm")) == "llvm"
    assert Target("cuda -arch=sm_80", host="llvm").arch == "sm_80"
    assert polytile.target.cuda("sm_90").arch == "sm_90"
    assert polytile.target.llvm("znver4").cpu == "znver4"
    assert {"llvm", "cuda"} <= set(Target.list_kinds())
    with pytest.raises(TargetError, match="unknown target kind 'metal'"):
        Target("metal")
    with pytest.raises(TargetError, match="host target 'cuda'; expected an 'llvm' host"):
        Target("cuda", host="cuda")


def test_target_object_builds():
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: A[i] * A[i], name="B")
    f = polytile.build(te.create_schedule(B.op), [A, B],
                       target=polytile.target.Target("llvm -opt-level=2"))
    a, b = rand((9,), seed=7), poison((9,), "float32")
    f(a, b)
    np.testing.assert_allclose(b, a * a, rtol=1e-6)
