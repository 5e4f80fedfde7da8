"""Ahead-of-time export of CUDA functions: a cubin with its launch plan, and loading it.

``CUDAModule.export_library("f.cubin")`` writes the compiled kernels (the cubin for the
module's ``arch``) and, beside them in ``f.cubin.json``, the metadata of
:mod:`polytile.targets.export_meta`: the function's parameters, the kernels in launch
order with their parameters (references to function parameters or workspace buffers),
grid, block and dynamic shared memory, and the device buffers (workspace) the host
allocates for a call. :func:`load_cubin` (``polytile.runtime.load_module``) rebuilds a
:class:`~polytile.targets.cuda.runtime.CUDAModule` from the two files: it checks its
device arguments, allocates the workspace, and launches the kernels on the legacy default
stream exactly as the module that was exported. The cubin can also be loaded by any CUDA
program (``cuModuleLoad``) with the launch plan the JSON describes; each kernel takes its
parameters in the listed order (arrays as device pointers, scalars by value).
"""

from __future__ import annotations

import json
import os
import weakref

from polytile.backend import Target
from polytile.errors import BuildError, format_error
from polytile.schedule.loop_ir import Buffer, PrimFunc, seq

from .. import export_meta
from ..c_printer import CModule, KernelInfo
from ..gpu.module import _free_all
from ..gpu.tensor_map import TensorMapParam
from .runtime import API, CUDAModule


def metadata(module: CUDAModule) -> dict:
    """The export metadata of ``module``: its parameters, kernels and workspace.

    Raises
    ------
    BuildError
        For launch sizes or buffer extents that are not sizes (constants, scalar
        parameters such as symbolic sizes, and integer arithmetic on them: see
        :mod:`polytile.targets.export_meta`); symbolic grids, blocks and dynamic shared
        memory are evaluated by the loader at each call.
    """
    f = module.func
    meta = export_meta.function_metadata(f, module.target, module._stored, (), {"ok": 0})
    meta["arch"] = module.arch
    scalars = {p: p.name for p in f.params if not isinstance(p, Buffer)}
    refs = {id(p): ["param", i] for i, p in enumerate(f.params)}
    meta["workspace"] = []
    for j, b in enumerate(module._c.workspace):
        refs[id(b)] = ["workspace", j]
        meta["workspace"].append({"name": b.name, "dtype": b.dtype,
                                  "shape": export_meta._shape(f.name, b, scalars)})
    kernels = []
    meta["tensor_maps"] = []
    for k in module.kernels:
        for p in k.params:
            if isinstance(p, TensorMapParam) and id(p) not in refs:
                refs[id(p)] = ["tensor_map", len(meta["tensor_maps"])]
                meta["tensor_maps"].append(p.to_json(refs[id(p.source)]))

    def sz(what, values):
        return export_meta.sizes_json(f.name, what, values, scalars)

    for k in module.kernels:
        missing = [p.name for p in k.params if id(p) not in refs]
        if missing:
            raise BuildError(format_error(
                "export_library", f"kernel {k.name!r} takes {missing}, which are neither "
                "parameters nor workspace", "expected kernels of the function's own values"))
        kernels.append({"name": k.name, "params": [refs[id(p)] for p in k.params],
                        "grid": sz(f"the grid of kernel {k.name!r}", k.grid),
                        "block": sz(f"the block of kernel {k.name!r}", k.block),
                        "dynamic_shared_bytes": sz(f"the dynamic shared memory of kernel "
                                                   f"{k.name!r}", [k.dynamic_shared_bytes])[0],
                        "dynamic_shared_max": int(k.dynamic_shared_max),
                        "stored": [refs[id(p)] for p in k.params if p in k.stored]})
    meta["kernels"] = kernels
    return meta


def write_cubin(module: CUDAModule, path: str) -> None:
    """Write the cubin to ``path`` and its metadata to ``path + ".json"``."""
    text = export_meta.dumps(metadata(module))
    with open(path, "wb") as fh:
        fh.write(module.image)
    with open(path + ".json", "w") as fh:
        fh.write(text)


