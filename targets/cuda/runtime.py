"""CUDA execution through the driver API (``cuda.bindings.driver``) and :class:`CUDAModule`.

Context: the primary context of device 0, retained once per process and made current in
each calling thread; torch and cupy use the same context, so their pointers are valid here.

Launching: every kernel of a function runs on the legacy default stream (handle 0), in
order. That stream is also the one torch and cupy use by default, so their work before and
after a call is ordered with ours. ``CUDAModule.__call__`` synchronizes that stream before
returning, so that a faulting kernel is reported by the call that launched it; the timing
loop of ``time_evaluator`` does not synchronize between calls.

Every driver call is checked; a failure raises :class:`~polytile.errors.DeviceError` naming
the call, the error (``CUDA_ERROR_ILLEGAL_ADDRESS``...) and the kernel and function concerned.
Without a GPU, driver or cuda-python, running raises
:class:`~polytile.errors.DeviceNotFoundError` (a ``TargetError`` and a ``RuntimeError``);
building does not need a GPU.
"""

from __future__ import annotations

import ctypes
import threading
import weakref

from polytile.errors import DeviceError, DeviceNotFoundError, LoweringError, format_error
from polytile.schedule.loop_ir import Buffer, PrimFunc
from polytile.te import dtype as dt
from polytile.te.expr import Var

from ..c_printer import print_c_module
from ..llvm.analysis import stored_buffers
from ..runtime_support import (SCALAR_CTYPES, BenchmarkResult, check_arg_count, check_array,
                               check_overlap, check_timing_args, expected_shape, measure,
                               scalar_arg)
from ..target import Target
from . import dlpack
from .compile import compile_cuda, default_arch
from .dialect import CUDADialect

_lock = threading.Lock()
_state: dict = {}
LEGACY_STREAM = 0  # CUstream handle of the legacy default stream
DLPACK_LEGACY_STREAM = 1  # how DLPack and __cuda_array_interface__ name that stream


# ---------------------------------------------------------------------------- driver
def driver():
    """The ``cuda.bindings.driver`` module (``cuda.cuda`` of older cuda-python), or None."""
    if "driver" not in _state:
        try:
            from cuda.bindings import driver as drv
        except ImportError:
            try:
                from cuda import cuda as drv  # cuda-python < 12.6
            except ImportError:
                drv = None
        _state["driver"] = drv
    return _state["driver"]


def _error_text(err) -> str:
    drv = driver()
    try:
        _, name = drv.cuGetErrorName(err)
        _, desc = drv.cuGetErrorString(err)
        return f"{name.decode()} ({desc.decode()})"
    except Exception:  # noqa: BLE001 - the driver cannot even describe its error
        return f"CUresult {int(err)}"


def check(result, what: str, kernel: str | None = None, func: str | None = None):
    """Unpack the ``(CUresult, values...)`` tuple of a driver call.

    Returns the single value, a tuple of several, or None.

    Raises
    ------
    DeviceError
        When the result is not ``CUDA_SUCCESS``; the message names ``what``, the error and,
        when given, the kernel and function.
    """
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        where = ""
        if kernel is not None:
            where = f" in kernel {kernel!r}"
        if func is not None:
            where += f" of function {func!r}"
        text = _error_text(err)
        sticky = any(x in text for x in ("ILLEGAL_ADDRESS", "LAUNCH_FAILED", "ASSERT",
                                          "ILLEGAL_INSTRUCTION", "MISALIGNED"))
        raise DeviceError(format_error(
            "cuda", f"{what}{where} failed with {text}", "expected CUDA_SUCCESS",
            hint="the CUDA context is unusable after this error: restart the process"
            if sticky else None))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _init() -> dict:
    """Initialise the driver and retain device 0's primary context, once."""
    with _lock:
        if "context" in _state:
            return _state
        if "failure" in _state:
            raise DeviceNotFoundError(_state["failure"])
        drv = driver()
        why = None
        if drv is None:
            why = "cuda-python is not installed (pip install cuda-python)"
        else:
            try:
                (err,) = drv.cuInit(0)
                if int(err) != 0:
                    why = f"cuInit failed with {_error_text(err)}"
                else:
                    n = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
                    if n < 1:
                        why = "the driver reports 0 devices"
            except Exception as exc:  # noqa: BLE001 - libcuda.so itself is missing
                why = f"the CUDA driver library cannot be loaded ({exc})"
        if why is not None:
            _state["failure"] = format_error(
                "cuda", f"no CUDA device was found: {why}", "expected an NVIDIA GPU with "
                "its driver and cuda-python", hint="the function was built (get_source() "
                "shows it); run it on a machine with a GPU")
            raise DeviceNotFoundError(_state["failure"])
        dev = check(drv.cuDeviceGet(0), "cuDeviceGet")
        ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _state.update(device=dev, context=ctx, stream=drv.CUstream(LEGACY_STREAM))
        return _state


