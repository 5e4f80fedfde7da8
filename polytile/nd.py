"""``polytile.nd``: arrays on a device (TVM's ``tvm.nd``).

``polytile.nd.array(x)`` (device ``"cpu"``, TVM's default) gives a C-contiguous numpy
array with ``.numpy()``, which functions built for ``llvm`` take; with ``device="cuda"`` it
copies to CUDA device 0 and returns an :class:`NDArray` (``.numpy()`` copies back) for
functions built for ``cuda``, which also accept torch/cupy arrays (``__dlpack__``,
``__cuda_array_interface__``). ``polytile.nd.empty(shape, dtype, device)`` allocates;
``polytile.cpu()`` / ``polytile.cuda()`` name devices. Importing this module needs no GPU
and no cuda-python.
"""

from __future__ import annotations

import numpy as np

from polytile.targets.cuda.ndarray import Device, NDArray
from polytile.targets.cuda.ndarray import array as _cuda_array
from polytile.targets.cuda.ndarray import device as _cuda_device
from polytile.targets.cuda.ndarray import empty as _cuda_empty
from polytile.te import dtype as dt

_CPU_NAMES = ("cpu", "llvm", "host")


class CPUArray(np.ndarray):
    """A numpy array on the host, with TVM's ``NDArray`` spelling (``.numpy()``,
    ``.device``); any function built for ``llvm`` takes it as a numpy array."""

    device = Device("cpu", 0)

    def numpy(self) -> np.ndarray:
        """A plain numpy copy."""
        return np.array(self, copy=True)


def _is_cpu(dev) -> bool:
    if isinstance(dev, Device):
        return dev.device_type == "cpu"
    return isinstance(dev, str) and dev.partition(":")[0].strip().lower() in _CPU_NAMES


def device(dev_type="cpu", dev_id: int | None = None) -> Device:
    """The device named ``dev_type``: ``"cpu"`` or ``"cuda"`` / ``"cuda:0"``.

    Raises
    ------
    TargetError
        For another kind of device, or a CUDA index other than 0.
    """
    if _is_cpu(dev_type):
        return Device("cpu", 0)
    return _cuda_device(dev_type, dev_id)


def cpu(dev_id: int = 0) -> Device:
    """The host (TVM's ``tvm.cpu(0)``)."""
    return Device("cpu", 0)


def cuda(dev_id: int = 0) -> Device:
    """CUDA device ``dev_id`` (TVM's ``tvm.cuda(0)``)."""
    return _cuda_device("cuda", dev_id)


def array(obj, device="cpu", dtype=None):
    """A copy of ``obj`` on ``device``: a :class:`CPUArray` on the host, an
    :class:`NDArray` on a CUDA device.

    Raises
    ------
    TargetError
        For an unknown device. DeviceNotFoundError: CUDA without a GPU.
    TypeError
        For a dtype polytile does not support.
    """
    if not _is_cpu(device):
        return _cuda_array(obj, device, dtype)
    if isinstance(obj, NDArray):
        obj = obj.numpy()
    a = np.array(obj, dtype=dtype, copy=True, order="C")
    dt.canonical(a.dtype)
    return a.view(CPUArray)


def empty(shape, dtype="float32", device="cpu"):
    """An uninitialised array on ``device`` (see :func:`array`)."""
    if not _is_cpu(device):
        return _cuda_empty(shape, dtype, device)
    return np.empty(shape, dtype=dt.canonical(dtype)).view(CPUArray)


__all__ = ["CPUArray", "Device", "NDArray", "array", "cpu", "cuda", "device", "empty"]
