"""Device arrays: ``polytile.nd.array`` / ``polytile.nd.empty`` and :class:`NDArray`.

An :class:`NDArray` owns a block of device memory of CUDA device 0 (``cuMemAlloc``, freed
when the array is garbage collected), holds a C-contiguous array of one polytile dtype, and
copies to and from numpy synchronously. It exports itself without copies through
``__dlpack__``/``__dlpack_device__`` (``torch.from_dlpack(x)``) and
``__cuda_array_interface__`` (cupy, numba).

Nothing here imports cuda-python until memory is touched, so ``import polytile.nd`` works
on any machine.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from polytile.errors import TargetError, format_error
from polytile.te import dtype as dt

from . import dlpack

_DEVICE_ALIASES = {"cuda": "cuda", "gpu": "cuda", "nvidia": "cuda"}


@dataclass(frozen=True, slots=True)
class Device:
    """A device: ``device_type`` (``"cuda"``) and ``device_id``; ``str`` gives
    ``"cuda:0"``."""

    device_type: str = "cuda"
    device_id: int = 0

    def __str__(self) -> str:
        return f"{self.device_type}:{self.device_id}"

    def __dlpack_device__(self) -> tuple:
        return (dlpack.KDL_CUDA, self.device_id)


def device(dev_type="cuda", dev_id: int | None = None) -> Device:
    """The device named ``dev_type``: ``"cuda"``, ``"cuda:0"``, ``"gpu"`` or a
    :class:`Device`; ``dev_id`` overrides the index.

    Raises
    ------
    TargetError
        For another kind of device or an index other than 0 (one GPU is supported).
    """
    if isinstance(dev_type, Device):
        kind, idx = dev_type.device_type, dev_type.device_id
    elif isinstance(dev_type, str):
        kind, _, num = dev_type.partition(":")
        kind = _DEVICE_ALIASES.get(kind.strip().lower(), kind)
        try:
            idx = int(num) if num else 0
        except ValueError:
            idx = -1
    else:
        raise TargetError(format_error("nd.device", f"got {type(dev_type).__name__} "
                                       f"{dev_type!r}", "expected 'cuda', 'cuda:0' or a "
                                       "Device"))
    if dev_id is not None:
        idx = int(dev_id)
    if kind != "cuda":
        raise TargetError(format_error(
            "nd.device", f"device {dev_type!r} is not supported", "expected 'cuda'",
            hint="functions built for 'llvm' take numpy arrays directly"))
    if idx != 0:
        raise TargetError(format_error("nd.device", f"device index {idx} in {dev_type!r}",
                                       "expected cuda:0 (polytile drives one GPU)"))
    return Device("cuda", 0)


_parse_device = device  # array() and empty() take a parameter named device


class NDArray:
    """A C-contiguous array in the memory of CUDA device 0.

    Create with :func:`array` or :func:`empty`. Attributes: ``shape`` (tuple), ``dtype``
    (``numpy.dtype``), ``device`` (:class:`Device`), ``ndim``, ``size``, ``nbytes`` (bytes),
    ``data_ptr`` (device address).
    """

    __slots__ = ("__weakref__", "_finalizer", "data_ptr", "device", "dtype", "nbytes", "shape")
    c_contiguous = True
    read_only = False

    def __init__(self, shape, dtype) -> None:
        from .runtime import check, context, free_device_memory

        self.shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in self.shape):
            raise ValueError(format_error("nd.empty", f"negative extent in shape {shape}",
                                          "expected extents >= 0"))
        self.dtype = np.dtype(dt.canonical(dtype))
        self.device = Device("cuda", 0)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        st = context()
        self.data_ptr = int(check(st["driver"].cuMemAlloc(max(self.nbytes, 1)),
                                  f"cuMemAlloc of {self.nbytes} bytes"))
        self._finalizer = weakref.finalize(self, free_device_memory, (self.data_ptr,))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents (waits for pending work on the legacy stream)."""
        from .runtime import check, context

        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            st = context()
            check(st["driver"].cuMemcpyDtoH(out.ctypes.data, self.data_ptr, self.nbytes),
                  "cuMemcpyDtoH")
        return out

    asnumpy = numpy

    def copyfrom(self, source) -> NDArray:
        """Overwrite the contents with ``source`` (array-like of the same shape, converted
        to this dtype); returns ``self``.

        Raises
        ------
        ValueError
            If the shapes differ.
        """
        from .runtime import check, context

        a = np.ascontiguousarray(np.asarray(source), dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(format_error("NDArray.copyfrom", f"source has shape {a.shape}",
                                          f"expected shape {self.shape}"))
        if self.nbytes:
            st = context()
            check(st["driver"].cuMemcpyHtoD(self.data_ptr, a.ctypes.data, self.nbytes),
                  "cuMemcpyHtoD")
        return self

    # ------------------------------------------------------------------ exchange
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule viewing this array (no copy); see the Python array API."""
        if copy:
            raise BufferError("NDArray.__dlpack__: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"NDArray.__dlpack__: cannot export to device {dl_device}")
        if stream is not None and stream not in (-1, 1):
            from .runtime import synchronize

            synchronize()  # our work runs on the legacy stream; the consumer uses another
        versioned = max_version is not None and next(iter(max_version)) >= 1
        return dlpack.make_capsule(self.data_ptr, self.shape, self.dtype.name,
                                   dlpack.KDL_CUDA, 0, self, versioned=versioned)

    def __dlpack_device__(self) -> tuple:
        return (dlpack.KDL_CUDA, 0)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "strides": None,
                "data": (self.data_ptr, False), "version": 3, "stream": 1}

    def __repr__(self) -> str:
        return f"<polytile.nd.NDArray shape={self.shape} dtype={self.dtype} device={self.device}>"

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)


def empty(shape, dtype="float32", device="cuda") -> NDArray:
    """An uninitialised device array.

    Raises
    ------
    TargetError
        For a device other than cuda:0.
    DeviceNotFoundError
        Without a CUDA device.
    TypeError
        For a dtype polytile does not support.
    """
    _parse_device(device)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    return NDArray(shape, dtype)


def array(obj, device="cuda", dtype=None) -> NDArray:
    """A device copy of ``obj`` (a numpy array or anything ``numpy.asarray`` accepts).

    Parameters
    ----------
    obj : array_like
    device : str or Device
        ``"cuda"`` / ``"cuda:0"``.
    dtype : optional
        Convert to this dtype first (default: ``obj``'s).

    Raises
    ------
    TargetError
        For a device other than cuda:0.
    DeviceNotFoundError
        Without a CUDA device.
    TypeError
        For a dtype polytile does not support.
    """
    _parse_device(device)
    if isinstance(obj, NDArray):
        obj = obj.numpy()
    a = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=dtype)
    dt.canonical(a.dtype)
    return NDArray(a.shape, a.dtype).copyfrom(a)
