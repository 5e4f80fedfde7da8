"""What an exported function needs to be called again: its metadata, as JSON.

``export_library`` writes beside the code (CUDA: ``<path>.json``) or into it (a shared
library: the NUL-terminated JSON string ``polytile_metadata``) a description of the
function's calling convention, and :func:`polytile.runtime.load_module` rebuilds from it the
parameters that the runtimes check arguments against, so that a loaded function refuses a
wrong dtype, shape or layout with the same messages as a freshly built one.

Format (``"format": "polytile-function"``, ``"version": 2``)::

    entry        the function's symbol (CPU) or name (GPU)
    target       the target string it was built for
    params       [{"name", "kind": "array", "dtype", "shape", "written"} |
                  {"name", "kind": "scalar", "dtype"}], in call order; a shape entry is a
                  size (below)
    asserts      [{"message", "error"}]: run-time check k fails with status assert_base + k
    status       {"ok": 0, "no_memory": 1, "assert_base": 16}
    size_params  [[name, i, q]]: scalar ``name`` (a symbolic size, last in ``params``) is read
                 off dimension ``q`` of parameter ``i`` by the Python runtimes (absent
                 without symbolic sizes; C callers pass it)
    c_signature  the C prototype (CPU)
    kernels      (GPU) [{"name", "params": [ref...], "grid", "block",
                  "dynamic_shared_bytes"}], a ref being ["param", i] or ["workspace", j];
                  grid, block and shared bytes are sizes; "dynamic_shared_max": the bytes
                  of dynamic shared memory the kernel is loaded for when they are symbolic
                  (a launch that needs more is refused)
    workspace    (GPU) [{"name", "dtype", "shape"}]: device buffers the runtime allocates

A *size* is an int, the name of a scalar parameter (a symbolic size read off the arrays,
see ``size_params``), or ``[op, a, b]`` with ``op`` one of ``add sub mul floordiv floormod
min max`` (floor semantics, as Python's ``//`` and ``%``) and ``a``, ``b`` sizes: a grid of
``ceil(n / 256)`` blocks is ``["floordiv", ["add", "n", 255], 256]``. A loader evaluates
them per call from the scalar values. Version 1 (ints and names only) is still read.
"""

from __future__ import annotations

import json

import numpy as np

from polytile.errors import BuildError, format_error
from polytile.schedule.loop_ir import Buffer
from polytile.te.expr import Binary, Cast, Const, Var, binary

from .runtime_support import eval_size

FORMAT = "polytile-function"
VERSION = 2

#: the operators a size may use (``eval_size`` evaluates the same set)
SIZE_OPS = ("add", "sub", "mul", "floordiv", "floormod", "min", "max")

#: C type of each dtype in the exported C ABI (16-bit floats travel as their bit patterns)
C_TYPES = {
    "bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
    "uint64": "uint64_t", "float16": "uint16_t", "bfloat16": "uint16_t",
    "float32": "float", "float64": "double"}


def size_json(e, scalars: dict):
    """The JSON form of a size (module docstring), or None when ``e`` uses anything but
    constants, the scalar parameters ``scalars`` and the operators of ``SIZE_OPS``."""
    if isinstance(e, Cast):
        return size_json(e.value, scalars) if e.dtype.startswith(("int", "uint")) else None
    if isinstance(e, Const):
        e = e.value
    if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return int(e)
    if isinstance(e, Var):
        return e.name if e in scalars else None
    if isinstance(e, Binary) and e.op in SIZE_OPS:
        a, b = size_json(e.a, scalars), size_json(e.b, scalars)
        return None if a is None or b is None else [e.op, a, b]
    return None


def size_from_json(j, scalars: dict):
    """The size expression of a JSON size (an int stays an int); ``scalars`` maps names
    to :class:`Var`.

    Raises
    ------
    ValueError
        For an unknown name or operator.
    """
    if isinstance(j, int) and not isinstance(j, bool):
        return j
    if isinstance(j, str) and j in scalars:
        return scalars[j]
    if isinstance(j, list) and len(j) == 3 and j[0] in SIZE_OPS:
        a, b = size_from_json(j[1], scalars), size_from_json(j[2], scalars)
        if isinstance(a, int) and isinstance(b, int):
            return eval_size(binary(j[0], a, b), {})
        return binary(j[0], a, b)
    raise ValueError(format_error("load_module", f"the size {j!r} in the metadata",
                                  f"an int, a scalar parameter of {sorted(scalars)} or "
                                  f"[op, a, b] with op in {SIZE_OPS}"))


