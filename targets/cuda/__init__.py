"""The CUDA backend: C printer dialect, NVRTC/nvcc compilation, the driver-API device.

``CUDAModule(func, target)`` prints the CUDA C of a lowered function and compiles it (no GPU
needed); calling it needs one. The device-neutral runtime (arguments, workspaces, launches,
arrays, DLPack) is :mod:`polytile.targets.gpu`; this package supplies the CUDA dialect,
the compiler and :class:`~.runtime.CUDADeviceAPI`. :mod:`.backend` registers the ``cuda``
kind. cuda-python is imported only when compiling with NVRTC or touching a device.
"""

from __future__ import annotations

from .backend import CUDA_LIMITS, CUDABackend
from .compile import compile_cuda, default_arch
from .dialect import CUDADialect
from .runtime import API, CUDADeviceAPI, CUDAModule, device_count

__all__ = ["API", "CUDABackend", "CUDADeviceAPI", "CUDADialect", "CUDAModule", "CUDA_LIMITS",
           "compile_cuda", "default_arch", "device_count"]
