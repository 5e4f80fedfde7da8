"""Ahead-of-time export of CPU functions: shared libraries with a C ABI, and loading them.

``LLVMModule.export_library("f.so")`` links the optimised code (position-independent, for
the module's target CPU) with the system C compiler into a shared library that needs only
libc, libm and libgomp (no Python, no polytile) and exports:

``int32_t <entry_name>(<params>)``
    One C parameter per parameter of the built function, in the order of ``build``'s
    argument list: an array as a pointer to its first element (C-contiguous, row-major,
    exactly the shape and dtype it was built for; ``float16``/``bfloat16`` as ``uint16_t``
    bit patterns, ``bool`` as ``uint8_t``), a scalar by value. Returns 0 on success, 1 when a
    heap allocation failed, ``16 + k`` when run-time check ``k`` failed (its message is in
    the metadata). Outputs are written in place; arrays that are written must not overlap
    other arrays. Parallel loops use libgomp's threads (``OMP_NUM_THREADS``).
``const char polytile_metadata[]``
    The function's metadata as a NUL-terminated JSON string
    (:mod:`polytile.targets.export_meta`): parameter names, dtypes, shapes, which arrays
    are written, the C prototype (``c_signature``) and the run-time check messages.

:func:`load_library` (``polytile.runtime.load_module``) opens such a library and returns a
:class:`LibraryModule`, called with numpy arrays and checked exactly as the module that was
exported.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from types import SimpleNamespace

import llvmlite.binding as llvm

from polytile.backend import Target
from polytile.errors import BuildError, format_error
from polytile.schedule.loop_ir import Buffer, PrimFunc, seq

from .. import export_meta
from ..runtime_support import SCALAR_CTYPES
from .intrinsics import STATUS_ASSERT, STATUS_NO_MEMORY, STATUS_OK
from .runtime import LLVMModule, _target_machine

#: symbol of the embedded metadata
METADATA_SYMBOL = "polytile_metadata"


def metadata(module: LLVMModule) -> dict:
    """The export metadata of ``module`` (with its C prototype)."""
    meta = export_meta.function_metadata(
        module.func, module.target, module._stored, module._asserts,
        {"ok": STATUS_OK, "no_memory": STATUS_NO_MEMORY, "assert_base": STATUS_ASSERT})
    meta["c_signature"] = export_meta.c_signature(meta)
    return meta


def _ir_string(name: str, text: str) -> str:
    data = text.encode() + b"\0"
    body = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)
    return f'\n@{name} = constant [{len(data)} x i8] c"{body}", align 1\n'


def write_library(module: LLVMModule, path: str, suffix: str) -> None:
    """Write ``module`` as an object file (``.o``) or a shared library (``.so``), both
    carrying the metadata symbol.

    Raises
    ------
    BuildError
        Without a C compiler, or when linking fails (the linker's log is in the message;
        ``-z defs`` makes a symbol the library would not resolve a link error here rather
        than a failure to load it later).
    """
    if getattr(module, "_packed", None):
        from polytile.registry import SITES

        names = sorted({SITES[s][0] for s in module._packed if s in SITES})
        raise BuildError(format_error(
            "export_library", f"function {module.name!r} calls the Python functions "
            f"{names} (tir.call_packed)", "expected code that runs without Python",
            hint="call a C function with tir.call_extern and pragma 'import_c' instead"))
    meta = export_meta.dumps(metadata(module))
    tm = _target_machine(module.target, jit=False)
    mod = llvm.parse_assembly(module._opt_text + _ir_string(METADATA_SYMBOL, meta))
    obj = tm.emit_object(mod)
    if suffix == ".o":
        with open(path, "wb") as fh:
            fh.write(obj)
        return
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise BuildError(format_error("export_library", "no C compiler found to link "
                                      f"{os.path.basename(path)!r}",
                                      "expected cc, gcc or clang on PATH"))
    with tempfile.TemporaryDirectory(prefix="polytile-so-") as tmp:
        o = os.path.join(tmp, f"{module.name}.o")
        with open(o, "wb") as fh:
            fh.write(obj)
        # the libraries of import_c pragmas (extern functions of tensor intrinsics)
        libs = list(getattr(module, "_libs", ()))
        res = subprocess.run([cc, "-shared", "-Wl,-z,defs", "-o", path, o, *libs, "-lgomp",
                              "-lm"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BuildError(format_error("export_library", f"linking {path!r} failed",
                                      "expected the linker to succeed",
                                      Log=(res.stderr or res.stdout).strip()))


class LibraryModule(LLVMModule):
    """A function loaded from a shared library written by ``export_library``: callable
    with numpy arrays and scalars (checked against the embedded metadata, with the messages
    of :class:`LLVMModule`), timed by ``time_evaluator``; ``metadata`` holds the parsed
    metadata and ``path`` the library. There is no source to show.

    Raises
    ------
    ValueError
        A library without polytile's metadata, or metadata of a newer version.
    OSError
        The library cannot be loaded (``dlopen``'s message).
    """

    def __init__(self, path: str):  # noqa: D107 - no LLVMModule.__init__: nothing to compile
        self.path = os.path.abspath(path)
        try:
            self._lib = ctypes.CDLL(self.path)
        except OSError as e:   # not a shared library, or one for another machine
            raise ValueError(format_error(
                "load_module", f"{path!r} cannot be loaded as a shared library ({e})",
                "expected a shared library written by polytile's export_library")) from None
        try:
            sym = ctypes.c_char.in_dll(self._lib, METADATA_SYMBOL)
        except ValueError:
            raise ValueError(format_error(
                "load_module", f"{path!r} has no {METADATA_SYMBOL!r} symbol",
                "expected a shared library written by polytile's export_library")) from None
        self.metadata = meta = json.loads(ctypes.string_at(ctypes.addressof(sym)).decode())
        params, stored = export_meta.rebuild_params(meta)
        self.func = PrimFunc(meta["entry"], params, seq(),
                             export_meta.function_attrs(meta, params))
        self.target = Target.parse(meta["target"])
        self.name = self.func.name
        self._stored = stored
        self._asserts = [SimpleNamespace(**a) for a in meta["asserts"]]
        argtypes = [ctypes.c_void_p if isinstance(p, Buffer) else SCALAR_CTYPES[p.dtype]
                    for p in params]
        cfunc = getattr(self._lib, meta["entry"])
        cfunc.restype, cfunc.argtypes = ctypes.c_int32, argtypes
        self._cfunc = cfunc

    def get_source(self, fmt: str | None = None, optimized: bool = True):
        """Not available: a loaded library keeps no source.

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(format_error("get_source", f"module loaded from {self.path!r} has "
                                      "no source", "expected a module built by polytile.build"))

    def _export(self, path: str, suffix: str) -> None:
        raise ValueError(format_error("export_library", f"module loaded from {self.path!r}",
                                      "expected a module built by polytile.build",
                                      hint="copy the library file instead"))

    def __repr__(self) -> str:
        return f"LibraryModule({self.name!r}, path={self.path!r})"


def load_library(path: str) -> LibraryModule:
    """Load a shared library written by ``LLVMModule.export_library`` (see the module
    docstring)."""
    return LibraryModule(path)


__all__ = ["METADATA_SYMBOL", "LibraryModule", "load_library", "metadata", "write_library"]
