"""Global functions by name (TVM's ``tvm.register_func`` / ``tvm.get_global_func``), and
the trampolines through which built CPU code calls them (``tir.call_packed``).

TVM passes packed arguments (type codes and ``TVMValue`` unions) to functions of its C++
runtime registry. polytile has no such runtime: the registry is a Python dict, and a
``tir.call_packed("name", ...)`` in the code of a ``te.extern`` or tensor intrinsic
becomes, on the ``llvm`` target, a C call of a per-signature trampoline (a ``ctypes``
callback) that looks the Python function up *at call time* and calls it with the region
of each buffer argument as a writable numpy array (a :class:`polytile.nd.CPUArray`
view of the memory, so TVM's ``.numpy()`` and ``copyfrom`` work) and each scalar as a
Python number. An exception it raises (or a missing name) stops the built function,
which raises it again in the caller. Each call crosses into the Python interpreter
(microseconds), so this is for glue and tests, not for inner loops; GPU kernels and
exported libraries (which run without Python) refuse it.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections.abc import Callable

import numpy as np

from polytile.errors import BuildError, format_error

_FUNCS: dict[str, Callable] = {}
_LOCK = threading.Lock()


def register_func(func_name, f: Callable | None = None, override: bool = False):
    """Register ``f`` under ``func_name`` (TVM's ``tvm.register_func``); as a decorator
    ``@register_func("my.add")``, or ``@register_func`` (the function's own name).
    Returns ``f``.

    Raises
    ------
    ValueError
        When the name is taken and ``override`` is false, or is not a non-empty string.
    """
    if callable(func_name) and f is None:
        f, func_name = func_name, func_name.__name__
    if not isinstance(func_name, str) or not func_name:
        raise ValueError(format_error("register_func", f"name {func_name!r}",
                                      "expected a non-empty string"))

    def register(fn):
        if not callable(fn):
            raise ValueError(format_error("register_func", f"{func_name!r} is given "
                                          f"{type(fn).__name__}", "expected a function"))
        with _LOCK:
            if func_name in _FUNCS and not override:
                raise ValueError(format_error(
                    "register_func", f"a function is already registered as {func_name!r}",
                    "expected a new name", hint="pass override=True to replace it"))
            _FUNCS[func_name] = fn
        return fn

    return register if f is None else register(f)


def get_global_func(name: str, allow_missing: bool = False):
    """The function registered as ``name`` (TVM's ``tvm.get_global_func``); None when
    missing and ``allow_missing``.

    Raises
    ------
    ValueError
        When nothing is registered under ``name`` (and not ``allow_missing``).
    """
    fn = _FUNCS.get(name)
    if fn is None and not allow_missing:
        raise ValueError(format_error(
            "get_global_func", f"no function is registered as {name!r}",
            "expected a name given to polytile.register_func",
            hint=f"registered: {sorted(_FUNCS) or 'none'}"))
    return fn


def list_global_func_names() -> list:
    """The registered names (TVM's ``tvm.get_global_func`` registry listing)."""
    return sorted(_FUNCS)


def remove_global_func(name: str) -> None:
    """Forget ``name`` (no error when it is not registered)."""
    with _LOCK:
        _FUNCS.pop(name, None)


# ------------------------------------------------------------------ call_packed plumbing
#: prefix of the trampoline symbols built code calls
PACKED_PREFIX = "pt_packed_"
#: symbol -> (registered name, argument descriptors); descriptors: ("buffer", dtype, ndim)
#: (passed as the address, then ndim int64 extents and ndim int64 element strides) or
#: ("scalar", dtype)
SITES: dict[str, tuple] = {}
_CALLBACKS: dict[str, object] = {}   # symbol -> ctypes callback (kept alive: JIT code calls it)
# the first exception of a packed call, for the built function's caller (a packed call in
# a parallel loop runs on an OpenMP thread, so this is not thread-local)
_pending: list = []
_SCALAR_C = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
             "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
             "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
             "float32": ctypes.c_float, "float64": ctypes.c_double}


def site_symbol(func_name: str, descriptors: tuple) -> str:
    """The trampoline symbol of calls of ``func_name`` with ``descriptors`` (one per
    signature, so a tensor intrinsic called at many tiles has one trampoline)."""
    key = repr((func_name, descriptors)).encode()
    sym = PACKED_PREFIX + hashlib.sha1(key).hexdigest()[:16]
    SITES[sym] = (func_name, descriptors)
    return sym


def _array(addr: int, dtype: str, shape: tuple, strides: tuple):
    from polytile.nd import CPUArray

    item = np.dtype(dtype).itemsize
    if not all(shape):     # an empty region (its address may be anything)
        return np.empty(shape, dtype).view(CPUArray)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    raw = (ctypes.c_char * max(span * item, 1)).from_address(addr)
    base = np.frombuffer(raw, dtype=dtype, count=span)
    arr = np.lib.stride_tricks.as_strided(base, shape, tuple(s * item for s in strides),
                                          writeable=True)
    return arr.view(CPUArray)


def _trampoline(sym: str):
    func_name, descs = SITES[sym]
    ctypes_args = []
    for d in descs:
        if d[0] == "buffer":
            ctypes_args += [ctypes.c_void_p] + [ctypes.c_int64] * (2 * d[2])
        else:
            ctypes_args.append(_SCALAR_C[d[1]])

    def call(*raw):
        try:
            fn = get_global_func(func_name)
            args, k = [], 0
            for d in descs:
                if d[0] == "buffer":
                    n = d[2]
                    shape, strides = raw[k + 1:k + 1 + n], raw[k + 1 + n:k + 1 + 2 * n]
                    args.append(_array(raw[k], d[1], tuple(shape), tuple(strides)))
                    k += 1 + 2 * n
                else:
                    args.append(raw[k])
                    k += 1
            fn(*args)
            return 0
        except BaseException as exc:   # noqa: BLE001 (re-raised by the built function)
            with _LOCK:
                if not _pending:
                    _pending.append(exc)
            return 1

    return ctypes.CFUNCTYPE(ctypes.c_int32, *ctypes_args)(call)


def bind_symbols(names) -> None:
    """Make the trampolines of the packed-call symbols among ``names`` resolvable by the
    JIT (``llvmlite.binding.add_symbol``)."""
    import llvmlite.binding as llvm

    for sym in names:
        if not sym.startswith(PACKED_PREFIX) or sym in _CALLBACKS:
            continue
        if sym not in SITES:
            raise BuildError(format_error("build", f"packed-call symbol {sym!r} of unknown "
                                          "signature", "symbols made by tir.call_packed"))
        cb = _trampoline(sym)
        _CALLBACKS[sym] = cb
        llvm.add_symbol(sym, ctypes.cast(cb, ctypes.c_void_p).value)


def take_pending() -> BaseException | None:
    """The exception a packed call raised (then cleared), or None."""
    with _LOCK:
        return _pending.pop() if _pending else None
