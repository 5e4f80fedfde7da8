"""A toy backend defined outside polytile: loop IR -> C99, compiled with the system C
compiler into a shared library, loaded with ctypes.

It is the extension point's proof: one module and one ``register_backend`` call, using only
public pieces (``Backend``, ``DeviceLimits``, ``Module``, the ``StmtFunctor`` dispatch of
the loop IR, the argument checks of ``runtime_support``, the floor-division rewrite of
``intdiv``). Supported: the loop IR of
CPU schedules over float32/float64/int32/int64 (every loop kind runs as a plain ``for``),
stack and heap intermediates, ``Assert``. Its limits put every intermediate on the heap
(no stack budget), and its own pass counts the stores it compiles.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

from polytile.backend import Backend, DeviceLimits, Target, register_backend
from polytile.errors import BuildError, format_error
from polytile.schedule.intdiv import floordiv_expr, floormod_expr
from polytile.schedule.loop_ir import (Allocate, Assert, Buffer, Evaluate, For, IfThenElse,
                                       LetStmt, Load, PrimFunc, Seq, StmtFunctor, Store,
                                       walk_stmts)
from polytile.targets import Module
from polytile.targets.runtime_support import (SCALAR_CTYPES, check_arg_count, check_array,
                                              scalar_arg)
from polytile.te.expr import And, Binary, Cast, Cmp, Const, Not, Or, Select, Var

KIND = "ctoy"
CTYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
          "bool": "int"}
OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "truncdiv": "/", "truncmod": "%"}
CMPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
#: the passes of this backend that ran, by function name (the test reads it)
PASS_LOG: list = []


class CPrinter(StmtFunctor):
    """Loop IR -> one C99 function ``int <name>(params)`` returning 0, or 1 + the index
    of a failed ``Assert``."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.lines: list = []
        self.names: dict = {}
        self.asserts = [s for s in walk_stmts(func.body) if isinstance(s, Assert)]

    def name(self, obj) -> str:
        if id(obj) not in self.names:
            base = "".join(c if c.isalnum() else "_" for c in obj.name)
            self.names[id(obj)] = f"v{len(self.names)}_{base}"
        return self.names[id(obj)]

    def source(self) -> str:
        sig = []
        for p in self.func.params:
            if isinstance(p, Buffer):
                sig.append(f"{CTYPES[p.dtype]}* restrict {self.name(p)}")
            else:
                sig.append(f"{CTYPES[p.dtype]} {self.name(p)}")
        self.visit(self.func.body, 1)
        return "\n".join(["#include <math.h>", "#include <stdint.h>", "#include <stdlib.h>",
                          f"int {self.func.name}({', '.join(sig)}) {{", *self.lines,
                          "  return 0;", "}", ""])

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def visit_Seq(self, s: Seq, depth: int) -> None:
        for x in s.stmts:
            self.visit(x, depth)

    def visit_For(self, s: For, depth: int) -> None:
        v = self.name(s.var)
        self.emit(depth, f"for (int64_t {v} = {self.expr(s.min)}; {v} < "
                         f"{self.expr(s.min)} + {self.expr(s.extent)}; {v} += {s.step}) {{")
        self.visit(s.body, depth + 1)
        self.emit(depth, "}")

    def visit_Store(self, s: Store, depth: int) -> None:
        self.emit(depth, f"{self.name(s.buffer)}[{self.expr(s.indices[0])}] = "
                         f"({CTYPES[s.buffer.dtype]}){self.expr(s.value)};")

    def visit_IfThenElse(self, s: IfThenElse, depth: int) -> None:
        self.emit(depth, f"if ({self.expr(s.cond)}) {{")
        self.visit(s.then_case, depth + 1)
        if s.else_case is not None:
            self.emit(depth, "} else {")
            self.visit(s.else_case, depth + 1)
        self.emit(depth, "}")

    def visit_LetStmt(self, s: LetStmt, depth: int) -> None:
        self.emit(depth, "{")
        self.emit(depth + 1, f"const {CTYPES[s.var.dtype]} {self.name(s.var)} = "
                             f"{self.expr(s.value)};")
        self.visit(s.body, depth + 1)
        self.emit(depth, "}")

    def visit_Allocate(self, s: Allocate, depth: int) -> None:
        b, t = s.buffer, CTYPES[s.buffer.dtype]
        n = int(np.prod([int(getattr(d, "value", d)) for d in b.shape] or [1]))
        self.emit(depth, "{")
        if b.scope == "stack":
            self.emit(depth + 1, f"{t} {self.name(b)}[{max(n, 1)}];")
        else:
            self.emit(depth + 1, f"{t}* {self.name(b)} = malloc({max(n, 1)} * sizeof({t}));")
            self.emit(depth + 1, f"if (!{self.name(b)}) return -1;")
        self.visit(s.body, depth + 1)
        if b.scope != "stack":
            self.emit(depth + 1, f"free({self.name(b)});")
        self.emit(depth, "}")

    def visit_Assert(self, s: Assert, depth: int) -> None:
        k = next(i for i, a in enumerate(self.asserts) if a is s)
        self.emit(depth, f"if (!({self.expr(s.cond)})) return {k + 1};")

    def visit_Evaluate(self, s: Evaluate, depth: int) -> None:
        pass

    def generic_visit(self, s, *args) -> None:
        raise BuildError(format_error(f"codegen_{KIND}", f"unknown statement "
                                      f"{type(s).__name__}", "expected CPU loop IR"))

    def expr(self, e) -> str:
        if isinstance(e, Const):
            return repr(float(e.value)) if "float" in e.dtype else f"{int(e.value)}LL"
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, Load):
            return f"{self.name(e.buffer)}[{self.expr(e.indices[0])}]"
        if isinstance(e, Cast):
            return f"(({CTYPES[e.dtype]}){self.expr(e.value)})"
        if isinstance(e, Binary):
            if e.op == "floordiv":
                return self.expr(floordiv_expr(e.a, e.b))
            if e.op == "floormod":
                return self.expr(floormod_expr(e.a, e.b))
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"({a} {'<' if e.op == 'min' else '>'} {b} ? {a} : {b})"
            return f"({a} {OPS[e.op]} {b})"
        if isinstance(e, Cmp):
            return f"({self.expr(e.a)} {CMPS[e.op]} {self.expr(e.b)})"
        if isinstance(e, (And, Or)):
            op = "&&" if isinstance(e, And) else "||"
            return f"({self.expr(e.a)} {op} {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):
            return (f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : "
                    f"{self.expr(e.false_value)})")
        raise BuildError(format_error(f"codegen_{KIND}", f"unknown expression "
                                      f"{type(e).__name__}", "expected CPU loop IR"))


