"""The device-neutral half of a GPU module: :class:`GPUModule`.

A GPU backend's module subclasses it and supplies the C dialect, its
:class:`~.device_api.DeviceAPI` and ``_compile`` (C source -> loadable image). Everything
else is here, once for every GPU backend:

* printing: the function's kernels as one C source in the backend's dialect, checked
  against the target's :class:`~polytile.backend.DeviceLimits` (launch shapes, static
  shared memory);
* arguments: checked as on the CPU (:mod:`polytile.targets.runtime_support`), arrays
  recognised by :func:`.arrays.device_array`;
* workspaces: ``global``/``heap`` intermediates get device memory per call, sized from the
  scalar arguments and kept (grown when needed) for later calls;
* launches: one parameter array per kernel (device pointers, then scalars) and the launch
  shape of each kernel, in order on one stream; ``__call__`` waits for them so that a
  faulting kernel is reported by the call that launched it;
* timing: the shared ``time_evaluator`` on the device's own clock (events).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import weakref
from typing import ClassVar

from polytile.errors import LoweringError, format_error
from polytile.schedule.loop_ir import Buffer, PrimFunc
from polytile.te import dtype as dt
from polytile.te.expr import Var

from ..c_dialect import CDialect
from ..c_printer import print_c_module
from ..llvm.analysis import stored_buffers
from ..module import Module
from ..runtime_support import (SCALAR_CTYPES, check_arg_count, check_array, check_overlap,
                               eval_size, expected_shape, scalar_arg, size_args)
from .arrays import device_array
from .device_api import DeviceAPI
from .tensor_map import TensorMapParam


class GPUModule(Module):
    """A function compiled for a GPU, callable with device arrays and scalars (see the
    module docstring). Building needs no GPU; calling does.

    Parameters
    ----------
    func : PrimFunc
        Lowered, flattened loop IR whose body is ``KernelLaunch`` statements (in ``Seq``
        and ``Allocate`` of scope ``global``/``heap``).
    target : Target
        A target of the subclass's backend.
    api : DeviceAPI
        The device runtime.

    Raises
    ------
    LoweringError
        A statement outside the kernels that is not ``Seq``/``Allocate``.
    BuildError
        Unsupported constructs, launch shapes over the device's limits, or a compile error.
    """

    #: the C dialect the kernels are printed in
    dialect: ClassVar[CDialect] = CDialect()
    #: the ``get_source`` format of the printed C source
    source_name: ClassVar[str] = "c"

    def __init__(self, func: PrimFunc, target, api: DeviceAPI):
        super().__init__(func, target)
        self.api = api
        self._c = print_c_module(func, self.dialect, fast_math=target.fast_math,
                                 limits=target.limits,
                                 min_blocks=target.attr("min_blocks", 0))
        self.kernels = self._c.kernels
        self.image = self._compile(self._c.source)
        self._stored = stored_buffers(func.body)
        self._loaded = None
        self._workspace: dict = {}  # id(Buffer) -> (ptr, nbytes)
        self._finalizer = weakref.finalize(self, _free_all, api, self._workspace)
        self.synchronize = True

    @property
    def device(self):
        """The GPU device this module runs on (``cuda:0``)."""
        return self.api.device

    def _compile(self, source: str) -> bytes:
        """The loadable image (a cubin, a code object) of the C source."""
        raise NotImplementedError

    # ------------------------------------------------------------------ loading
    def _load(self) -> list:
        self.api.context()
        if self._loaded is None:
            handle, fns = self.api.load(self.image, self.kernels, self.name)
            weakref.finalize(self, self.api.unload, handle)  # tuning builds thousands
            self._loaded = fns
        return self._loaded

    # ------------------------------------------------------------------ calling
    def _convert(self, args: tuple) -> tuple[dict, list]:
        """Check ``args``; return the value of every parameter and workspace buffer
        (by id: device pointer or raw scalar) and the objects to keep alive."""
        f = self.func
        args = size_args(self.name, f, args)   # symbolic sizes, read off the arrays
        check_arg_count(self.name, f.params, args)
        values, scalars, keep, spans = {}, {}, [], []
        for p, a in zip(f.params, args):
            if isinstance(p, Var):
                values[id(p)], scalars[p] = scalar_arg(self.name, p, a)
        for p, a in zip(f.params, args):
            if isinstance(p, Buffer):
                ptr, view = device_array(self.name, p, a, self.api)
                check_array(self.name, p, dtype=view.dtype, shape=view.shape,
                            contiguous=view.c_contiguous, writeable=not view.read_only,
                            written=p in self._stored, scalars=scalars,
                            contiguous_hint=f"pass a contiguous copy ({p.name}.contiguous() "
                                            "in torch)")
                values[id(p)] = ptr
                keep.append(view)
                if view.nbytes:
                    spans.append((ptr, ptr + view.nbytes, p))
        check_overlap(self.name, spans, self._stored)
        for b in self._c.workspace:
            values[id(b)] = self._workspace_ptr(b, scalars)
        values["launch"] = [self._launch_shape(k, scalars) for k in self.kernels]
        return values, keep

    def _launch_shape(self, k, scalars: dict):
        """``k`` with its symbolic grid extents evaluated for this call (``None``: an
        empty grid, nothing to launch); checked against the device's grid limits."""
        if all(isinstance(x, int) for x in k.grid + k.block + (k.dynamic_shared_bytes,)):
            return k
        grid = tuple(eval_size(x, scalars) for x in k.grid)
        block = tuple(eval_size(x, scalars) for x in k.block)
        smem = eval_size(k.dynamic_shared_bytes, scalars)
        if any(x is None for x in grid + block) or smem is None:
            raise LoweringError(format_error(
                self.name, f"kernel {k.name!r} has the grid {list(k.grid)} and block "
                f"{list(k.block)}", "a launch shape of constants and size parameters"))
        if min(grid) <= 0:
            return None
        top_t = self.target.limits.max_threads_per_block
        if min(block) <= 0 or (top_t and block[0] * block[1] * block[2] > top_t):
            raise ValueError(format_error(
                self.name, f"kernel {k.name!r} needs blocks of {list(block)} threads for the "
                f"sizes {', '.join(f'{v.name}={n}' for v, n in scalars.items())}",
                f"between 1 and {top_t} threads per block", hint="a smaller split factor"))
        top = self.target.limits.max_grid_dim
        for a, x, m in zip("xyz", grid, top):
            if m and x > m:
                raise ValueError(format_error(
                    self.name, f"kernel {k.name!r} needs blockIdx.{a} = {x} blocks for the "
                    f"sizes {', '.join(f'{v.name}={n}' for v, n in scalars.items())}",
                    f"at most {m}", hint="split the loop bound to it into more parts"))
        if k.dynamic_shared_max and smem > k.dynamic_shared_max:
            raise ValueError(format_error(
                self.name, f"kernel {k.name!r} needs {smem} bytes of shared memory for the "
                f"sizes {', '.join(f'{v.name}={n}' for v, n in scalars.items())}",
                f"at most {k.dynamic_shared_max} bytes",
                hint="tile the loops its shared buffers are computed at by constant factors"))
        return dataclasses.replace(k, grid=grid, block=block, dynamic_shared_bytes=smem)

    def _workspace_ptr(self, b: Buffer, scalars: dict) -> int:
        shape = expected_shape(b, scalars)
        if None in shape:
            raise LoweringError(format_error(
                self.name, f"intermediate buffer {b.name!r} has the shape {list(b.shape)}",
                "expected a shape of constants and scalar parameters"))
        n = dt.nbytes(b.dtype)
        for s in shape:
            n *= s
        have = self._workspace.get(id(b))
        if have is not None and have[1] >= n:
            return have[0]
        self.api.context()
        if have is not None:
            self.api.free((have[0],))
        ptr = self.api.alloc(max(n, 1), f"{n} bytes for {b.name!r}", func=self.name)
        self._workspace[id(b)] = (ptr, n)
        return ptr

    def _prepare(self, values: dict) -> list:
        """Launch records: (function, kernel, params address, ctypes objects to keep)."""
        fns = self._load()
        out = []
        for fn, k in zip(fns, values["launch"]):
            if k is None:   # a zero-size grid for these sizes: nothing to run
                continue
            objs, addrs = [], []
            for p in k.params:
                if isinstance(p, TensorMapParam):
                    # passed by value: the address of the map's 128 bytes
                    m = self._tensor_map(p, values[id(p.source)])
                    objs.append(m)
                    addrs.append(int(m.getPtr()))
                    continue
                if isinstance(p, Buffer):
                    objs.append(ctypes.c_uint64(values[id(p)]))
                else:
                    objs.append(SCALAR_CTYPES[p.dtype](values[id(p)]))
                addrs.append(ctypes.addressof(objs[-1]))
            ptrs = (ctypes.c_void_p * max(len(objs), 1))(*addrs)
            out.append((fn, k, ctypes.addressof(ptrs), (objs, ptrs)))
        return out

    def _tensor_map(self, p, ptr: int):
        """The encoded map of :class:`TensorMapParam` ``p`` for the source at ``ptr``,
        kept for later calls with the same pointer."""
        cache = self.__dict__.setdefault("_tensor_maps", {})
        key = (p.key(), int(ptr))
        if key not in cache:
            cache[key] = self.api.tensor_map(p, ptr, self.name)
        return cache[key]

    def _launch(self, prepared: list) -> None:
        launch = self.api.launcher(self.name)
        for fn, k, params, _ in prepared:
            if 0 in k.grid or 0 in k.block:
                continue  # a stage without elements: nothing to compute, and a driver
                # refuses an empty launch
            launch(fn, k, params)

    def _sync(self) -> None:
        self.api.wait(self.kernels, self.name)

    def __call__(self, *args) -> None:
        """Run the function on device arrays (written in place) and scalars.

        Arrays: :class:`polytile.nd.NDArray`, torch tensors or any ``__dlpack__`` /
        ``__cuda_array_interface__`` object on device 0, of exactly the buffer's dtype and
        shape, C-contiguous, not overlapping another argument that the function writes.
        Scalars: Python or numpy numbers that fit the parameter's dtype. Waits for the
        kernels to finish (unless ``self.synchronize`` is False).

        Raises
        ------
        TypeError, ValueError
            Invalid arguments, as on the CPU (a numpy array raises ``TypeError`` pointing
            to ``polytile.nd.array``).
        DeviceNotFoundError
            No such device on this machine.
        DeviceError
            A driver call or a kernel failed (the message names the kernel).
        """
        self.api.context()  # no device: say so before judging the arguments
        values, keep = self._convert(args)
        self._launch(self._prepare(values))
        if self.synchronize:
            self._sync()
        del keep

    @contextlib.contextmanager
    def _timer(self, args: tuple):
        """Launches timed with device events: ``run(n)`` enqueues ``n`` calls between two
        events and returns the seconds between them (no synchronisation in between)."""
        self.api.context()
        values, keep = self._convert(args)
        prepared = self._prepare(values)
        self._launch(prepared)  # warm-up
        self._sync()

        def launch_n(n: int) -> None:
            for _ in range(n):
                self._launch(prepared)

        with self.api.timer(self.kernels, self.name) as elapsed:
            yield lambda n: elapsed(launch_n, n)
        del keep

    # ------------------------------------------------------------------ sources
    @property
    def imported_modules(self) -> list:
        """``[self]``: TVM's ``fcuda.imported_modules[0].get_source()`` is the kernels'
        source, which this module's ``get_source()`` gives."""
        return [self]

    def get_source(self, fmt: str | None = None):
        """The generated C source (format ``source_formats[0]``), or the compiled image's
        bytes (``source_formats[1]``).

        Raises
        ------
        ValueError
            For another ``fmt``.
        """
        if fmt is None or fmt in self.source_formats[:1] or fmt == self.source_name:
            return self._c.source
        if fmt in self.source_formats[1:]:
            return self.image
        raise ValueError(format_error("get_source", f"unknown format {fmt!r}",
                                      f"expected {' or '.join(map(repr, self.source_formats))}"))


def _free_all(api: DeviceAPI, workspace: dict) -> None:
    api.free([ptr for ptr, _ in workspace.values()])
    workspace.clear()


__all__ = ["GPUModule"]