def context() -> dict:
    """Make device 0's primary context current in this thread; return the driver state
    (``driver``, ``device``, ``context``, ``stream``).

    Raises
    ------
    DeviceNotFoundError
        Without cuda-python, a driver or a device.
    """
    st = _init()
    check(st["driver"].cuCtxSetCurrent(st["context"]), "cuCtxSetCurrent")
    return st


def device_count() -> int:
    """Number of CUDA devices (0 without driver or cuda-python); never raises."""
    drv = driver()
    if drv is None:
        return 0
    try:
        (err,) = drv.cuInit(0)
        if int(err) != 0:
            return 0
        err, n = drv.cuDeviceGetCount()
        return int(n) if int(err) == 0 else 0
    except Exception:  # noqa: BLE001 - no libcuda.so
        return 0


def device_compute_capability() -> tuple | None:
    """``(major, minor)`` of device 0, or None without a device."""
    if device_count() < 1:
        return None
    st = _init()
    drv = st["driver"]
    a = drv.CUdevice_attribute
    major = check(drv.cuDeviceGetAttribute(
        a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, st["device"]), "cuDeviceGetAttribute")
    minor = check(drv.cuDeviceGetAttribute(
        a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, st["device"]), "cuDeviceGetAttribute")
    return int(major), int(minor)


def synchronize() -> None:
    """Wait for all work on the legacy default stream."""
    st = context()
    check(st["driver"].cuStreamSynchronize(st["stream"]), "cuStreamSynchronize")


# ---------------------------------------------------------------------------- arguments
def device_array(fname: str, p: Buffer, a):
    """``(ptr, view)`` of an array argument on CUDA device 0; ``view`` has ``shape``,
    ``dtype``, ``c_contiguous``, ``read_only``, ``nbytes`` and keeps the producer's export
    alive.

    Accepted: :class:`~.ndarray.NDArray`, any object with ``__dlpack__`` on device
    ``cuda:0`` (torch, cupy, jax), any object with ``__cuda_array_interface__``.

    Raises
    ------
    TypeError
        A numpy array (host memory), an array on another device, anything else.
    """
    import numpy as np

    from .ndarray import NDArray

    if isinstance(a, NDArray):
        return a.data_ptr, a
    if isinstance(a, np.ndarray):
        raise TypeError(format_error(
            fname, f"argument {p.name!r} is a numpy.ndarray (host memory)",
            "expected a CUDA array", hint=f"copy it to the GPU with "
            f"polytile.nd.array({p.name}, device='cuda') (or pass a torch CUDA tensor)"))
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        try:
            view = dlpack.from_object(a, stream=DLPACK_LEGACY_STREAM)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) could not be exported "
                f"through DLPack: {exc}", "expected a CUDA array")) from exc
        if view.device_type not in (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED) or \
                view.device_id != 0:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) is on {view.device}",
                "expected an array on cuda:0", hint="move it to the GPU first"))
        return view.ptr, view
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(fname, p, a, cai)
    raise TypeError(format_error(
        fname, f"argument {p.name!r} is a {type(a).__name__}",
        f"expected a CUDA array of dtype {p.dtype}: polytile.nd.array, a torch CUDA tensor "
        "or an object with __dlpack__ or __cuda_array_interface__"))


