"""The CUDA driver API (``cuda.bindings.driver``): initialisation, context, checked calls.

Context: the primary context of device 0, retained once per process and made current in
each calling thread; torch and cupy use the same context, so their pointers are valid here.
Every kernel runs on the legacy default stream (handle 0), the one torch and cupy use by
default, so their work before and after a call is ordered with ours.

Every driver call is checked (:func:`check`); a failure raises
:class:`~polytile.errors.DeviceError` naming the call, the error
(``CUDA_ERROR_ILLEGAL_ADDRESS``...) and the kernel and function concerned. Without a GPU,
driver or cuda-python, :func:`context` raises :class:`~polytile.errors.DeviceNotFoundError`
(a ``TargetError`` and a ``RuntimeError``). ``_state`` holds the driver module and the
context; tests swap in an emulated driver there.
"""

from __future__ import annotations

import threading

from polytile.errors import DeviceError, DeviceNotFoundError, format_error

_lock = threading.Lock()
_state: dict = {}
LEGACY_STREAM = 0  # CUstream handle of the legacy default stream
DLPACK_LEGACY_STREAM = 1  # how DLPack and __cuda_array_interface__ name that stream


# ---------------------------------------------------------------------------- driver
def driver():
    """The ``cuda.bindings.driver`` module (``cuda.cuda`` of older cuda-python), or None."""
    if "driver" not in _state:
        try:
            from cuda.bindings import driver as drv
        except ImportError:
            try:
                from cuda import cuda as drv  # cuda-python < 12.6
            except ImportError:
                drv = None
        _state["driver"] = drv
    return _state["driver"]


def _error_text(err) -> str:
    drv = driver()
    try:
        _, name = drv.cuGetErrorName(err)
        _, desc = drv.cuGetErrorString(err)
        return f"{name.decode()} ({desc.decode()})"
    except Exception:  # noqa: BLE001 - the driver cannot even describe its error
        return f"CUresult {int(err)}"


def check(result, what: str, kernel: str | None = None, func: str | None = None):
    """Unpack the ``(CUresult, values...)`` tuple of a driver call.

    Returns the single value, a tuple of several, or None.

    Raises
    ------
    DeviceError
        When the result is not ``CUDA_SUCCESS``; the message names ``what``, the error and,
        when given, the kernel and function.
    """
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        where = ""
        if kernel is not None:
            where = f" in kernel {kernel!r}"
        if func is not None:
            where += f" of function {func!r}"
        text = _error_text(err)
        sticky = any(x in text for x in ("ILLEGAL_ADDRESS", "LAUNCH_FAILED", "ASSERT",
                                          "ILLEGAL_INSTRUCTION", "MISALIGNED"))
        raise DeviceError(format_error(
            "cuda", f"{what}{where} failed with {text}", "expected CUDA_SUCCESS",
            hint="the CUDA context is unusable after this error: restart the process"
            if sticky else None))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _init() -> dict:
    """Initialise the driver and retain device 0's primary context, once."""
    with _lock:
        if "context" in _state:
            return _state
        if "failure" in _state:
            raise DeviceNotFoundError(_state["failure"])
        drv = driver()
        why = None
        if drv is None:
            why = "cuda-python is not installed (pip install cuda-python)"
        else:
            try:
                (err,) = drv.cuInit(0)
                if int(err) != 0:
                    why = f"cuInit failed with {_error_text(err)}"
                else:
                    n = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
                    if n < 1:
                        why = "the driver reports 0 devices"
            except Exception as exc:  # noqa: BLE001 - libcuda.so itself is missing
                why = f"the CUDA driver library cannot be loaded ({exc})"
        if why is not None:
            _state["failure"] = format_error(
                "cuda", f"no CUDA device was found: {why}", "expected an NVIDIA GPU with "
                "its driver and cuda-python", hint="the function was built (get_source() "
                "shows it); run it on a machine with a GPU")
            raise DeviceNotFoundError(_state["failure"])
        dev = check(drv.cuDeviceGet(0), "cuDeviceGet")
        ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _state.update(device=dev, context=ctx, stream=drv.CUstream(LEGACY_STREAM))
        return _state


def context() -> dict:
    """Make device 0's primary context current in this thread; return the driver state
    (``driver``, ``device``, ``context``, ``stream``).

    Raises
    ------
    DeviceNotFoundError
        Without cuda-python, a driver or a device.
    """
    st = _init()
    check(st["driver"].cuCtxSetCurrent(st["context"]), "cuCtxSetCurrent")
    return st


def device_count() -> int:
    """Number of CUDA devices (0 without driver or cuda-python); never raises."""
    drv = driver()
    if drv is None:
        return 0
    try:
        (err,) = drv.cuInit(0)
        if int(err) != 0:
            return 0
        err, n = drv.cuDeviceGetCount()
        return int(n) if int(err) == 0 else 0
    except Exception:  # noqa: BLE001 - no libcuda.so
        return 0


def device_compute_capability() -> tuple | None:
    """``(major, minor)`` of device 0, or None without a device."""
    if device_count() < 1:
        return None
    st = _init()
    drv = st["driver"]
    a = drv.CUdevice_attribute
    major = check(drv.cuDeviceGetAttribute(
        a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, st["device"]), "cuDeviceGetAttribute")
    minor = check(drv.cuDeviceGetAttribute(
        a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, st["device"]), "cuDeviceGetAttribute")
    return int(major), int(minor)


def synchronize() -> None:
    """Wait for all work on the legacy default stream."""
    st = context()
    check(st["driver"].cuStreamSynchronize(st["stream"]), "cuStreamSynchronize")


def free_device_memory(ptrs) -> None:
    """``cuMemFree`` each address, ignoring failures (finalizers run at interpreter exit,
    when the driver may already be gone)."""
    if "context" not in _state:
        return
    drv = _state["driver"]
    try:
        drv.cuCtxSetCurrent(_state["context"])
        for ptr in ptrs:
            drv.cuMemFree(ptr)
    except Exception:  # noqa: BLE001, S110 - see the docstring
        pass


def _unload(mod) -> None:
    if "context" not in _state:
        return
    try:
        _state["driver"].cuCtxSetCurrent(_state["context"])
        _state["driver"].cuModuleUnload(mod)
    except Exception:  # noqa: BLE001, S110 - at interpreter exit the driver may be gone
        pass
