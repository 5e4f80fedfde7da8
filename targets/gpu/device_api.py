"""What a GPU runtime must provide: :class:`DeviceAPI`, and :class:`Device` names.

The device-neutral parts of running GPU code (argument checks, workspaces, launch
records, timing, device arrays, DLPack) are written once in :mod:`.module` and
:mod:`.arrays` against this interface; a GPU backend implements it for its driver (CUDA:
:class:`polytile.targets.cuda.runtime.CUDADeviceAPI`; a HIP backend would wrap the HIP
runtime the same way). Addresses are Python ints; every method raises
:class:`~polytile.errors.DeviceError` naming the call (and the kernel and function when
given) on a driver failure, and :class:`~polytile.errors.DeviceNotFoundError` when the
machine has no such device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from . import dlpack

#: DLPack device type of each device name (``Device.__dlpack_device__``)
DLPACK_TYPES = {"cpu": dlpack.KDL_CPU, "cuda": dlpack.KDL_CUDA, "rocm": dlpack.KDL_ROCM}


@dataclass(frozen=True, slots=True)
class Device:
    """A device: ``device_type`` (``"cpu"``, ``"cuda"``) and ``device_id``; ``str`` gives
    ``"cuda:0"``."""

    device_type: str = "cuda"
    device_id: int = 0

    def __str__(self) -> str:
        return f"{self.device_type}:{self.device_id}"

    def __dlpack_device__(self) -> tuple:
        return (DLPACK_TYPES.get(self.device_type, dlpack.KDL_CUDA), self.device_id)


class DeviceAPI:
    """The driver of one GPU device, as the device-neutral runtime uses it.

    Attributes
    ----------
    name : str
        Device type in :class:`Device` names (``"cuda"``).
    driver_name : str
        How messages name the driver (``"CUDA"``).
    dlpack_type : int
        DLPack device type of its memory (``KDL_CUDA``).
    dlpack_types : tuple of int
        DLPack device types accepted as arguments (``KDL_CUDA``, ``KDL_CUDA_MANAGED``).
    dlpack_stream : int
        How DLPack and ``__cuda_array_interface__`` name the stream kernels run on.
    """

    name = ""
    driver_name = ""
    dlpack_type = 0
    dlpack_types: tuple = ()
    dlpack_stream = 1

    @property
    def device(self) -> Device:
        return Device(self.name, 0)

    # ------------------------------------------------------------------ context
    def context(self) -> None:
        """Make the device current in this thread (initialising the driver once)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all work on the stream kernels run on."""
        raise NotImplementedError

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int, what: str, func: str | None = None) -> int:
        """Device memory of ``nbytes`` (at least 1) bytes; ``what`` names it in errors."""
        raise NotImplementedError

    def free(self, ptrs) -> None:
        """Release device addresses; never raises (finalizers call it at exit)."""
        raise NotImplementedError

    def copy_to_device(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def copy_to_host(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def pointer_device(self, ptr: int) -> int | None:
        """The device ordinal owning address ``ptr``, or None if the driver does not know
        it."""
        raise NotImplementedError

    def sync_stream(self, stream: int) -> None:
        """Wait for the work of a foreign stream (an argument's producer)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ code
    def load(self, image: bytes, kernels: tuple, func: str) -> tuple:
        """Load a compiled module; returns ``(handle, functions)``, one function per
        kernel of ``kernels`` (:class:`~polytile.targets.c_printer.KernelInfo`), with
        their dynamic shared memory allowed."""
        raise NotImplementedError

    def unload(self, handle) -> None:
        """Unload a module; never raises (a finalizer calls it)."""
        raise NotImplementedError

    def launcher(self, func: str) -> Callable:
        """``launch(fn, kernel, params)``: start ``fn`` (of ``load``) with the launch shape
        of ``kernel`` and the address of its parameter array, on the stream."""
        raise NotImplementedError

    def wait(self, kernels: tuple, func: str) -> None:
        """Wait for launched kernels; a failure names them."""
        raise NotImplementedError

    @contextlib.contextmanager
    def timer(self, kernels: tuple, func: str):
        """Yield ``elapsed(launch_n, n)``: run ``launch_n(n)`` (which launches ``n``
        calls) between two device events and return the seconds between them."""
        raise NotImplementedError
        yield


__all__ = ["DLPACK_TYPES", "Device", "DeviceAPI"]
