"""CUDA execution: :class:`CUDADeviceAPI` (the device-neutral GPU runtime's view of the
driver) and :class:`CUDAModule`.

``CUDAModule.__call__`` waits for the legacy default stream before returning, so that a
faulting kernel is reported by the call that launched it; the timing loop of
``time_evaluator`` does not synchronize between calls. Driver calls and errors:
:mod:`.driver`; building does not need a GPU.
"""

from __future__ import annotations

import contextlib

from polytile.backend import Target
from polytile.errors import LoweringError, format_error
from polytile.schedule.loop_ir import PrimFunc

from ..gpu import dlpack
from ..gpu.device_api import DeviceAPI
from ..gpu.module import GPUModule
from .compile import compile_cuda, default_arch
from .dialect import CUDADialect
from .driver import (DLPACK_LEGACY_STREAM, _state, _unload, check, context, device_count,
                     device_compute_capability, free_device_memory, synchronize)


# ---------------------------------------------------------------------------- device API
#: Device attributes read with cuDeviceGetAttribute
_ATTRIBUTES = {
    "max_threads_per_block": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "warp_size": "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
    "multi_processor_count": "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
    "max_shared_memory_per_block": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK",
}


class CUDADeviceAPI(DeviceAPI):
    """CUDA device 0 through the driver API, for the device-neutral GPU runtime
    (:mod:`polytile.targets.gpu`); every kernel runs on the legacy default stream."""

    name = "cuda"
    driver_name = "CUDA"
    dlpack_type = dlpack.KDL_CUDA
    dlpack_types = (dlpack.KDL_CUDA, dlpack.KDL_CUDA_MANAGED)
    dlpack_stream = DLPACK_LEGACY_STREAM

    def context(self) -> None:
        context()

    def synchronize(self) -> None:
        synchronize()

    def exists(self) -> bool:
        return device_count() > 0

    def attribute(self, name: str):
        st = context()
        drv, dev = st["driver"], st["device"]
        if name == "compute_version":
            return "{}.{}".format(*device_compute_capability())
        if name == "available_global_memory":
            return int(check(drv.cuMemGetInfo(), "cuMemGetInfo")[0])
        if name == "total_global_memory":
            return int(check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
        if name == "device_name":
            raw = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
            return bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
        attr = getattr(drv.CUdevice_attribute, _ATTRIBUTES[name])
        return int(check(drv.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))

    def alloc(self, nbytes: int, what: str, func: str | None = None) -> int:
        st = _state
        return int(check(st["driver"].cuMemAlloc(nbytes), f"cuMemAlloc of {what}", func=func))

    def free(self, ptrs) -> None:
        free_device_memory(ptrs)

    def copy_to_device(self, dst: int, src: int, nbytes: int) -> None:
        check(_state["driver"].cuMemcpyHtoD(dst, src, nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, dst: int, src: int, nbytes: int) -> None:
        check(_state["driver"].cuMemcpyDtoH(dst, src, nbytes), "cuMemcpyDtoH")

    def copy_device_to_device(self, dst: int, src: int, nbytes: int) -> None:
        # ordered on the legacy stream after the kernels that wrote ``src``
        check(_state["driver"].cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")

    def pointer_device(self, ptr: int) -> int | None:
        drv = _state["driver"]
        res = drv.cuPointerGetAttribute(
            drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        return None if int(res[0]) != 0 else int(res[1])

    def sync_stream(self, stream: int) -> None:
        drv = _state["driver"]
        check(drv.cuStreamSynchronize(drv.CUstream(stream)), "cuStreamSynchronize")

    def load(self, image: bytes, kernels: tuple, func: str) -> tuple:
        drv = _state["driver"]
        mod = check(drv.cuModuleLoadData(image), "cuModuleLoadData", func=func)
        fns = []
        for k in kernels:
            fn = check(drv.cuModuleGetFunction(mod, k.name.encode()), "cuModuleGetFunction",
                       k.name, func)
            # symbolic sizes: loaded for the most a launch may ask (checked at each one)
            dyn = k.dynamic_shared_bytes if isinstance(k.dynamic_shared_bytes, int) \
                else k.dynamic_shared_max
            if dyn:
                check(drv.cuFuncSetAttribute(
                    fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dyn), f"setting {dyn} bytes of dynamic shared memory", k.name, func)
            fns.append(fn)
        return mod, fns

    def unload(self, handle) -> None:
        _unload(handle)

    def tensor_map(self, m, ptr: int, func: str):
        """The ``CUtensorMap`` of :class:`~..gpu.tensor_map.TensorMapParam` ``m`` for
        the source at device address ``ptr`` (:func:`.tma.encode_tensor_map`); its 128
        bytes are at ``.getPtr()``."""
        from .tma import encode_tensor_map

        return encode_tensor_map(_state["driver"], ptr, m.dtype, m.rows, m.cols, m.box_rows,
                                 m.box_cols, m.swizzle, func)

    def launcher(self, func: str):
        st = _state
        launch, stream = st["driver"].cuLaunchKernel, st["stream"]

        def run(fn, k, params) -> None:
            res = launch(fn, *k.grid, *k.block, k.dynamic_shared_bytes, stream, params, 0)
            if int(res[0]) != 0:
                check(res, "cuLaunchKernel", k.name, func)

        return run

    def wait(self, kernels: tuple, func: str) -> None:
        st = _state
        res = st["driver"].cuStreamSynchronize(st["stream"])
        if int(res[0]) != 0:
            names = ", ".join(repr(k.name) for k in kernels)
            check(res, f"running kernel{'s' if len(kernels) > 1 else ''} {names}", func=func)

    @contextlib.contextmanager
    def timer(self, kernels: tuple, func: str):
        st = _state
        drv = st["driver"]
        start = check(drv.cuEventCreate(0), "cuEventCreate")
        end = check(drv.cuEventCreate(0), "cuEventCreate")

        def elapsed(launch_n, n: int) -> float:
            check(drv.cuEventRecord(start, st["stream"]), "cuEventRecord")
            launch_n(n)
            check(drv.cuEventRecord(end, st["stream"]), "cuEventRecord")
            res = drv.cuEventSynchronize(end)
            if int(res[0]) != 0:
                self.wait(kernels, func)  # names the kernels
                check(res, "cuEventSynchronize", func=func)
            ms = check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime")
            return float(ms) / 1e3

        try:
            yield elapsed
        finally:
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(end)


#: the one CUDA device API of the process
API = CUDADeviceAPI()


# ---------------------------------------------------------------------------- module
class CUDAModule(GPUModule):
    """A function compiled for an NVIDIA GPU, callable with device arrays and scalars.

    Building needs no GPU: the CUDA C is printed (``get_source()``) and compiled to a cubin
    at construction (``cubin``); the cubin is loaded on the first call. Calling, argument
    checks and timing are those of :class:`~polytile.targets.gpu.module.GPUModule`.
    ``export_library`` writes ``.cu`` (the source) or ``.cubin`` (with its launch plan in
    ``.cubin.json``, for :func:`polytile.runtime.load_module`).

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
        A target of another kind, or a statement outside the kernels that is not
        ``Seq``/``Allocate``.
    BuildError
        Unsupported constructs or a compile error (with the compiler's log).
    """

    dialect = CUDADialect()
    source_name = "cu"
    source_formats = ("cuda", "cubin")
    export_formats = {".cu": "cuda"}

    def _binary_exports(self) -> tuple:
        return (".cubin",)

    def _export(self, path: str, suffix: str) -> None:
        from .library import write_cubin

        write_cubin(self, path)  # with its launch plan in path + ".json"

    def __init__(self, func: PrimFunc, target: Target, *, compiler: str = "auto",
                 cache_dir=None):
        if target.kind != "cuda":
            raise LoweringError(format_error("build", f"target {str(target)!r} is not a CUDA "
                                             "target", "expected a 'cuda' target"))
        self.arch = target.arch or default_arch()
        self._compiler = compiler
        self._cache_dir = cache_dir
        super().__init__(func, target, API)

    def _compile(self, source: str) -> bytes:
        options = ("--use_fast_math",) if self.target.fast_math else ()
        return compile_cuda(source, self.arch, options, compiler=self._compiler,
                            cache_dir=self._cache_dir, name=f"{self.func.name}.cu")

    @property
    def cubin(self) -> bytes:
        """The compiled cubin."""
        return self.image

    def __repr__(self) -> str:
        return f"CUDAModule({self.name!r}, target={str(self.target)!r}, arch={self.arch!r})"


__all__ = ["API", "CUDADeviceAPI", "CUDAModule", "check", "context", "device_count",
           "device_compute_capability", "free_device_memory", "synchronize"]
