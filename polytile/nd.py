"""``polytile.nd``: arrays on a device (TVM's ``tvm.nd``).

``polytile.nd.array(x)`` (device ``"cpu"``, TVM's default) gives a C-contiguous numpy
array with ``.numpy()``, which functions built for ``llvm`` take; with ``device="cuda"`` it
copies to CUDA device 0 and returns an :class:`NDArray` (``.numpy()`` copies back) for
functions built for ``cuda``, which also accept torch/cupy arrays (``__dlpack__``,
``__cuda_array_interface__``). ``polytile.nd.empty(shape, dtype, device)`` allocates;
``polytile.cpu()`` / ``polytile.cuda()`` name devices. GPU device names are those the GPU
backends of the registry declare (``Backend.device_names``), their memory that of the
backend's ``device_api()``. Importing this module needs no GPU and no cuda-python.

``int4``/``uint4`` tensors travel as ``uint8`` arrays packed two elements per byte along
their last axis (:func:`pack_int4`, :func:`unpack_int4`; see :mod:`polytile.te.dtype`).
"""

from __future__ import annotations

import numpy as np

from polytile.backend import Backend, backends
from polytile.errors import TargetError, format_error
from polytile.targets.gpu.arrays import NDArray
from polytile.targets.gpu.arrays import array as _device_array
from polytile.targets.gpu.arrays import empty as _device_empty
from polytile.targets.gpu.arrays import host_array
from polytile.targets.gpu.device_api import Device
from polytile.te import dtype as dt
from polytile.te.dtype import pack_int4, unpack_int4

_CPU_NAMES = ("cpu", "llvm", "host")


