"""Device arrays and device array arguments, for every GPU backend.

An :class:`NDArray` owns a block of device memory (freed when the array is garbage
collected) through a :class:`~.device_api.DeviceAPI`, holds a C-contiguous array of one
polytile dtype, and copies to and from numpy synchronously. It exports itself without
copies through ``__dlpack__``/``__dlpack_device__`` (``torch.from_dlpack(x)``) and
``__cuda_array_interface__`` (cupy, numba).

:func:`device_array` recognises an argument of a GPU function: an :class:`NDArray`, any
object with ``__dlpack__`` on the device (torch, cupy, jax), or one with
``__cuda_array_interface__``.

Nothing here touches a driver until memory is, so importing works on any machine.
"""

from __future__ import annotations

import weakref

import numpy as np

from polytile.errors import format_error
from polytile.schedule.loop_ir import Buffer
from polytile.te import dtype as dt

from . import dlpack
from .device_api import DeviceAPI


class NDArray:
    """A C-contiguous array in the memory of device 0 of a GPU runtime.

    Create with :func:`array` or :func:`empty` (``polytile.nd.array(x, device="cuda")``).
    Attributes: ``shape`` (tuple), ``dtype`` (``numpy.dtype``), ``device``
    (:class:`~.device_api.Device`), ``ndim``, ``size``, ``nbytes`` (bytes), ``data_ptr``
    (device address), ``api`` (the :class:`~.device_api.DeviceAPI` owning the memory).
    """

    __slots__ = ("__weakref__", "_finalizer", "api", "data_ptr", "device", "dtype", "nbytes",
                 "shape")
    c_contiguous = True
    read_only = False

    def __init__(self, shape, dtype, api: DeviceAPI) -> None:
        self.shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in self.shape):
            raise ValueError(format_error("nd.empty", f"negative extent in shape {shape}",
                                          "expected extents >= 0"))
        self.dtype = dt.to_numpy(dt.canonical(dtype))
        self.api = api
        self.device = api.device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        api.context()
        self.data_ptr = api.alloc(max(self.nbytes, 1), f"{self.nbytes} bytes")
        self._finalizer = weakref.finalize(self, api.free, (self.data_ptr,))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents (waits for pending work on the kernels' stream)."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self.api.context()
            self.api.copy_to_host(out.ctypes.data, self.data_ptr, self.nbytes)
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
        # not np.ascontiguousarray, which makes a 0-d array 1-d
        a = np.asarray(np.asarray(source), dtype=self.dtype, order="C")
        if a.shape != self.shape:
            raise ValueError(format_error("NDArray.copyfrom", f"source has shape {a.shape}",
                                          f"expected shape {self.shape}"))
        if self.nbytes:
            self.api.context()
            self.api.copy_to_device(self.data_ptr, a.ctypes.data, self.nbytes)
        return self

    def copyto(self, target):
        """Copy to ``target``: a device (returns a new array there: ``polytile.cpu()``
        gives a host array) or an array of the same shape and dtype (overwritten;
        returned); see :func:`polytile.nd.copyto`."""
        from polytile.nd import copyto

        return copyto(self, target)

    # ------------------------------------------------------------------ exchange
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule viewing this array (no copy); see the Python array API."""
        if copy:
            raise BufferError("NDArray.__dlpack__: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"NDArray.__dlpack__: cannot export to device {dl_device}")
        if stream is not None and stream not in (-1, self.api.dlpack_stream):
            self.api.synchronize()  # our work runs on our stream; the consumer uses another
        versioned = max_version is not None and next(iter(max_version)) >= 1
        return dlpack.make_capsule(self.data_ptr, self.shape, self.dtype.name,
                                   self.api.dlpack_type, 0, self, versioned=versioned)

    def __dlpack_device__(self) -> tuple:
        return (self.api.dlpack_type, 0)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "strides": None,
                "data": (self.data_ptr, False), "version": 3,
                "stream": self.api.dlpack_stream}

    def __repr__(self) -> str:
        return f"<polytile.nd.NDArray shape={self.shape} dtype={self.dtype} device={self.device}>"

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)


def empty(shape, dtype, api: DeviceAPI) -> NDArray:
    """An uninitialised device array of ``api``'s device.

    Raises
    ------
    DeviceNotFoundError
        Without the device.
    TypeError
        For a dtype polytile does not support.
    """
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if dt.is_int4(dt.canonical(dtype)):   # packed: two elements per byte
        shape = dt.packed_shape(shape)
    return NDArray(shape, dtype, api)


def array(obj, api: DeviceAPI, dtype=None) -> NDArray:
    """A device copy of ``obj`` (a numpy array, an :class:`NDArray` or anything
    ``numpy.asarray`` accepts), converted to ``dtype`` first when given.

    Raises
    ------
    DeviceNotFoundError
        Without the device.
    TypeError
        For a dtype polytile does not support.
    """
    if isinstance(obj, NDArray):
        obj = obj.numpy()
    a = host_array(obj, dtype)
    return NDArray(a.shape, a.dtype, api).copyfrom(a)


def host_array(obj, dtype=None) -> np.ndarray:
    """``obj`` as a numpy array of polytile dtype ``dtype`` (its own when None): for
    ``bfloat16``, an array that already holds bfloat16 (``ml_dtypes.bfloat16``, or
    ``uint16`` bit patterns) is kept, anything else is rounded by
    :func:`polytile.te.dtype.bfloat16_array`; for ``int4``/``uint4``, ``obj`` holds the
    values (any integer array) and the result is their packed ``uint8`` form
    (:func:`polytile.te.dtype.pack_int4`).

    Raises
    ------
    TypeError
        For a dtype polytile does not support.
    """
    if dtype is not None and dt.canonical(dtype) == "bfloat16":
        a = np.asarray(obj)
        return a if dt.is_bfloat16_array_dtype(a.dtype) else dt.bfloat16_array(a)
    if dtype is not None and dt.is_int4(dt.canonical(dtype)):
        return dt.pack_int4(np.asarray(obj), dt.canonical(dtype))
    a = np.asarray(obj) if dtype is None else np.asarray(obj, dtype=dtype)
    dt.canonical(a.dtype)
    return a


# ---------------------------------------------------------------------------- arguments
def device_array(fname: str, p: Buffer, a, api: DeviceAPI):
    """``(ptr, view)`` of array argument ``a`` for buffer parameter ``p``; ``view`` has
    ``shape``, ``dtype``, ``c_contiguous``, ``read_only``, ``nbytes`` and keeps the
    producer's export alive.

    Raises
    ------
    TypeError
        A numpy array (host memory), an array on another device, anything else.
    """
    dev = str(api.device)
    if isinstance(a, NDArray) and a.api is api:
        return a.data_ptr, a
    if isinstance(a, np.ndarray):
        raise TypeError(format_error(
            fname, f"argument {p.name!r} is a numpy.ndarray (host memory)",
            f"expected a {api.driver_name} array", hint=f"copy it to the GPU with "
            f"polytile.nd.array({p.name}, device={api.name!r}) (or pass a torch "
            f"{api.driver_name} tensor)"))
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        try:
            view = dlpack.from_object(a, stream=api.dlpack_stream,
                                      stream_devices=api.dlpack_types)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) could not be exported "
                f"through DLPack: {exc}", f"expected a {api.driver_name} array")) from exc
        if view.device_type not in api.dlpack_types or view.device_id != 0:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) is on {view.device}",
                f"expected an array on {dev}", hint="move it to the GPU first"))
        return view.ptr, view
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(fname, p, a, cai, api)
    raise TypeError(format_error(
        fname, f"argument {p.name!r} is a {type(a).__name__}",
        f"expected a {api.driver_name} array of dtype {p.dtype}: polytile.nd.array, a torch "
        f"{api.driver_name} tensor or an object with __dlpack__ or __cuda_array_interface__"))


class _CAIView:
    """``__cuda_array_interface__`` (v2/v3) seen like a DLPack view."""

    def __init__(self, cai: dict, owner):
        self.owner = owner
        self.shape = tuple(int(n) for n in cai["shape"])
        self.dtype = np.dtype(cai["typestr"])
        ptr, self.read_only = cai["data"]
        self.ptr = int(ptr or 0)
        self.nbytes = self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64))
        self.c_contiguous = dlpack.is_c_contiguous(self.shape, cai.get("strides"),
                                                   self.dtype.itemsize)


def _from_cai(fname: str, p: Buffer, a, cai: dict, api: DeviceAPI):
    view = _CAIView(cai, a)
    api.context()
    if view.nbytes:
        ordinal = api.pointer_device(view.ptr)
        if ordinal is None:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) has a data pointer the "
                f"{api.driver_name} driver does not know", f"expected device memory of "
                f"{api.device}"))
        if ordinal != 0:
            raise TypeError(format_error(
                fname, f"argument {p.name!r} ({type(a).__name__}) is on "
                f"{api.name}:{ordinal}", f"expected an array on {api.device}"))
    stream = cai.get("stream")
    if stream not in (None, api.dlpack_stream):  # the producer's pending work
        api.sync_stream(int(stream))
    return view.ptr, view


__all__ = ["NDArray", "array", "device_array", "empty", "host_array"]
