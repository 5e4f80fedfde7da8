"""The CUDA backend: C printer dialect, NVRTC/nvcc compilation, driver-API runtime, arrays.

``CUDAModule(func, target)`` prints the CUDA C of a lowered function and compiles it (no GPU
needed); calling it needs one. ``polytile.nd`` re-exports the device arrays of
:mod:`.ndarray`. cuda-python is imported only when compiling with NVRTC or touching a device.
"""

from __future__ import annotations

from .compile import compile_cuda, default_arch
from .dialect import CUDADialect
from .ndarray import NDArray, array, device, empty
from .runtime import CUDAModule, device_count

__all__ = ["CUDADialect", "CUDAModule", "NDArray", "array", "compile_cuda", "default_arch",
           "device", "device_count", "empty"]
