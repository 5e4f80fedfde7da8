"""HIP execution: :class:`HIPModule` and a small :class:`HIPDeviceAPI` over hip-python.

Building needs no GPU and no ROCm: the HIP C is printed at construction (``get_source()``)
and compiled when ``hipcc`` exists (:mod:`.compile`; the code object, or for ``-mcpu``
values the installed clang lacks an ISA check only). Calling needs an AMD GPU, the
``hip-python`` package (``from hip import hip``, AMD's counterpart of cuda-python) and a
loadable code object for the target's ``-mcpu`` (hipcc's; build with the device's own
``-mcpu``), loaded with ``hipModuleLoadData`` and launched with ``hipModuleLaunchKernel``.
Compiling with hiprtc at run time is not written.

**Untested on hardware**: the project has no AMD GPU. The device API below is a thin,
direct mapping of the CUDA one onto hip-python's names; it is kept small on purpose, and
nothing in the test suite runs it.
"""

from __future__ import annotations

import contextlib

from polytile.backend import Target
from polytile.errors import BuildError, DeviceError, DeviceNotFoundError, LoweringError, \
    format_error
from polytile.schedule.loop_ir import PrimFunc

from ..gpu import dlpack
from ..gpu.device_api import DeviceAPI
from ..gpu.module import GPUModule
from . import mfma
from .compile import CodeObject, assembly, compile_hip, hipcc_path
from .dialect import HIPDialect

_state: dict = {}


def _hip():
    """hip-python's ``hip`` and ``hiprtc`` modules.

    Raises
    ------
    DeviceNotFoundError
        Without hip-python or without an AMD GPU.
    """
    if "hip" not in _state:
        try:
            from hip import hip, hiprtc   # hip-python
        except ImportError:
            _state["failure"] = ("hip: no AMD GPU runtime: the 'hip-python' package is not "
                                 "installed (pip install hip-python, with ROCm and an AMD GPU)")
            _state["hip"] = None
        else:
            err, n = hip.hipGetDeviceCount()
            if int(err) != 0 or n < 1:
                _state["failure"] = "hip: no AMD GPU found (hipGetDeviceCount)"
                _state["hip"] = None
            else:
                _state["hip"], _state["hiprtc"] = hip, hiprtc
    if _state["hip"] is None:
        raise DeviceNotFoundError(_state["failure"])
    return _state["hip"]


def _check(res, what: str, kernel: str | None = None, func: str | None = None):
    """The value(s) of a hip-python call returning ``(err, *values)``."""
    res = res if isinstance(res, tuple) else (res,)
    if int(res[0]) != 0:
        where = f" in kernel {kernel!r}" if kernel else ""
        raise DeviceError(format_error(func or "hip", f"{what} failed{where}: {res[0]!r}",
                                       "success"))
    return res[1] if len(res) == 2 else res[1:]


class HIPDeviceAPI(DeviceAPI):
    """AMD GPU 0 through hip-python (untested on hardware, see the module doc); every
    kernel runs on the null stream."""

    name = "hip"
    driver_name = "HIP"
    dlpack_type = dlpack.KDL_ROCM
    dlpack_types = (dlpack.KDL_ROCM,)
    dlpack_stream = 0

    def context(self) -> None:
        _check(_hip().hipSetDevice(0), "hipSetDevice")

    def synchronize(self) -> None:
        _check(_hip().hipDeviceSynchronize(), "hipDeviceSynchronize")

    def exists(self) -> bool:
        try:
            _hip()
        except DeviceNotFoundError:
            return False
        return True

    def attribute(self, name: str):
        hip = _hip()
        props = _check(hip.hipGetDeviceProperties(0), "hipGetDeviceProperties") \
            if hasattr(hip, "hipGetDeviceProperties") else None
        table = {"max_threads_per_block": "maxThreadsPerBlock", "warp_size": "warpSize",
                 "multi_processor_count": "multiProcessorCount",
                 "max_shared_memory_per_block": "sharedMemPerBlock",
                 "compute_version": "gcnArchName", "device_name": "name",
                 "total_global_memory": "totalGlobalMem"}
        if name == "available_global_memory":
            return int(_check(hip.hipMemGetInfo(), "hipMemGetInfo")[0])
        value = getattr(props, table[name])
        return value.decode() if isinstance(value, bytes) else value

    def alloc(self, nbytes: int, what: str, func: str | None = None) -> int:
        return int(_check(_hip().hipMalloc(nbytes), f"hipMalloc of {what}", func=func))

    def free(self, ptrs) -> None:
        hip = _state.get("hip")
        for p in ptrs if hip is not None else ():
            hip.hipFree(p)

    def copy_to_device(self, dst: int, src: int, nbytes: int) -> None:
        hip = _hip()
        _check(hip.hipMemcpy(dst, src, nbytes, hip.hipMemcpyKind.hipMemcpyHostToDevice),
               "hipMemcpy")

    def copy_to_host(self, dst: int, src: int, nbytes: int) -> None:
        hip = _hip()
        _check(hip.hipMemcpy(dst, src, nbytes, hip.hipMemcpyKind.hipMemcpyDeviceToHost),
               "hipMemcpy")

    def pointer_device(self, ptr: int) -> int | None:
        return 0

    def sync_stream(self, stream: int) -> None:
        self.synchronize()

    def load(self, image: bytes, kernels: tuple, func: str) -> tuple:
        hip = _hip()
        mod = _check(hip.hipModuleLoadData(image), "hipModuleLoadData", func=func)
        return mod, [_check(hip.hipModuleGetFunction(mod, k.name.encode()),
                            "hipModuleGetFunction", k.name, func) for k in kernels]

    def unload(self, handle) -> None:
        hip = _state.get("hip")
        if hip is not None:
            hip.hipModuleUnload(handle)

    def launcher(self, func: str):
        hip = _hip()

        def run(fn, k, params) -> None:
            _check(hip.hipModuleLaunchKernel(fn, *k.grid, *k.block, k.dynamic_shared_bytes,
                                             None, params, None), "hipModuleLaunchKernel",
                   k.name, func)

        return run

    def wait(self, kernels: tuple, func: str) -> None:
        names = ", ".join(repr(k.name) for k in kernels)
        _check(_hip().hipDeviceSynchronize(), f"running kernels {names}", func=func)

    @contextlib.contextmanager
    def timer(self, kernels: tuple, func: str):
        hip = _hip()
        start = _check(hip.hipEventCreate(), "hipEventCreate")
        end = _check(hip.hipEventCreate(), "hipEventCreate")

        def elapsed(launch_n, n: int) -> float:
            _check(hip.hipEventRecord(start, None), "hipEventRecord")
            launch_n(n)
            _check(hip.hipEventRecord(end, None), "hipEventRecord")
            self.wait(kernels, func)
            return float(_check(hip.hipEventElapsedTime(start, end),
                                "hipEventElapsedTime")) / 1e3

        try:
            yield elapsed
        finally:
            hip.hipEventDestroy(start)
            hip.hipEventDestroy(end)