class _CAIView:
    """``__cuda_array_interface__`` (v2/v3) seen like a DLPack view."""

    def __init__(self, cai: dict, owner):
        import numpy as np

        self.owner = owner
        self.shape = tuple(int(n) for n in cai["shape"])
        self.dtype = np.dtype(cai["typestr"])
        ptr, self.read_only = cai["data"]
        self.ptr = int(ptr or 0)
        self.nbytes = self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))
        self.c_contiguous = dlpack.is_c_contiguous(self.shape, cai.get("strides"),
                                                   self.dtype.itemsize)


def _from_cai(fname: str, p: Buffer, a, cai: dict):
    view = _CAIView(cai, a)
    st = context()
    drv = st["driver"]
    if view.nbytes:
        res = drv.cuPointerGetAttribute(
            drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, view.ptr)
        if int(res[0]) != 0:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) has a data pointer the "
                "CUDA driver does not know", "expected device memory of cuda:0"))
        if int(res[1]) != 0:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) is on cuda:{int(res[1])}",
                "expected an array on cuda:0"))
    stream = cai.get("stream")
    if stream not in (None, DLPACK_LEGACY_STREAM):  # the producer's pending work
        check(drv.cuStreamSynchronize(drv.CUstream(int(stream))), "cuStreamSynchronize")
    return view.ptr, view


