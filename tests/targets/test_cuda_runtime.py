"""CUDA runtime: device arrays, DLPack, argument checks, launching and timing.

Tests taking the ``build`` fixture run twice (``cuda_device`` of ``tests/conftest.py``):
on CUDA device 0 (marked ``gpu``, skipped without a GPU) and on the host emulation of the
driver of ``cuda_emulator`` (the CUDA C compiled by g++ for the host), which runs the
runtime's whole code path without a GPU. They run the hand-written kernels of
``cuda_ir_helpers`` and compare with numpy. Tests marked ``gpu`` only need the real thing
(torch, NVRTC, memory). The other tests check what needs no device: DLPack capsules
(against numpy as the other side), argument validation through fake device arrays, device
names, and the errors raised on a machine without a GPU.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from cuda_ir_helpers import all_cases, case_axpy, case_big_shared, case_two_kernels, case_vadd
from helpers import poison

import polytile
from polytile.errors import DeviceError, DeviceNotFoundError, TargetError
from polytile.targets.cuda import compile as cc
from polytile.targets.gpu import dlpack
from polytile.targets.cuda import runtime
from polytile.targets.cuda.runtime import CUDAModule, device_count
from polytile.targets.runtime_support import BenchmarkResult, expected_shape
from polytile.targets import Target
from polytile.te.expr import Var

CASES = all_cases()


def _build(func, tmp_path, target="cuda", **kw):
    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    return CUDAModule(func, Target.parse(target), cache_dir=tmp_path, **kw)


@pytest.fixture
def build(cuda_device, tmp_path):
    """``build(func, target="cuda")``: a CUDAModule of a lowered ``func`` on the device of
    ``cuda_device`` (``tests/conftest.py``); ``build.emulated`` tells which."""

    def on(func, target="cuda"):
        if cuda_device == "gpu":
            return _build(func, tmp_path, target=target)
        return CUDAModule(func, Target.parse(target))

    on.emulated = cuda_device == "emulated"
    return on


def run_case(case, build, seed=0):
    """Run ``case`` with poisoned outputs; return (outputs, references)."""
    m = build(case.func)
    inputs = case.inputs(np.random.default_rng(seed))
    it = iter(inputs)
    given = {p: next(it) for p in case.func.params if p.name not in case.outputs}
    scalars = {p: v for p, v in given.items() if isinstance(p, Var)}
    args, outs = [], []
    for p in case.func.params:
        if p.name in case.outputs:
            o = polytile.nd.array(poison(expected_shape(p, scalars), p.dtype), device="cuda")
            outs.append(o)
            args.append(o)
        else:
            x = given[p]
            args.append(polytile.nd.array(x, device="cuda") if isinstance(x, np.ndarray) else x)
    m(*args)
    return [o.numpy() for o in outs], case.reference(*inputs)


def assert_close(out, ref, rtol, name=""):
    ref = np.asarray(ref)
    assert out.shape == ref.shape and out.dtype == ref.dtype, name
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out.astype("float64"), ref.astype("float64"), rtol=rtol,
                                   atol=rtol, equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(out, ref, err_msg=name)


# ============================================================================ GPU tests
@pytest.mark.parametrize("name", sorted(CASES))
def test_case_matches_numpy(name, build):
    case = CASES[name]
    outs, refs = run_case(case, build)
    for o, r, oname in zip(outs, refs, case.outputs):
        assert_close(o, r, case.rtol, f"{name}: {oname}")


@pytest.mark.gpu
@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_both_compilers_give_working_cubins(compiler, tmp_path):
    if compiler == "nvrtc" and cc.nvrtc_version() is None:
        pytest.skip("NVRTC not available")
    if compiler == "nvcc" and cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    outs, refs = run_case(CASES["transpose"], lambda f: _build(f, tmp_path, compiler=compiler))
    assert_close(outs[0], refs[0], 0)


@pytest.mark.gpu
def test_default_arch_is_the_device_arch(tmp_path):
    from polytile.targets.cuda.runtime import device_compute_capability

    major, minor = device_compute_capability()
    assert cc.default_arch() == f"sm_{major}{minor}"
    m = _build(case_vadd().func, tmp_path)
    assert m.arch == cc.default_arch()


def test_fast_math_runs(build):
    case = CASES["math_float32"]
    m = build(case.func, "cuda -fast-math")
    p, s = case.inputs(np.random.default_rng(0))
    out = polytile.nd.empty(case.func.params[2].shape, "float32", device="cuda")
    m(polytile.nd.array(p, device="cuda"), polytile.nd.array(s, device="cuda"), out)
    ref = case.reference(p, s)[0]
    np.testing.assert_allclose(out.numpy()[:7], ref[:7], rtol=2e-3, atol=2e-3,
                               equal_nan=True)  # exp .. rsqrt of positive inputs


def test_nd_array_round_trip(build):
    for dtype in ("float32", "float64", "float16", "int8", "uint16", "int32", "int64",
                  "bool"):
        x = (np.arange(12).reshape(3, 4) % 3 == 1) if dtype == "bool" else \
            (np.arange(12).reshape(3, 4) - 5).astype(dtype)
        a = polytile.nd.array(x, device="cuda")
        assert a.shape == (3, 4) and a.dtype == np.dtype(dtype) and str(a.device) == "cuda:0"
        assert a.ndim == 2 and a.size == 12 and a.nbytes == x.nbytes
        y = a.numpy()
        assert y.dtype == x.dtype and np.array_equal(y, x)
    e = polytile.nd.empty((0, 5), "float32", device="cuda")
    assert e.numpy().shape == (0, 5)
    b = polytile.nd.empty(7, "int32", device="cuda:0").copyfrom(np.arange(7))
    assert np.array_equal(np.asarray(b), np.arange(7))
    assert np.array_equal(polytile.nd.array(b, device="cuda").numpy(), np.arange(7))  # a copy of a copy
    with pytest.raises(ValueError, match="copyfrom: source has shape"):
        b.copyfrom(np.zeros(3))
    with pytest.raises(TypeError, match="unsupported dtype"):
        polytile.nd.array(np.zeros(3, "complex64"), device="cuda")
    cai = b.__cuda_array_interface__
    assert cai["data"] == (b.data_ptr, False) and cai["shape"] == (7,)
    assert b.__dlpack_device__() == (dlpack.KDL_CUDA, 0)


@pytest.mark.gpu
def test_nd_array_memory_is_freed():
    from polytile.targets.cuda.runtime import check, context

    st = context()
    free0, _ = check(st["driver"].cuMemGetInfo(), "cuMemGetInfo")
    for _ in range(20):
        a = polytile.nd.empty((64, 1024, 1024), "float32", device="cuda")  # 256 MiB each
        del a
    gc.collect()
    free1, _ = check(st["driver"].cuMemGetInfo(), "cuMemGetInfo")
    assert free1 > free0 - 300 * 2**20


def test_scalars_symbolic_shapes_and_workspace(build):
    case = case_axpy()
    m = build(case.func)
    g = np.random.default_rng(1)
    for n in (1, 31, 1024):
        x, y = g.standard_normal(n, "float32"), g.standard_normal(n, "float32")
        z = polytile.nd.empty(n, "float32", device="cuda")
        m(polytile.nd.array(x, device="cuda"), polytile.nd.array(y, device="cuda"), z, np.float32(0.5), n)
        np.testing.assert_allclose(z.numpy(), 0.5 * x + y, rtol=1e-6)
    with pytest.raises(ValueError, match=r"argument 'Z' has shape \(31,\); expected shape "
                       r"\(30,\)"):
        m(polytile.nd.array(x[:30], device="cuda"), polytile.nd.array(y[:30], device="cuda"), polytile.nd.empty(31, device="cuda"), 1.0,
          30)
    two = build(case_two_kernels().func)
    a = polytile.nd.array(np.arange(300, dtype="float32"), device="cuda")
    b = polytile.nd.empty(300, device="cuda")
    for _ in range(3):  # the workspace is allocated once and reused
        two(a, b)
        np.testing.assert_allclose(b.numpy(), np.arange(300) * 2 + 1)
    assert len(two._workspace) == 1
    if build.emulated:
        drv = runtime._state["driver"]
        before = getattr(drv, "unloaded", 0)
        del m
        gc.collect()
        assert drv.unloaded == before + 1  # a collected module unloads its cubin
        launches = drv.launches[-2:]
        assert launches == [("scale_kernel0", (3, 1, 1), (128, 1, 1), 0),
                            ("shift_kernel1", (3, 1, 1), (128, 1, 1), 0)]


def test_argument_validation_on_the_device(build):
    m = build(case_vadd().func)
    a, b, c = (polytile.nd.array(np.ones(1000, "float32"), device="cuda") for _ in range(3))
    with pytest.raises(TypeError, match=r"(?s)argument 'A' is a numpy.ndarray \(host memory\)"
                       ".*polytile.nd.array"):
        m(np.ones(1000, "float32"), b, c)
    with pytest.raises(TypeError, match="argument 'B' has dtype float64; expected dtype "
                       "float32"):
        m(a, polytile.nd.array(np.ones(1000), device="cuda"), c)
    with pytest.raises(ValueError, match=r"argument 'C' has shape \(999,\)"):
        m(a, b, polytile.nd.empty(999, device="cuda"))
    with pytest.raises(ValueError, match="arguments 'A' and 'C' overlap in memory"):
        m(a, b, a)
    m(a, a, c)  # two read-only arguments may alias
    with pytest.raises(TypeError, match=r"takes 3 arguments \(A, B, C\) but 2 were given"):
        m(a, b)
    with pytest.raises(TypeError, match="argument 'A' is a list"):
        m([1.0], b, c)

    class CAI:  # numba/cupy style, over the memory of an NDArray
        def __init__(self, base, **changes):
            self.base = base
            self.__cuda_array_interface__ = {**base.__cuda_array_interface__, **changes}

    c.copyfrom(np.zeros(1000))
    m(CAI(a), CAI(b), CAI(c))
    np.testing.assert_array_equal(c.numpy(), 2)
    with pytest.raises(ValueError, match="argument 'C' is read-only but the function writes"):
        m(a, b, CAI(c, data=(c.data_ptr, True)))
    m(CAI(a, data=(a.data_ptr, True)), b, c)  # a read-only input is fine
    with pytest.raises(ValueError, match="argument 'B' is not C-contiguous"):
        m(a, CAI(b, shape=(1000,), strides=(8,)), c)


@pytest.mark.gpu
def test_torch_interop(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    m = _build(case_vadd().func, tmp_path)
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    z = torch.empty(1000, device="cuda")
    m(x, y, z)  # torch tensors in and out, no copies
    torch.testing.assert_close(z, x + y)
    # mixed with polytile arrays, and an NDArray seen by torch without a copy
    nz = polytile.nd.empty(1000, device="cuda")
    m(x, y, nz)
    t = torch.from_dlpack(nz)
    assert t.data_ptr() == nz.data_ptr and t.device.type == "cuda"
    torch.testing.assert_close(t, x + y)
    m(y, y, nz)  # the kernel writes memory torch is viewing
    torch.testing.assert_close(t, y + y)
    with pytest.raises(ValueError, match="'C' is not C-contiguous"):
        m(x, y, torch.empty(2000, device="cuda")[::2])
    with pytest.raises(TypeError, match="argument 'A' .* is on cpu:0"):
        m(torch.randn(1000), y, z)
    with pytest.raises(TypeError, match="argument 'B' has dtype float16"):
        m(x, y.half(), z)
    w = torch.randn(1000, device="cuda", requires_grad=True)
    with pytest.raises(TypeError, match="could not be exported through DLPack"):
        m(w, y, z)
    # a bare __cuda_array_interface__ object (numba/cupy style)
    class CAI:
        def __init__(self, t):
            self.t = t
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    m(CAI(x), CAI(y), CAI(z))
    torch.testing.assert_close(z, x + y)


def test_time_evaluator_uses_cuda_events(build):
    m = build(case_vadd().func)
    a, b, c = (polytile.nd.array(np.ones(1000, "float32"), device="cuda") for _ in range(3))
    limit = 1.0 if build.emulated else 0.01  # seconds per call (emulated blocks are slow)
    r = m.time_evaluator(number=5, repeat=3)(a, b, c)
    assert isinstance(r, BenchmarkResult) and len(r.results) == 3
    assert all(0 < t < limit for t in r.results)
    one = r.min
    r = m.time_evaluator(number=1, repeat=2, min_repeat_ms=max(5, 3e3 * one))(a, b, c)
    assert r.mean < 2 * max(one, 1e-3)  # a mean per call, not the total of a repeat
    with pytest.raises(ValueError, match="time_evaluator:.*number >= 1"):
        m.time_evaluator(number=0)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        m.time_evaluator()(a)


def test_dynamic_shared_memory_limits_are_reported_with_the_kernel(build):
    outs, refs = run_case(case_big_shared(), build)  # 80 KB of dynamic shared memory
    assert_close(outs[0], refs[0], 0)
    if build.emulated:
        assert runtime._state["driver"].launches[-1][3] == 80000
    m = build(case_big_shared(n=80000).func)  # 320 KB: more than any GPU has
    a, b = polytile.nd.empty(80000, device="cuda"), polytile.nd.empty(80000, device="cuda")
    with pytest.raises(DeviceError, match="dynamic shared memory in kernel 'reverse_kernel0' "
                       "of function 'reverse' failed with CUDA_ERROR"):
        m(a, b)


# ============================================================================ no device needed
class FakeCUDAArray:
    """A host array posing as a CUDA one through DLPack (the runtime checks what it is
    told; no driver call happens before the launch)."""

    def __init__(self, a: np.ndarray, device_type=dlpack.KDL_CUDA):
        self.a, self.device_type = a, device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        # CUDA producers are told the consumer's stream: the legacy default one
        assert stream == (1 if self.device_type == dlpack.KDL_CUDA else None)
        return dlpack.make_capsule(self.a.ctypes.data, self.a.shape, self.a.dtype.name,
                                   self.device_type, 0, self.a)


def test_argument_validation_without_a_device(tmp_path):
    m = _build(case_axpy().func, tmp_path)

    def fake(n, dtype="float32"):
        return FakeCUDAArray(np.zeros(n, dtype))

    x, y, z = fake(10), fake(10), fake(10)
    m._convert((x, y, z, 1.0, 10))  # accepted
    with pytest.raises(TypeError, match=r"takes 5 arguments \(X, Y, Z, alpha, n\)"):
        m._convert((x, y, z))
    with pytest.raises(TypeError, match="argument 'X' is a numpy.ndarray"):
        m._convert((np.zeros(10, "float32"), y, z, 1.0, 10))
    with pytest.raises(TypeError, match="argument 'Y' has dtype float64"):
        m._convert((x, fake(10, "float64"), z, 1.0, 10))
    with pytest.raises(ValueError, match=r"argument 'Z' has shape \(9,\); expected shape "
                       r"\(10,\)"):
        m._convert((x, y, fake(9), 1.0, 10))
    with pytest.raises(ValueError, match=r"argument 'X' has shape \(10,\); expected shape "
                       r"\(11,\)"):
        m._convert((x, y, z, 1.0, 11))
    with pytest.raises(TypeError, match="argument 'n' is the float 10.0"):
        m._convert((x, y, z, 1.0, 10.0))
    with pytest.raises(ValueError, match="arguments 'X' and 'Z' overlap"):
        m._convert((x, y, x, 1.0, 10))
    with pytest.raises(TypeError, match=r"argument 'X' \(FakeCUDAArray\) is on cpu:0; "
                       "expected an array on cuda:0"):
        m._convert((FakeCUDAArray(np.zeros(10, "float32"), dlpack.KDL_CPU), y, z, 1.0, 10))
    with pytest.raises(TypeError, match="argument 'Y' is a str"):
        m._convert((x, "y", z, 1.0, 10))


@pytest.mark.skipif(device_count() > 0, reason="this machine has a GPU")
def test_without_a_device_running_raises_device_not_found(tmp_path):
    m = _build(case_vadd().func, tmp_path)
    with pytest.raises(DeviceNotFoundError, match="cuda: no CUDA device was found") as info:
        m(1, 2, 3)
    assert isinstance(info.value, TargetError) and isinstance(info.value, RuntimeError)
    with pytest.raises(DeviceNotFoundError, match="no CUDA device"):
        m.time_evaluator()(1, 2, 3)
    with pytest.raises(DeviceNotFoundError, match="no CUDA device"):
        polytile.nd.array(np.zeros(3), device="cuda")
    with pytest.raises(DeviceNotFoundError, match="no CUDA device"):
        polytile.nd.empty((2, 2), device="cuda")


def test_device_names():
    nd = polytile.nd
    assert str(nd.device("cuda")) == "cuda:0" == str(nd.device("cuda:0")) == str(nd.cuda())
    assert nd.device("gpu", 0) == nd.device(nd.device("cuda"))
    assert str(nd.device("cpu")) == "cpu:0" == str(polytile.cpu(0))
    with pytest.raises(TargetError, match="device index 1 in 'cuda:1'"):
        nd.device("cuda:1")
    with pytest.raises(TargetError, match="nd.device: got int"):
        nd.device(3)
    with pytest.raises(TargetError, match="device 'tpu' is not supported"):
        nd.array(np.zeros(3), device="tpu")


def test_cpu_arrays_are_numpy_arrays_with_tvm_spelling():
    nd = polytile.nd
    a = nd.array([[1, 2], [3, 4]], dtype="float32")  # TVM's default device: the host
    assert isinstance(a, np.ndarray) and a.flags.c_contiguous and a.device == polytile.cpu()
    b = a.numpy()
    assert type(b) is np.ndarray and np.array_equal(b, [[1, 2], [3, 4]])
    assert nd.empty((2, 3), "int8").shape == (2, 3)


def test_importing_polytile_does_not_import_cuda_python():
    import subprocess
    import sys

    code = ("import sys, polytile; polytile.nd.device('cuda'); "
            "print(any(m == 'cuda' or m.startswith('cuda.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_dlpack_reads_numpy_capsules():
    a = np.arange(12, dtype="float32").reshape(3, 4)
    v = dlpack.read_capsule(a.__dlpack__())
    assert (v.ptr, v.shape, v.dtype, v.device, v.nbytes) == (a.ctypes.data, (3, 4),
                                                             "float32", "cpu:0", 48)
    assert v.c_contiguous
    assert not dlpack.read_capsule(a.T.__dlpack__()).c_contiguous
    col = dlpack.read_capsule(a[:, 1:2].__dlpack__())
    assert col.ptr == a.ctypes.data + 4 and not col.c_contiguous
    assert dlpack.read_capsule(a[1:2].__dlpack__()).c_contiguous
    assert dlpack.read_capsule(np.array([True]).__dlpack__()).dtype == "bool"
    assert dlpack.read_capsule(a.__dlpack__(max_version=(1, 0))).shape == (3, 4)
    with pytest.raises(TypeError, match="expected a capsule named 'dltensor'"):
        dlpack.read_capsule(object())


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8", "bool"])
def test_dlpack_exports_to_numpy_without_copies(dtype):
    src = (np.arange(6) % 2 == 0) if dtype == "bool" else np.arange(6).astype(dtype)
    src = src.reshape(2, 3)
    before = dlpack.live_exports()

    class Exporter:
        def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
            versioned = max_version is not None and max_version[0] >= 1
            return dlpack.make_capsule(src.ctypes.data, src.shape, src.dtype.name,
                                       dlpack.KDL_CPU, 0, src, versioned=versioned)

        def __dlpack_device__(self):
            return (dlpack.KDL_CPU, 0)

    out = np.from_dlpack(Exporter())
    assert out.ctypes.data == src.ctypes.data and np.array_equal(out, src)
    assert dlpack.live_exports() == before + 1
    del out
    gc.collect()
    assert dlpack.live_exports() == before  # the consumer called the deleter
    for versioned in (False, True):  # a capsule never consumed frees its export too
        cap = dlpack.make_capsule(src.ctypes.data, src.shape, src.dtype.name, dlpack.KDL_CPU,
                                  0, src, versioned=versioned)
        assert dlpack.read_capsule(cap).shape == (2, 3)
        del cap
        gc.collect()
        assert dlpack.live_exports() == before
