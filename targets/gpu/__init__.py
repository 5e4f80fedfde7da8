"""The device-neutral GPU runtime, shared by every GPU backend.

A GPU backend supplies a C dialect (:mod:`polytile.targets.c_dialect`), a compiler and a
:class:`~.device_api.DeviceAPI` for its driver; everything else is here: the module that
checks arguments, sizes workspaces, packs launch parameters and times launches
(:class:`~.module.GPUModule`), device arrays (:class:`~.arrays.NDArray`) and argument
recognition, and DLPack (:mod:`.dlpack`).
"""

from __future__ import annotations

from . import dlpack
from .arrays import NDArray, array, device_array, empty
from .device_api import Device, DeviceAPI
from .module import GPUModule

__all__ = ["Device", "DeviceAPI", "GPUModule", "NDArray", "array", "device_array", "dlpack",
           "empty"]
