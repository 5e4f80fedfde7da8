"""DLPack capsules read and written through ctypes (no compiled extension).

DLPack (dmlc/dlpack, ``include/dlpack/dlpack.h``) is the zero-copy exchange format of torch,
cupy, jax and numpy: ``obj.__dlpack__()`` returns a ``PyCapsule`` named ``"dltensor"``
holding a ``DLManagedTensor*`` (or ``"dltensor_versioned"`` holding a
``DLManagedTensorVersioned*`` when the consumer asked for ``max_version >= (1, 0)``).

* :func:`read_capsule` views a producer's capsule without consuming it: the capsule keeps
  the producer's tensor alive and frees it when garbage collected (the protocol's rule for
  capsules that were not renamed ``"used_dltensor"``). Keep the returned
  :class:`DLTensorView` (it references the capsule) while using its pointer.
* :func:`make_capsule` exports memory owned by a Python object: the managed tensor and the
  shape array live in a registry until the consumer calls the deleter, or until the
  capsule is collected unconsumed.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_ROCM = 10
KDL_CUDA_MANAGED = 13
DEVICE_NAMES = {KDL_CPU: "cpu", KDL_CUDA: "cuda", KDL_CUDA_HOST: "cuda_host",
                KDL_CUDA_MANAGED: "cuda_managed", 4: "opencl", 7: "vulkan", 8: "metal",
                10: "rocm", 14: "oneapi"}
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

# (type code, bits) -> dtype name and back; codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
_CODES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
          (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
          (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
          (6, 8): "bool"}
_DTYPE_CODES = {v: k for k, v in _CODES.items()}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class DLTensorView:
    """What a capsule describes: ``ptr`` is the first element (``byte_offset`` applied),
    ``strides`` are in elements (None: compact row-major), ``dtype`` a dtype name."""

    ptr: int
    shape: tuple
    strides: tuple | None
    dtype: str
    device_type: int
    device_id: int
    read_only: bool
    capsule: object

    @property
    def c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides)

    @property
    def nbytes(self) -> int:
        size = 1
        for n in self.shape:
            size *= n
        return size * itemsize(self.dtype)

    @property
    def device(self) -> str:
        name = DEVICE_NAMES.get(self.device_type, f"device type {self.device_type}")
        return f"{name}:{self.device_id}"


def is_c_contiguous(shape: tuple, strides: tuple | None, unit: int = 1) -> bool:
    """Whether ``strides`` (in multiples of ``unit``; None: compact) describe a dense
    row-major array of ``shape``; strides of extent-1 dimensions do not matter."""
    if strides is None:
        return True
    expect = unit
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 0:
            return True
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def read_capsule(capsule) -> DLTensorView:
    """Describe the tensor of a DLPack capsule (legacy or versioned) without consuming it.

    Raises
    ------
    TypeError
        If ``capsule`` is not an unconsumed DLPack capsule, or holds a vector or unknown
        dtype.
    """
    name = _api.PyCapsule_GetName(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name == _LEGACY:
        m = _DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, _LEGACY))
        t, flags = m.dl_tensor, 0
    elif name == _VERSIONED:
        m = _DLManagedTensorVersioned.from_address(
            _api.PyCapsule_GetPointer(capsule, _VERSIONED))
        t, flags = m.dl_tensor, m.flags
    else:
        raise TypeError(f"DLPack: expected a capsule named 'dltensor', got {name!r}")
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _CODES:
        raise TypeError(f"DLPack: unsupported element type (code {key[0]}, {key[1]} bits, "
                        f"{t.dtype.lanes} lanes)")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    return DLTensorView((t.data or 0) + t.byte_offset, shape, strides, _CODES[key],
                        t.device.device_type, t.device.device_id, bool(flags & _READ_ONLY),
                        capsule)


def from_object(obj, stream: int | None = None,
                stream_devices: tuple = (KDL_CUDA, KDL_CUDA_MANAGED)) -> DLTensorView:
    """``read_capsule(obj.__dlpack__(...))``, passing ``stream`` for tensors on a device
    type of ``stream_devices`` (the producer then orders its pending work before that
    stream's later work)."""
    dev_type, _ = obj.__dlpack_device__()
    if int(dev_type) in stream_devices and stream is not None:
        try:
            return read_capsule(obj.__dlpack__(stream=stream))
        except TypeError as exc:  # a producer without the stream keyword
            if "stream" not in str(exc):
                raise
    return read_capsule(obj.__dlpack__())


# ---------------------------------------------------------------------------- writing
_lock = threading.Lock()
_exports: dict = {}  # address of the managed tensor -> objects it keeps alive


def _release(addr) -> None:
    with _lock:
        _exports.pop(addr, None)


_deleter = _DELETER(_release)


def _capsule_destructor(capsule) -> None:
    # an unconsumed capsule still carries its name: free what it exported
    for name in (_LEGACY, _VERSIONED):
        if _is_valid(capsule, name):
            _release(_get_pointer(capsule, name))


_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)


def make_capsule(ptr: int, shape: tuple, dtype: str, device_type: int, device_id: int,
                 owner, versioned: bool = False, read_only: bool = False):
    """A DLPack capsule for the compact row-major array at ``ptr``, keeping ``owner``
    alive until the consumer's deleter call (or the capsule's collection if unconsumed)."""
    n = len(shape)
    dims = (ctypes.c_int64 * max(n, 1))(*shape)
    code, bits = _DTYPE_CODES[dtype]
    t = _DLTensor(ctypes.c_void_p(ptr or None), _DLDevice(device_type, device_id), n,
                  _DLDataType(code, bits, 1), ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)),
                  None, 0)
    if versioned:
        m = _DLManagedTensorVersioned(_DLPackVersion(1, 0), None, _deleter,
                                      _READ_ONLY if read_only else 0, t)
        name = _VERSIONED
    else:
        m = _DLManagedTensor(t, None, _deleter)
        name = _LEGACY
    addr = ctypes.addressof(m)
    with _lock:
        _exports[addr] = (m, dims, owner)
    return _api.PyCapsule_New(addr, name, ctypes.cast(_destructor, ctypes.c_void_p))


def live_exports() -> int:
    """Number of exported tensors not yet released (for tests)."""
    return len(_exports)