class CubinModule(CUDAModule):
    """A CUDA function loaded from an exported cubin and its ``.json`` launch plan;
    calling, checks and timing are those of :class:`CUDAModule`. ``metadata`` holds the
    plan, ``path`` the cubin; ``get_source("cubin")`` gives the image, there is no C
    source.

    Raises
    ------
    FileNotFoundError
        Without the ``.json`` file beside the cubin.
    ValueError
        Metadata of another format or a newer version.
    """

    def __init__(self, path: str, *, image: bytes | None = None,
                 metadata: dict | None = None):  # noqa: D107 - nothing to compile
        if image is not None and metadata is not None:
            self.path = path
            self.metadata = meta = metadata
            self._init(meta, bytes(image))
            return
        self.path = os.path.abspath(path)
        meta_path = path + ".json"
        if not os.path.exists(meta_path):
            raise FileNotFoundError(format_error(
                "load_module", f"no launch plan {meta_path!r} beside the cubin",
                "expected the .json file export_library wrote with it"))
        with open(meta_path) as fh:
            self.metadata = meta = json.load(fh)
        with open(path, "rb") as fh:
            image = fh.read()
        self._init(meta, image)

    @classmethod
    def from_data(cls, image: bytes, metadata: dict) -> CubinModule:
        """A module from a cubin's bytes and its launch plan (:func:`metadata`), as the
        GPU runner of the tuner receives them (plain data, no files)."""
        if metadata.get("format") != export_meta.FORMAT:
            raise ValueError(format_error("load_module", "the launch plan is not polytile's",
                                          f"expected format {export_meta.FORMAT!r}"))
        return cls("<memory>", image=image, metadata=metadata)

    def _init(self, meta: dict, image: bytes) -> None:
        params, stored = export_meta.rebuild_params(meta)
        scalars = {p.name: p for p in params if not isinstance(p, Buffer)}
        workspace = tuple(Buffer(w["name"], export_meta.shape_of(w["shape"], scalars),
                                 w["dtype"], "global") for w in meta["workspace"])
        values = {"param": params, "workspace": workspace}
        values["tensor_map"] = tuple(
            TensorMapParam(values[t["source"][0]][t["source"][1]], t["rows"], t["cols"],
                           t["box_rows"], t["box_cols"], t["swizzle"], t["name"])
            for t in meta.get("tensor_maps", ()))
        sz = export_meta.size_from_json
        kernels = tuple(
            KernelInfo(k["name"], tuple(values[a][i] for a, i in k["params"]),
                       tuple(sz(x, scalars) for x in k["grid"]),
                       tuple(sz(x, scalars) for x in k["block"]),
                       sz(k["dynamic_shared_bytes"], scalars),
                       frozenset(values[a][i] for a, i in k["stored"]),
                       int(k.get("dynamic_shared_max", 0)))
            for k in meta["kernels"])
        self.image = image
        self.func = PrimFunc(meta["entry"], params, seq(),
                             export_meta.function_attrs(meta, params))
        self.target = Target.parse(meta["target"])
        self.name = self.func.name
        self.arch = meta["arch"]
        self.api = API
        self._c = CModule(self.name, "", kernels, workspace)
        self.kernels = kernels
        self._stored = stored
        self._loaded = None
        self._workspace = {}
        self._finalizer = weakref.finalize(self, _free_all, API, self._workspace)
        self.synchronize = True

    def get_source(self, fmt: str | None = None):
        """The cubin (``fmt="cubin"``); a loaded module has no C source.

        Raises
        ------
        ValueError
            For any other format.
        """
        if fmt == "cubin":
            return self.image
        raise ValueError(format_error("get_source", f"module loaded from {self.path!r} has "
                                      "only its cubin", "expected fmt='cubin'"))

    def __repr__(self) -> str:
        return f"CubinModule({self.name!r}, path={self.path!r}, arch={self.arch!r})"


def load_cubin(path: str) -> CubinModule:
    """Load a cubin written by ``CUDAModule.export_library`` (see the module docstring)."""
    return CubinModule(path)


__all__ = ["CubinModule", "load_cubin", "metadata", "write_cubin"]