def sizes_json(fname: str, what: str, values, scalars: dict) -> list:
    """:func:`size_json` of each of ``values``.

    Raises
    ------
    BuildError
        For a value that is not a size (naming ``what`` and the function)."""
    out = []
    for d in values:
        j = size_json(d, scalars)
        if j is None:
            raise BuildError(format_error(
                "export_library", f"{what} of {fname!r} has the extent {d}",
                "expected extents that are constants, scalar parameters or integer "
                f"arithmetic ({', '.join(SIZE_OPS)}) on them"))
        out.append(j)
    return out


def _shape(fname: str, b: Buffer, scalars: dict) -> list:
    return sizes_json(fname, f"buffer {b.name!r}", b.shape, scalars)


def function_metadata(func, target, stored, asserts, status: dict) -> dict:
    """The metadata of ``func`` (a ``PrimFunc``) built for ``target``; ``stored`` is the set
    of buffers it writes, ``asserts`` its ``Assert`` statements in status order.

    Raises
    ------
    BuildError
        For an array extent that is neither a constant nor a scalar parameter.
    """
    scalars = {p: p.name for p in func.params if isinstance(p, Var)}
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            params.append({"name": p.name, "kind": "array", "dtype": p.dtype,
                           "shape": _shape(func.name, p, scalars), "written": p in stored})
        else:
            params.append({"name": p.name, "kind": "scalar", "dtype": p.dtype})
    meta = {"format": FORMAT, "version": VERSION, "entry": func.name, "target": str(target),
            "params": params, "status": dict(status),
            "asserts": [{"message": a.message, "error": a.error} for a in asserts]}
    bound = func.attrs.get("size_params", ())
    if bound:
        meta["size_params"] = [[v.name, k, q] for v, k, q in bound]
    return meta


def function_attrs(meta: dict, params: tuple) -> dict:
    """The ``PrimFunc.attrs`` a loaded function needs: its size parameters (read off the
    arrays at each call, as for a freshly built function)."""
    by_name = {p.name: p for p in params if isinstance(p, Var)}
    bound = tuple((by_name[n], k, q) for n, k, q in meta.get("size_params", ()))
    return {"size_params": bound} if bound else {}


def c_signature(meta: dict) -> str:
    """The C prototype of an exported CPU function: ``int32_t entry(T0* p0, T1 p1, ...)``,
    one parameter per function parameter in call order (arrays as pointers to their first
    element, scalars by value); it returns ``status["ok"]`` on success."""
    args = []
    for p in meta["params"]:
        t = C_TYPES[p["dtype"]]
        if p["kind"] == "array":
            const = "" if p["written"] else "const "
            args.append(f"{const}{t}* {p['name']}")
        else:
            args.append(f"{t} {p['name']}")
    return f"int32_t {meta['entry']}({', '.join(args) or 'void'})"


def rebuild_params(meta: dict) -> tuple:
    """``(params, stored)``: :class:`Buffer`/:class:`Var` parameters equivalent to those the
    metadata describes, and the set of written buffers.

    Raises
    ------
    ValueError
        For metadata of another format or a newer version.
    """
    check_format(meta)
    scalars = {p["name"]: Var(p["dtype"], p["name"]) for p in meta["params"]
               if p["kind"] == "scalar"}
    params, stored = [], set()
    for p in meta["params"]:
        if p["kind"] == "scalar":
            params.append(scalars[p["name"]])
            continue
        b = Buffer(p["name"], shape_of(p["shape"], scalars), p["dtype"])
        params.append(b)
        if p["written"]:
            stored.add(b)
    return tuple(params), stored


def shape_of(shape: list, scalars: dict) -> tuple:
    """A metadata shape with its sizes rebuilt (:func:`size_from_json`)."""
    return tuple(size_from_json(d, scalars) for d in shape)


def check_format(meta: dict) -> None:
    """Raise ``ValueError`` unless ``meta`` is metadata this version of polytile reads."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(format_error("load_module", "the file's metadata is not polytile's",
                                      f"expected format {FORMAT!r}"))
    if meta.get("version", 0) > VERSION:
        raise ValueError(format_error(
            "load_module", f"metadata version {meta.get('version')}",
            f"expected version {VERSION} or older", hint="export it again with this polytile"))


def dumps(meta: dict) -> str:
    return json.dumps(meta, indent=1, sort_keys=True)


__all__ = ["C_TYPES", "FORMAT", "VERSION", "c_signature", "check_format", "dumps",
           "function_attrs", "function_metadata", "rebuild_params", "shape_of"]