# ---------------------------------------------------------------------------- module
class CUDAModule:
    """A function compiled for an NVIDIA GPU, callable with device arrays and scalars.

    Building needs no GPU: the CUDA C is printed (``get_source()``) and compiled to a cubin
    at construction; the cubin is loaded on the first call.

    Parameters
    ----------
    func : PrimFunc
        Lowered, flattened loop IR whose body is ``KernelLaunch`` statements (in ``Seq`` and
        ``Allocate`` of scope ``global``/``heap``).
    target : Target
        A ``cuda`` target; ``-arch`` picks the architecture (default: device 0's, else
        ``sm_90``), ``-fast-math`` the fast intrinsics and ``--use_fast_math``.
    compiler : {"auto", "nvrtc", "nvcc"}
    cache_dir : path, optional
        Directory of the cubin cache (default ``~/.cache/polytile/cuda``).

    Raises
    ------
    LoweringError
        A statement outside the kernels that is not ``Seq``/``Allocate``.
    BuildError
        Unsupported constructs or a compile error (with the compiler's log).
    """

    def __init__(self, func: PrimFunc, target: Target, *, compiler: str = "auto",
                 cache_dir=None):
        if target.kind != "cuda":
            raise LoweringError(format_error("build", f"target {str(target)!r} is not a CUDA "
                                             "target", "expected a 'cuda' target"))
        self.func = func
        self.target = target
        self.name = func.name
        self.arch = target.arch or default_arch()
        self._c = print_c_module(func, CUDADialect(), fast_math=target.fast_math)
        self._options = ("--use_fast_math",) if target.fast_math else ()
        self.cubin = compile_cuda(self._c.source, self.arch, self._options,
                                  compiler=compiler, cache_dir=cache_dir,
                                  name=f"{func.name}.cu")
        self.kernels = self._c.kernels
        self._stored = stored_buffers(func.body)
        self._loaded = None
        self._workspace: dict = {}  # id(Buffer) -> (ptr, nbytes)
        self._finalizer = weakref.finalize(self, _free_all, self._workspace)
        self.synchronize = True

    # ------------------------------------------------------------------ sources
    def get_source(self, fmt: str = "cuda"):
        """The generated CUDA C (``"cuda"``/``"cu"``), or the cubin's bytes (``"cubin"``).

        Raises
        ------
        ValueError
            For another ``fmt``.
        """
        if fmt in ("cuda", "cu"):
            return self._c.source
        if fmt == "cubin":
            return self.cubin
        raise ValueError(format_error("get_source", f"unknown format {fmt!r}",
                                      "expected 'cuda' (CUDA C) or 'cubin'"))

    # ------------------------------------------------------------------ loading
    def _load(self) -> list:
        st = context()
        if self._loaded is not None:
            return self._loaded
        drv = st["driver"]
        mod = check(drv.cuModuleLoadData(self.cubin), "cuModuleLoadData", func=self.name)
        fns = []
        for k in self.kernels:
            fn = check(drv.cuModuleGetFunction(mod, k.name.encode()), "cuModuleGetFunction",
                       k.name, self.name)
            if k.dynamic_shared_bytes:
                check(drv.cuFuncSetAttribute(
                    fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    k.dynamic_shared_bytes),
                    f"setting {k.dynamic_shared_bytes} bytes of dynamic shared memory",
                    k.name, self.name)
            fns.append(fn)
        weakref.finalize(self, _unload, mod)  # autotuning builds thousands of modules
        self._loaded = fns
        return fns

    # ------------------------------------------------------------------ calling
    def _convert(self, args: tuple) -> tuple[dict, list]:
        """Check ``args``; return the value of every parameter and workspace buffer
        (by id: device pointer or raw scalar) and the objects to keep alive."""
        f = self.func
        check_arg_count(self.name, f.params, args)
        values, scalars, keep, spans = {}, {}, [], []
        for p, a in zip(f.params, args):
            if isinstance(p, Var):
                values[id(p)], scalars[p] = scalar_arg(self.name, p, a)
        for p, a in zip(f.params, args):
            if isinstance(p, Buffer):
                ptr, view = device_array(self.name, p, a)
                check_array(self.name, p, dtype=view.dtype, shape=view.shape,
                            contiguous=view.c_contiguous, writeable=not view.read_only,
                            written=p in self._stored, scalars=scalars,
                            contiguous_hint=f"pass a contiguous copy ({p.name}.contiguous() "
                                            "in torch)")
                values[id(p)] = ptr
                keep.append(view)
                if view.nbytes:
                    spans.append((ptr, ptr + view.nbytes, p))
        check_overlap(self.name, spans, self._stored)
        for b in self._c.workspace:
            values[id(b)] = self._workspace_ptr(b, scalars)
        return values, keep

    def _workspace_ptr(self, b: Buffer, scalars: dict) -> int:
        shape = expected_shape(b, scalars)
        if None in shape:
            raise LoweringError(format_error(
                self.name, f"intermediate buffer {b.name!r} has the shape {list(b.shape)}",
                "expected a shape of constants and scalar parameters"))
        n = dt.nbytes(b.dtype)
        for s in shape:
            n *= s
        have = self._workspace.get(id(b))
        if have is not None and have[1] >= n:
            return have[0]
        st = context()
        if have is not None:
            check(st["driver"].cuMemFree(have[0]), "cuMemFree", func=self.name)
        ptr = int(check(st["driver"].cuMemAlloc(max(n, 1)),
                        f"cuMemAlloc of {n} bytes for {b.name!r}", func=self.name))
        self._workspace[id(b)] = (ptr, n)
        return ptr

    def _prepare(self, values: dict) -> list:
        """Launch records: (function, kernel, params address, ctypes objects to keep)."""
        fns = self._load()
        out = []
        for fn, k in zip(fns, self.kernels):
            objs = []
            for p in k.params:
                if isinstance(p, Buffer):
                    objs.append(ctypes.c_uint64(values[id(p)]))
                else:
                    objs.append(SCALAR_CTYPES[p.dtype](values[id(p)]))
            ptrs = (ctypes.c_void_p * max(len(objs), 1))(
                *[ctypes.addressof(o) for o in objs])
            out.append((fn, k, ctypes.addressof(ptrs), (objs, ptrs)))
        return out

    def _launch(self, prepared: list) -> None:
        st = _state
        launch, stream = st["driver"].cuLaunchKernel, st["stream"]
        for fn, k, params, _ in prepared:
            res = launch(fn, *k.grid, *k.block, k.dynamic_shared_bytes, stream, params, 0)
            if int(res[0]) != 0:
                check(res, "cuLaunchKernel", k.name, self.name)

    def _sync(self) -> None:
        st = _state
        res = st["driver"].cuStreamSynchronize(st["stream"])
        if int(res[0]) != 0:
            names = ", ".join(repr(k.name) for k in self.kernels)
            check(res, f"running kernel{'s' if len(self.kernels) > 1 else ''} {names}",
                  func=self.name)

    def __call__(self, *args) -> None:
        """Run the function on device arrays (written in place) and scalars.

        Arrays: :class:`polytile.nd.NDArray`, torch CUDA tensors or any ``__dlpack__`` /
        ``__cuda_array_interface__`` object on ``cuda:0``, of exactly the buffer's dtype and
        shape, C-contiguous, not overlapping another argument that the function writes.
        Scalars: Python or numpy numbers that fit the parameter's dtype. Waits for the
        kernels to finish (unless ``self.synchronize`` is False).

        Raises
        ------
        TypeError, ValueError
            Invalid arguments, as on the CPU (a numpy array raises ``TypeError`` pointing
            to ``polytile.nd.array``).
        DeviceNotFoundError
            No CUDA device on this machine.
        DeviceError
            A driver call or a kernel failed (the message names the kernel).
        """
        context()  # no device: say so before judging the arguments
        values, keep = self._convert(args)
        self._launch(self._prepare(values))
        if self.synchronize:
            self._sync()
        del keep

    def time_evaluator(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0):
        """A function that times this module on given arguments with CUDA events.

        The returned ``f(*args) -> BenchmarkResult`` validates ``args`` once, runs the
        function once as warm-up, then ``repeat`` times launches ``number`` consecutive
        calls between two events on the stream and records their mean (seconds); with
        ``min_repeat_ms > 0``, ``number`` grows as on the CPU (see
        :func:`polytile.targets.runtime_support.measure`).

        Raises
        ------
        ValueError
            If ``number`` or ``repeat`` is below 1 or ``min_repeat_ms`` is negative.
        """
        check_timing_args(number, repeat, min_repeat_ms)

        def evaluator(*args) -> BenchmarkResult:
            context()
            values, keep = self._convert(args)
            prepared = self._prepare(values)
            self._launch(prepared)  # warm-up
            self._sync()
            st = _state
            drv = st["driver"]
            start = check(drv.cuEventCreate(0), "cuEventCreate")
            end = check(drv.cuEventCreate(0), "cuEventCreate")

            def run(n: int) -> float:
                check(drv.cuEventRecord(start, st["stream"]), "cuEventRecord")
                for _ in range(n):
                    self._launch(prepared)
                check(drv.cuEventRecord(end, st["stream"]), "cuEventRecord")
                res = drv.cuEventSynchronize(end)
                if int(res[0]) != 0:
                    self._sync()  # names the kernels
                    check(res, "cuEventSynchronize", func=self.name)
                ms = check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime")
                return float(ms) / 1e3

            try:
                return measure(run, number, repeat, min_repeat_ms)
            finally:
                drv.cuEventDestroy(start)
                drv.cuEventDestroy(end)
                del keep

        return evaluator

    def __repr__(self) -> str:
        return f"CUDAModule({self.name!r}, target={str(self.target)!r}, arch={self.arch!r})"


def free_device_memory(ptrs) -> None:
    """``cuMemFree`` each address, ignoring failures (finalizers run at interpreter exit,
    when the driver may already be gone)."""
    if "context" not in _state:
        return
    drv = _state["driver"]
    try:
        drv.cuCtxSetCurrent(_state["context"])
        for ptr in ptrs:
            drv.cuMemFree(ptr)
    except Exception:  # noqa: BLE001, S110 - see the docstring
        pass


def _unload(mod) -> None:
    if "context" not in _state:
        return
    try:
        _state["driver"].cuCtxSetCurrent(_state["context"])
        _state["driver"].cuModuleUnload(mod)
    except Exception:  # noqa: BLE001, S110 - at interpreter exit the driver may be gone
        pass


def _free_all(workspace: dict) -> None:
    free_device_memory([ptr for ptr, _ in workspace.values()])
    workspace.clear()
