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

    # TVM's ``Device`` attributes. A GPU device asks its backend's DeviceAPI (the driver;
    # DeviceNotFoundError without the device, except ``exist``); the host answers from
    # the operating system, and None where TVM's CPU device has no value either.
    def _api(self):
        if self.device_type == "cpu":
            return None
        from polytile.nd import _gpu_backend  # the registry names the device's backend

        return _gpu_backend(self)[0].device_api()

    def _attr(self, name: str, cpu_value=None):
        api = self._api()
        return cpu_value if api is None else api.attribute(name)

    @property
    def exist(self) -> bool:
        """Whether the device is present on this machine (never raises)."""
        api = self._api()
        return True if api is None else api.exists()

    @property
    def available_global_memory(self) -> int:
        """Free device memory in bytes (the host: its available physical memory)."""
        return self._attr("available_global_memory", _host_memory("SC_AVPHYS_PAGES"))

    @property
    def total_global_memory(self) -> int:
        """Device memory in bytes (the host: its physical memory)."""
        return self._attr("total_global_memory", _host_memory("SC_PHYS_PAGES"))

    @property
    def compute_version(self) -> str | None:
        """Compute capability as ``"major.minor"`` (``"9.0"`` on an H100); None on the
        host."""
        return self._attr("compute_version")

    @property
    def max_threads_per_block(self) -> int | None:
        """Most threads in one block; None on the host."""
        return self._attr("max_threads_per_block")

    @property
    def warp_size(self) -> int | None:
        """Threads per warp; None on the host."""
        return self._attr("warp_size")

    @property
    def multi_processor_count(self) -> int:
        """Streaming multiprocessors (the host: its CPUs)."""
        import os

        return self._attr("multi_processor_count", os.cpu_count() or 1)

    @property
    def max_shared_memory_per_block(self) -> int | None:
        """Shared memory a block may use without opting in, in bytes; None on the host."""
        return self._attr("max_shared_memory_per_block")

    @property
    def device_name(self) -> str:
        """The device's name as its driver reports it (the host: ``"cpu"``)."""
        return self._attr("device_name", "cpu")

    def sync(self) -> None:
        """Wait for all work queued on the device (TVM's ``dev.sync()``); nothing to wait
        for on the host, whose functions return when done."""
        api = self._api()
        if api is not None:
            api.context()
            api.synchronize()


def _host_memory(pages: str) -> int | None:
    import os

    try:
        return int(os.sysconf(pages)) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


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

    def exists(self) -> bool:
        """Whether the device is present (never raises)."""
        raise NotImplementedError

    def attribute(self, name: str):
        """Device attribute ``name`` of :class:`Device` (``"compute_version"``,
        ``"max_threads_per_block"``, ``"available_global_memory"``...).

        Raises
        ------
        DeviceNotFoundError
            Without the device.
        """
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

    def copy_device_to_device(self, dst: int, src: int, nbytes: int) -> None:
        """Copy within the device's memory (through the host unless a driver does
        better)."""
        import ctypes

        tmp = ctypes.create_string_buffer(nbytes)
        self.copy_to_host(ctypes.addressof(tmp), src, nbytes)
        self.copy_to_device(dst, ctypes.addressof(tmp), nbytes)

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