class CModule(Module):
    """The compiled library; callable with numpy arrays, checked like an ``llvm`` module."""

    source_formats = ("c",)
    export_formats = {".c": "c"}

    def __init__(self, func: PrimFunc, target: Target):
        super().__init__(func, target)
        self.source = CPrinter(func).source()
        self._dir = tempfile.mkdtemp(prefix="polytile-ctoy-")
        src, lib = os.path.join(self._dir, "k.c"), os.path.join(self._dir, "k.so")
        with open(src, "w") as fh:
            fh.write(self.source)
        opt = target.attr("O", "2")
        res = subprocess.run([shutil.which("cc"), f"-O{opt}", "-std=c99", "-shared", "-fPIC",
                              "-o", lib, src, "-lm"], capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(format_error("build", "cc failed", "valid C", Log=res.stderr))
        self._lib = ctypes.CDLL(lib)
        self._fn = getattr(self._lib, func.name)
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [ctypes.c_void_p if isinstance(p, Buffer) else SCALAR_CTYPES[p.dtype]
                             for p in func.params]
        self._stored = {id(s.buffer) for s in walk_stmts(func.body) if isinstance(s, Store)}

    def get_source(self, fmt: str | None = None) -> str:
        return self.source

    def _convert(self, args: tuple) -> list:
        check_arg_count(self.name, self.func.params, args)
        scalars, out = {}, []
        for p, a in zip(self.func.params, args):
            if isinstance(p, Var):
                raw, scalars[p] = scalar_arg(self.name, p, a)
                out.append(raw)
        for p, a in zip(self.func.params, args):
            if isinstance(p, Buffer):
                check_array(self.name, p, dtype=a.dtype, shape=a.shape,
                            contiguous=a.flags.c_contiguous, writeable=a.flags.writeable,
                            written=id(p) in self._stored, scalars=scalars,
                            contiguous_hint="np.ascontiguousarray")
        it = iter(out)
        return [a.ctypes.data if isinstance(p, Buffer) else next(it)
                for p, a in zip(self.func.params, args)]

    def _bind(self, args: tuple):
        cargs = self._convert(args)
        return lambda: self._fn(*cargs)

    def _check_result(self, status: int) -> None:
        if status != 0:
            raise RuntimeError(f"{self.name}: status {status}")

    def __call__(self, *args) -> None:
        self._check_result(self._bind(args)())


def count_stores(func: PrimFunc) -> PrimFunc:
    """This backend's own pass: records how many stores it compiles (changes nothing)."""
    PASS_LOG.append((func.name, sum(isinstance(s, Store) for s in walk_stmts(func.body))))
    return func


class CToyBackend(Backend):
    kind = KIND
    description = "toy: C99 through the system C compiler (a test of the registry)"
    option_names = ("-O",)
    limits = DeviceLimits(vector_bytes=16, stack_buffer_bytes=0, stack_frame_bytes=0)

    def passes(self, target: Target) -> tuple:
        return (("count_stores", count_stores),)

    def build_module(self, func: PrimFunc, target: Target, **options) -> CModule:
        return CModule(func, target)


class ToyGPUBackend(Backend):
    """A GPU that lowers but does not build: 256 threads per block, 64-lane wavefronts and
    16 KiB of shared memory (limits unlike CUDA's)."""

    kind = "toygpu"
    is_gpu = True
    limits = DeviceLimits(max_threads_per_block=256, max_block_dim=(256, 256, 64),
                          max_grid_dim=(2**31 - 1, 65535, 65535), warp_size=64,
                          shared_bytes_per_block=16 * 1024, static_shared_bytes=16 * 1024)


def register() -> None:
    register_backend(CToyBackend())
    register_backend(ToyGPUBackend)  # a class is instantiated