#: the one HIP device API of the process
API = HIPDeviceAPI()


class HIPModule(GPUModule):
    """A function compiled for an AMD GPU (HIP C); see the module docstring.

    ``get_source()`` (or ``"hip"``) is the HIP C; ``code_object`` the result of
    :func:`~.compile.compile_hip` (None without hipcc); :meth:`assembly` and
    :meth:`mfma_instructions` its ISA. ``export_library`` writes ``.hip``.

    Raises
    ------
    LoweringError
        A target of another kind.
    BuildError
        Unsupported constructs, an MFMA instruction the target's ``-mcpu`` lacks, or a
        compile error.
    """

    dialect = HIPDialect()
    source_name = "hip"
    source_formats = ("hip", "co")
    export_formats = {".hip": "hip"}

    def __init__(self, func: PrimFunc, target: Target):
        if target.kind != "hip":
            raise LoweringError(format_error("build", f"target {str(target)!r} is not a HIP "
                                             "target", "expected a 'hip' target"))
        self.arch = target.arch
        self.code_object: CodeObject | None = None
        super().__init__(func, target, API)

    def _compile(self, source: str) -> bytes:
        have = self.target.limits.tensor_intrinsics
        for name in mfma.used_instructions(source):
            if name not in have:
                raise BuildError(format_error(
                    "tensorize", f"intrinsic 'mfma_{name[7:]}' of function {self.name!r} "
                    f"uses {name}, which is not an instruction of {self.arch}",
                    f"one of {', '.join(have) or 'none'}",
                    hint=f"{name} exists on {', '.join(mfma.INSTRUCTIONS[name].archs)}"))
        if hipcc_path() is None:
            return b""
        options = ("-ffast-math",) if self.target.fast_math else ()
        self.code_object = compile_hip(source, self.arch, options,
                                       name=f"{self.func.name}.hip")
        return self.code_object.image

    def assembly(self) -> str:
        """The AMDGPU assembly of the compiled code.

        Raises
        ------
        BuildError
            Without hipcc.
        """
        if self.code_object is None:
            raise BuildError(format_error("assembly", "this module was not compiled",
                                          "hipcc installed when it was built"))
        return assembly(self.code_object)

    def mfma_instructions(self) -> list:
        """The ``v_mfma_*`` instructions of the compiled code, in order."""
        from .compile import mfma_instructions

        return mfma_instructions(self.assembly())

    def _load(self) -> list:
        if self.code_object is None or not self.code_object.loadable:
            raise DeviceNotFoundError(format_error(
                self.name, "no loadable code object for this device",
                "hipcc for the device's -mcpu (runs need an AMD GPU and hip-python)"))
        return super()._load()

    def __repr__(self) -> str:
        return f"HIPModule({self.name!r}, target={str(self.target)!r})"


__all__ = ["API", "HIPDeviceAPI", "HIPModule"]