class CPUArray(np.ndarray):
    """A numpy array on the host, with TVM's ``NDArray`` spelling (``.numpy()``,
    ``.device``); any function built for ``llvm`` takes it as a numpy array."""

    device = Device("cpu", 0)

    def numpy(self) -> np.ndarray:
        """A plain numpy copy."""
        return np.array(self, copy=True)

    asnumpy = numpy

    def copyfrom(self, source) -> CPUArray:
        """Overwrite the contents with ``source`` (array-like of the same shape, converted
        to this dtype, as the GPU :class:`NDArray`'s); returns ``self``.

        Raises
        ------
        ValueError
            If the shapes differ.
        """
        a = np.asarray(source, dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(format_error("NDArray.copyfrom", f"source has shape {a.shape}",
                                          f"expected shape {self.shape}"))
        self[...] = a
        return self

    def copyto(self, target):
        """Copy to ``target``: a device (returns a new array there) or an array of the same
        shape and dtype (overwritten; returned). See :func:`copyto`."""
        return copyto(self, target)


def _is_cpu(dev) -> bool:
    if isinstance(dev, Device):
        return dev.device_type == "cpu"
    return isinstance(dev, str) and dev.partition(":")[0].strip().lower() in _CPU_NAMES


def _gpu_backend(dev, dev_id: int | None = None) -> tuple[Backend, int]:
    """The GPU backend a device name refers to, and the device index.

    Raises
    ------
    TargetError
        For a name no GPU backend declares, or an index other than 0.
    """
    if isinstance(dev, Device):
        kind, idx = dev.device_type, dev.device_id
    elif isinstance(dev, str):
        kind, _, num = dev.partition(":")
        kind = kind.strip().lower()
        try:
            idx = int(num) if num else 0
        except ValueError:
            idx = -1
    else:
        raise TargetError(format_error("nd.device", f"got {type(dev).__name__} {dev!r}",
                                       "expected 'cuda', 'cuda:0' or a Device"))
    if dev_id is not None:
        idx = int(dev_id)
    gpus = backends(lambda b: b.is_gpu and b.device_api() is not None)
    found = next((b for b in gpus if kind in b.device_names or kind == b.kind), None)
    if found is None:
        names = " or ".join(repr(b.kind) for b in gpus) or "a GPU backend"
        raise TargetError(format_error(
            "nd.device", f"device {dev!r} is not supported", f"expected {names}",
            hint="functions built for 'llvm' take numpy arrays directly"))
    if idx != 0:
        raise TargetError(format_error("nd.device", f"device index {idx} in {dev!r}",
                                       f"expected {found.kind}:0 (polytile drives one GPU)"))
    return found, idx


def device(dev_type="cpu", dev_id: int | None = None) -> Device:
    """The device named ``dev_type``: ``"cpu"``, ``"cuda"`` / ``"cuda:0"`` / ``"gpu"``, or
    a name another GPU backend declares.

    Raises
    ------
    TargetError
        For another kind of device, or a GPU index other than 0.
    """
    if _is_cpu(dev_type):
        return Device("cpu", 0)
    return _gpu_backend(dev_type, dev_id)[0].device_api().device


def cpu(dev_id: int = 0) -> Device:
    """The host (TVM's ``tvm.cpu(0)``)."""
    return Device("cpu", 0)


def cuda(dev_id: int = 0) -> Device:
    """CUDA device ``dev_id`` (TVM's ``tvm.cuda(0)``)."""
    return device("cuda", dev_id)


def array(obj, device="cpu", dtype=None):
    """A copy of ``obj`` on ``device``: a :class:`CPUArray` on the host, an
    :class:`NDArray` on a GPU. With ``dtype="int4"``/``"uint4"``, ``obj`` holds the values
    and the array is their packed ``uint8`` form (:func:`pack_int4`).

    Raises
    ------
    TargetError
        For an unknown device. DeviceNotFoundError: a GPU device on a machine without one.
    TypeError
        For a dtype polytile does not support.
    """
    if not _is_cpu(device):
        return _device_array(obj, _gpu_backend(device)[0].device_api(), dtype)
    if isinstance(obj, NDArray):
        obj = obj.numpy()
    a = np.array(host_array(obj, dtype), copy=True, order="C")
    return a.view(CPUArray)


def copyto(src, target):
    """Copy array ``src`` (a :class:`CPUArray`, numpy array or :class:`NDArray`) to
    ``target`` (TVM's ``NDArray.copyto``).

    ``target`` is a device (a :class:`Device` or a name such as ``"cuda"``): the result is a
    new array on it. Or it is an array (:class:`CPUArray`, numpy array, :class:`NDArray`) of
    exactly ``src``'s shape and dtype: its contents are overwritten, and it is returned.

    Raises
    ------
    ValueError
        If the target array's shape or dtype differs from ``src``'s, or it is read-only.
    TypeError
        For a target that is neither a device nor an array.
    TargetError, DeviceNotFoundError
        For an unknown device, or a GPU device on a machine without one.
    """
    if isinstance(target, (Device, str)):
        return array(src, device=target)
    if not isinstance(target, (np.ndarray, NDArray)):
        raise TypeError(format_error(
            "NDArray.copyto", f"target is a {type(target).__name__}",
            "expected a device (polytile.cpu(), polytile.cuda()) or an array"))
    shape, dtype = tuple(src.shape), np.dtype(src.dtype)
    if tuple(target.shape) != shape or np.dtype(target.dtype) != dtype:
        raise ValueError(format_error(
            "NDArray.copyto", f"target has shape {tuple(target.shape)} and dtype "
            f"{np.dtype(target.dtype)}", f"expected shape {shape} and dtype {dtype}, as the "
            f"source", hint="copy to a device instead to get a new array"))
    if isinstance(src, NDArray) and isinstance(target, NDArray) and src.api is target.api:
        if src.nbytes:
            src.api.context()
            src.api.copy_device_to_device(target.data_ptr, src.data_ptr, src.nbytes)
        return target
    host = src.numpy() if isinstance(src, NDArray) else np.asarray(src)
    if isinstance(target, NDArray):
        return target.copyfrom(host)
    if not target.flags.writeable:
        raise ValueError(format_error("NDArray.copyto", "target array is read-only",
                                      "expected a writeable array"))
    np.copyto(target, host)
    return target


def empty(shape, dtype="float32", device="cpu"):
    """An uninitialised array on ``device`` (see :func:`array`); for ``int4``/``uint4``
    the ``uint8`` array of their packed form (:func:`pack_int4`)."""
    if not _is_cpu(device):
        return _device_empty(shape, dtype, _gpu_backend(device)[0].device_api())
    if dt.is_int4(dt.canonical(dtype)):
        shape = dt.packed_shape((shape,) if isinstance(shape, (int, np.integer)) else shape)
    return np.empty(shape, dtype=dt.to_numpy(dt.canonical(dtype))).view(CPUArray)


__all__ = ["pack_int4", "unpack_int4", "CPUArray", "Device", "NDArray", "array", "copyto", "cpu", "cuda", "device",
           "empty"]
