"""Loop IR → C source for GPU targets: one printer, one table per dialect.

:func:`print_c_module` turns a :class:`~polytile.schedule.loop_ir.PrimFunc` whose body is a
sequence of :class:`~polytile.schedule.loop_ir.KernelLaunch` statements (possibly inside
``Allocate`` of scope ``global``/``heap``: device buffers living across kernels) into one C
source holding one kernel function per launch, plus the host plan (:class:`CModule`) a
runtime needs to launch them. Everything a dialect can change sits in
:class:`~polytile.targets.c_dialect.CDialect` (kernel prefix, launch bounds, ``restrict``,
shared-memory and barrier spelling, index names, type map, math functions per dtype, half
conversions); CUDA and HIP subclass it and override tables only (model: tinygrad's
``renderer/cstyle.py``). Statements and kernels are printed here, expressions in
:mod:`polytile.targets.c_expr`.

Meaning kept from the loop IR (see :mod:`polytile.schedule.loop_ir` and
:mod:`polytile.te.expr`):

* indices and loop variables are ``int64_t``; hardware indices are read once per kernel
  into ``const int64_t`` locals;
* integer arithmetic wraps: results of types narrower than ``int`` are cast back to their
  type (C promotes them), narrow unsigned products are computed in ``uint32_t``;
* ``floordiv``/``floormod`` go through :mod:`polytile.schedule.intdiv`;
* ``Select`` is C's lazy ``c ? a : b``; ``And``/``Or`` are ``&&``/``||``;
* ``min``/``max``/integer ``abs`` are inline function templates (each operand evaluated
  once), float ``min``/``max`` are ``a < b ? a : b`` as on the CPU;
* ``bool`` is C++ ``bool`` in registers and ``uint8_t`` in memory (numpy's one byte);
* floats are IEEE without fast-math (``a*b + c`` may contract into an FMA); a
  ``-fast-math`` target switches to the dialect's fast intrinsics (``__expf``).

Output is deterministic: names come from the IR (sanitised, made unique with ``_1``,
``_2``... in first-use order), every sub-expression is parenthesised, two-space indentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from polytile.backend import DeviceLimits, get_backend, registered_kinds
from polytile.errors import BuildError, LoweringError, format_error
from polytile.schedule.kinds import ASYNC_COPY, FRAGMENT_SCOPES, LoopKind, fragment_tile
from polytile.schedule.loop_ir import (FOR_KINDS, AccessPtr, Allocate, Assert, Buffer, Evaluate,
                                       ExternCall, For, TensorCall,
                                       IfThenElse, KernelLaunch, LetStmt, PrimFunc, Seq, Stmt,
                                       StmtFunctor, Store, Sync, WarpShuffle, stmt_str,
                                       While, walk_stmts)
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.depth import deep
from polytile.te.expr import Binary, Cast, Const, Expr, Var
from polytile.te.visitor import substitute

from .c_dialect import CXX_KEYWORDS, CDialect
from .c_expr import CExprPrinter, strip_parens
from .c_half2 import HALF2, half2_loop
from .c_vector import vector_copy
from polytile.schedule.passes.simplify import simplify_expr
from polytile.schedule.passes.loops import MAX_UNROLL
from .llvm.analysis import stored_buffers, used_symbols

_HOST_SCOPES = ("global", "heap")
_MIN_ALIGN = 16  # bytes: alignment of shared buffers (vector loads of up to 16 bytes)
TMA_ALIGN = 128  # bytes: alignment of the shared destination of a TMA copy

#: Vector types of 32-bit lanes whose copies out of a register array are stored lane by lane.
_SCALAR_LANES = frozenset(("float4", "float2", "int4", "int2"))


def _stream_store(vt: str, ptx: str, reg: str, lanes: str) -> tuple:
    name = f"pt_st_cs_{vt}"
    ops = ", ".join(f"%{k + 1}" for k in range(len(lanes)))
    args = ", ".join(f'"{reg}"(v.{c})' for c in lanes)
    # without __CUDA_ARCH__ (a host emulation of the device) an ordinary store
    return name, (f"__device__ __forceinline__ void {name}(void* p, {vt} v) {{\n"
                  f"#ifdef __CUDA_ARCH__\n"
                  f'  asm volatile("st.global.cs.v{len(lanes)}.{ptx} [%0], {{{ops}}};" :: '
                  f'"l"(__cvta_generic_to_global(p)), {args} : "memory");\n'
                  f"#else\n  *({vt}*)p = v;\n#endif\n}}")


def _hinted_load(vt: str, hint: str, ptx: str, reg: str, lanes: str) -> tuple:
    name = f"pt_ld_{hint}_{vt}"
    outs = ", ".join(f"%{k}" for k in range(len(lanes)))
    args = ", ".join(f'"={reg}"(v.{c})' for c in lanes)
    level = {"evict_last": "L1::evict_last", "evict_first": "L1::evict_first"}[hint]
    return name, (f"__device__ __forceinline__ {vt} {name}(const void* p) {{\n  {vt} v;\n"
                  f"#ifdef __CUDA_ARCH__\n"
                  f'  asm("ld.global.nc.{level}.v{len(lanes)}.{ptx} {{{outs}}}, '
                  f'[%{len(lanes)}];" : {args} : "l"(__cvta_generic_to_global(p)));\n'
                  f"#else\n  v = *(const {vt}*)p;\n#endif\n  return v;\n}}")


#: Load hint pragma -> C vector type -> (helper, CUDA source) of a read-only global vector
#: load with that L1 eviction priority (PTX ``ld.global.nc.L1::evict_last`` /
#: ``L1::evict_first``), which global vector loads inside a loop with the pragma use (no
#: ``volatile``: a read-only load nvcc may schedule as any other)
LOAD_HINTS = {h: {"uint4": _hinted_load("uint4", h, "u32", "r", "xyzw"),
                  "uint2": _hinted_load("uint2", h, "u32", "r", "xy"),
                  "float4": _hinted_load("float4", h, "f32", "f", "xyzw"),
                  "float2": _hinted_load("float2", h, "f32", "f", "xy")}
              for h in ("evict_last", "evict_first")}

#: C vector type -> (helper, CUDA source) of its streaming store (PTX ``st.global.cs``:
#: cache streaming, likely accessed once; the line is evicted first), which global vector
#: stores inside a loop with the ``nontemporal`` pragma use on CUDA
STREAM_STORES = {"uint4": _stream_store("uint4", "u32", "r", "xyzw"),
                 "uint2": _stream_store("uint2", "u32", "r", "xy"),
                 "int4": _stream_store("int4", "s32", "r", "xyzw"),
                 "int2": _stream_store("int2", "s32", "r", "xy"),
                 "float4": _stream_store("float4", "f32", "f", "xyzw"),
                 "float2": _stream_store("float2", "f32", "f", "xy")}


def _as_i64(e) -> Expr:
    """A symbolic size as an ``int64`` expression (byte offsets in shared memory)."""
    e = sym.as_expr(e)
    return e if e.dtype == "int64" else Cast("int64", e)


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of a :class:`CModule`: its C ``name``, its parameters in order
    (:class:`Buffer` then :class:`Var`), launch shape and dynamic shared memory (bytes)."""

    name: str
    params: tuple
    grid: tuple
    block: tuple
    dynamic_shared_bytes: int
    stored: frozenset
    #: the dynamic shared memory the kernel is loaded for when ``dynamic_shared_bytes``
    #: is symbolic (an expression of size parameters, evaluated at each launch)
    dynamic_shared_max: int = 0

    @property
    def threads(self) -> int:
        """Threads per block (``block`` evaluated first where it is symbolic)."""
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class CModule:
    """The printed source of a function and its host plan: ``workspace`` lists the
    ``global``/``heap`` buffers to allocate on the device for a call, ``kernels`` the
    launches in order."""

    name: str
    source: str
    kernels: tuple
    workspace: tuple


# ------------------------------------------------------------------------------ names
class _Namer:
    """Stable, unique C identifiers for IR objects (by identity), in first-use order."""

    def __init__(self, reserved=()):
        self.taken = set(CXX_KEYWORDS) | set(reserved)
        self.names: dict = {}

    def child(self) -> _Namer:
        n = _Namer()
        n.taken = set(self.taken)
        n.names = dict(self.names)
        return n

    def __call__(self, obj, hint: str) -> str:
        key = id(obj)
        if key in self.names:
            return self.names[key][1]
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base.startswith(("_", "pt_")):
            base = "v" + base  # reserved spellings: __x, _X and our helpers
        name, k = base, 1
        while name in self.taken:
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        self.names[key] = (obj, name)  # keep obj alive so its id stays unique
        return name


def _label(s: Stmt) -> str:
    text = stmt_str(s).splitlines()
    return text[0].strip() if text else type(s).__name__


# ------------------------------------------------------------------------------ host plan
def _host_plan(func: PrimFunc, who: str) -> tuple[list, list]:
    """Workspace buffers and kernel launches of ``func``'s body, in order."""
    workspace, launches = [], []

    def visit(s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, Allocate) and s.buffer.scope in _HOST_SCOPES:
            workspace.append(s.buffer)
            visit(s.body)
        elif isinstance(s, KernelLaunch):
            launches.append(s)
        else:
            raise LoweringError(format_error(
                who, f"statement {type(s).__name__} '{_label(s)}' of function {func.name!r} "
                "lies outside every kernel", "expected only KernelLaunch statements, in Seq "
                "and Allocate (scope 'global' or 'heap') at the top level of a GPU function",
                hint="bind the loops of every stage to blockIdx/threadIdx"))

    visit(func.body)
    return workspace, launches


def _bound_here(s: Stmt) -> tuple[set, set]:
    """Variables bound and buffers allocated inside ``s`` (by identity)."""
    vs, bs = set(), set()
    for x in walk_stmts(s):
        if isinstance(x, (For, LetStmt)):
            vs.add(id(x.var))
        elif isinstance(x, Allocate):
            bs.add(id(x.buffer))
        elif isinstance(x, KernelLaunch):
            vs.update(id(v) for v, _ in x.thread_vars)
    return vs, bs


# ------------------------------------------------------------------------------ printer
class CPrinter(CExprPrinter, StmtFunctor):
    """Prints one function for one dialect; use :func:`print_c_module`."""

    def __init__(self, dialect: CDialect, fast_math: bool = False,
                 limits: DeviceLimits | None = None, min_blocks: int = 0):
        self.d = dialect
        self.fast = fast_math
        self.min_blocks = min_blocks
        if limits is None:
            limits = get_backend(dialect.name).limits if dialect.name in registered_kinds() \
                else DeviceLimits()
        self.limits = limits
        self.who = f"codegen_{dialect.name}"
        self.helpers: dict = {}
        #: nesting depth of loops with the ``nontemporal`` pragma at the current position
        self.streaming = 0
        #: the load hint pragma (``LOAD_HINTS``) of the innermost loop with one, or None
        self.load_hint = None
        self.dtypes: set = set()
        self.texts: dict = {}   # CExprPrinter.expr's memo: emptied when a name is bound

    # ---------------------------------------------------------------- module
    def module(self, func: PrimFunc) -> CModule:
        workspace, launches = _host_plan(func, self.who)
        global_names = _Namer(reserved=self.d.index_names)
        for p in func.params:
            if isinstance(p, Buffer) and p.scope != "global":
                raise BuildError(format_error(
                    self.who, f"parameter buffer {p.name!r} has scope {p.scope!r}",
                    "expected scope 'global' for function arguments"))
            if not isinstance(p, (Buffer, Var)):
                raise BuildError(format_error(self.who, f"parameter {p!r} is a "
                                              f"{type(p).__name__}",
                                              "expected Buffer or Var parameters"))
        bodies, infos = [], []
        for k in launches:
            info, text = self.kernel(func, k, workspace, global_names)
            infos.append(info)
            bodies.append(text)
        head = list(self.d.preamble)
        for t in sorted(self.dtypes):
            if t in self.d.dtype_headers:
                head.append(self.d.dtype_headers[t])
        if getattr(self, "uses_fragments", False):
            head.extend(self.d.fragment_headers)
        n = len(infos)
        title = (f"// polytile: {self.d.name} source of function {func.name!r} "
                 f"({n} kernel{'s' if n != 1 else ''})")
        out = [title, *head, ""]
        for _, text in sorted(self.helpers.items()):
            out.append(text)
        if self.helpers:
            out.append("")
        out.extend(self._imports(func))
        out.append("\n\n".join(bodies))
        return CModule(func.name, "\n".join(out) + "\n", tuple(infos), tuple(workspace))

    def _imports(self, func: PrimFunc) -> list[str]:
        """The user's device code of ``pragma(axis, "import_c", source)`` (the functions a
        ``te.extern`` or a tensor intrinsic calls: ``__device__`` functions in this C
        dialect), placed before the kernels."""
        out = []
        for kind, text in func.attrs.get("imports", ()):
            if kind != "import_c":
                raise BuildError(format_error(
                    self.who, f"pragma {kind!r} gives LLVM IR to a {self.d.name} module",
                    "'import_c' with device source (__device__ functions)"))
            out.extend([f"// from pragma import_c\n{text.strip()}", ""])
        return out

    # ---------------------------------------------------------------- kernel
    def kernel(self, func: PrimFunc, k: KernelLaunch, workspace: list, global_names: _Namer):
        d, limits = self.d, self.limits
        for what, ext in (("grid", k.grid), ("block", k.block)):
            # an extent may be symbolic (an expression of size parameters, evaluated at
            # each launch): grids of symbolic sizes, blocks of a split by a symbolic factor
            if len(ext) != 3 or not all(isinstance(x, int) and x >= 0 or
                                        not sym.is_static(x) for x in ext):
                raise BuildError(format_error(
                    self.who, f"kernel {k.name!r} has {what} {list(ext)}",
                    "expected three ints >= 0 (0: the kernel is never launched)"))
        top = limits.max_grid_dim  # 0: no limit
        if any(m and sym.is_static(x) and x > m for x, m in zip(k.grid, top)):
            raise BuildError(format_error(self.who, f"kernel {k.name!r} has grid "
                                          f"{list(k.grid)}", f"expected at most {list(top)}"))
        fixed_block = all(sym.is_static(x) for x in k.block)
        threads = k.block[0] * k.block[1] * k.block[2] if fixed_block else 0
        if limits.max_threads_per_block and threads > limits.max_threads_per_block:
            raise BuildError(format_error(
                self.who, f"kernel {k.name!r} has {threads} threads per block (block "
                f"{list(k.block)})", f"expected at most {limits.max_threads_per_block}"))
        kname = global_names(k, k.name)
        names = global_names.child()
        self.names = names
        self.kname = k.name
        self.env: dict = {}  # id(Var) -> C expression
        self.buffers: dict = {}  # id(Buffer) -> C identifier
        self.texts = {}

        bound_vars, allocated = _bound_here(k)
        syms = used_symbols(k.body)
        bufs = [x for x in syms if isinstance(x, Buffer)]
        vars_ = [x for x in syms if isinstance(x, Var)]
        stored = stored_buffers(k.body)
        pos = {id(p): i for i, p in enumerate(func.params)}
        ws = {id(b): i for i, b in enumerate(workspace)}
        for b in bufs:
            if id(b) not in pos and id(b) not in ws and id(b) not in allocated:
                raise BuildError(format_error(
                    self.who, f"buffer {b.name!r} is used outside its allocation",
                    "expected a parameter buffer or one introduced by an enclosing Allocate",
                    Kernel=k.name))
        for v in vars_:
            if id(v) not in pos and id(v) not in bound_vars:
                raise BuildError(format_error(
                    self.who, f"variable {v.name!r} is used but not defined",
                    "expected a parameter, a loop variable, a hardware index or a LetStmt "
                    "variable in scope", Kernel=k.name))
        ext_bufs = [b for b in bufs if id(b) not in allocated]
        ext_bufs.sort(key=lambda b: (0, pos[id(b)]) if id(b) in pos else (1, ws[id(b)]))
        self.kname = k.name
        self.tma_dst = _tma_destinations(k)
        smem_offsets, dyn_bytes = self._shared_layout(k)
        for x in list(smem_offsets.values()) + [dyn_bytes]:   # sizes the offsets need
            for v in sym.params_of(x):
                if id(v) in pos and all(v is not w for w in vars_):
                    vars_.append(v)
        ext_vars = sorted((v for v in vars_ if id(v) in pos), key=lambda v: pos[id(v)])
        params, sig = [], []
        for b in ext_bufs:
            self.dtypes.add(b.dtype)
            const = "" if b in stored else "const "
            name = names(b, b.name)
            self.buffers[id(b)] = name
            self.texts = {}
            params.append(b)
            sig.append(f"{const}{d.mem_type(b.dtype)}* {d.restrict} {name}".replace("  ", " "))
        for v in ext_vars:
            self.dtypes.add(v.dtype)
            name = names(v, v.name)
            self.env[id(v)] = name
            self.texts = {}
            params.append(v)
            sig.append(f"{d.ctype(v.dtype)} {name}")
        self.tensor_maps = {}
        for m in _tensor_maps(k, names, pos, self.who):
            self.tensor_maps[m.key()] = m.name
            params.append(m)
            sig.append(f"const __grid_constant__ PtTensorMap {m.name}")

        self.lines: list = []
        self.scopes: list = [set()]
        self.smem_offsets = smem_offsets
        if not (sym.is_static(dyn_bytes) and dyn_bytes == 0):
            self.smem_name = "pt_dynamic_shared"  # IR names never start with pt_
            self.emit(1, d.dynamic_shared_decl.format(name=self.smem_name))
            if self.swizzle_period:
                # swizzled buffers (Stage.swizzle) start on their pattern's period, counted
                # in shared addresses (what the tensor cores XOR): realign the base, for
                # which _shared_layout reserved one period more
                p = self.swizzle_period
                self.emit(1, f"unsigned char* pt_smem = {self.smem_name} + (({p}u - ((unsigned)"
                             f"__cvta_generic_to_shared({self.smem_name}) & {p - 1}u)) & "
                             f"{p - 1}u);")
                self.smem_name = "pt_smem"
        for v, tag in k.thread_vars:
            if tag not in d.index_names:
                raise BuildError(format_error(
                    self.who, f"kernel {k.name!r} binds {v.name!r} to unknown index "
                    f"{tag!r}", f"expected one of {', '.join(d.index_names)}"))
            name = names(v, v.name)
            self.env[id(v)] = name
            self.texts = {}
            self.emit(1, f"const {d.ctype(v.dtype)} {name} = "
                         f"({d.ctype(v.dtype)}){d.index_names[tag]};")
        self.stmt(k.body, 1)
        # a kernel of an empty stage (a zero extent) is never launched; its bound must be legal
        # a block size given at launch has no compile-time bound
        bounds = d.launch_bounds.format(threads=max(threads, 1)) if fixed_block else ""
        min_blocks = k.min_blocks or self.min_blocks   # the schedule's, else the target's
        if bounds and min_blocks and bounds.endswith(")"):
            # the minimum of resident blocks per SM: ptxas caps the registers to fit them
            bounds = f"{bounds[:-1]}, {min_blocks})"
        head = " ".join(x for x in (d.kernel_prefix, "void", bounds, kname) if x)
        one_line = f"{head}({', '.join(sig)}) {{"
        if len(one_line) <= 100:
            text = [one_line]
        else:
            text = [f"{head}("] + [f"    {s}{',' if i < len(sig) - 1 else ') {'}"
                                   for i, s in enumerate(sig)]
        text += self.lines + ["}"]
        info = KernelInfo(kname, tuple(params), tuple(k.grid), tuple(k.block), dyn_bytes,
                          frozenset(b for b in stored if id(b) not in allocated),
                          0 if sym.is_static(dyn_bytes) else limits.shared_bytes_per_block)
        return info, "\n".join(text)

    def _shared_layout(self, k: KernelLaunch) -> tuple[dict, int]:
        """Byte offsets of the kernel's shared buffers in dynamic shared memory, and its
        size; empty and 0 when they fit the static limit. A buffer whose shape depends on
        symbolic sizes puts them all in dynamic shared memory: the constant ones first,
        then the symbolic ones at offsets (and a total) computed at run time."""
        bufs = [x.buffer for x in walk_stmts(k.body)
                if isinstance(x, Allocate) and x.buffer.scope == "shared"]
        fixed = [b for b in bufs if all(sym.is_static(d) for d in b.shape)]
        dynamic = [b for b in bufs if b not in fixed]
        self.swizzle_period = max((self._period(b) for b in bufs), default=0)
        offsets, total = {}, 0
        for b in fixed:
            align = max(_MIN_ALIGN, self._period(b))
            total = -(-total // align) * align
            offsets[id(b)] = total
            total += self._const_size(b) * dt.nbytes(b.dtype)
        if not dynamic:
            if total <= self.limits.static_shared_bytes:
                self.swizzle_period = 0   # static arrays are aligned by their declaration
                return {}, 0
            return offsets, total + self.swizzle_period
        for b in dynamic:   # swizzled buffers have constant shapes (Stage.swizzle)
            total = sym.mul(sym.ceildiv(total, _MIN_ALIGN), _MIN_ALIGN)
            offsets[id(b)] = total
            size = dt.nbytes(b.dtype)
            for d in b.shape:
                size = sym.mul(size, d)
            total = sym.add(total, size)
        return offsets, sym.add(total, self.swizzle_period)

    def _period(self, b: Buffer) -> int:
        """The alignment (bytes) buffer ``b`` needs beyond :data:`_MIN_ALIGN`: its swizzle
        pattern's, and 128 for the destination of TMA copies (PTX ISA,
        ``cp.async.bulk.tensor``); 0 for none."""
        p = _swizzle_period(b, self.d, self.who)
        return max(p, TMA_ALIGN) if id(b) in self.tma_dst else p

    def _const_size(self, b: Buffer) -> int:
        n = 1
        for s in b.shape:
            v = s.value if isinstance(s, Const) else s
            if not isinstance(v, (int, np.integer)):
                raise BuildError(format_error(
                    self.who, f"{b.scope} buffer {b.name!r} has the non-constant shape "
                    f"{list(b.shape)}", "expected a constant shape inside a kernel",
                    Kernel=self.kname))
            n *= int(v)
        return max(n, 1)

    # ---------------------------------------------------------------- statements
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def declare(self, name: str) -> bool:
        """Record a declaration in the current C scope; False if the name is taken there
        (the caller then opens a block)."""
        if name in self.scopes[-1]:
            return False
        self.scopes[-1].add(name)
        return True

    def block(self, s: Stmt, depth: int) -> None:
        self.scopes.append(set())
        self.stmt(s, depth)
        self.scopes.pop()

    def stmt(self, s: Stmt, depth: int) -> None:
        """Print ``s`` at indentation ``depth`` (dispatch: ``visit_<Class>``)."""
        self.visit(s, depth)

    def generic_visit(self, s, *args) -> None:
        raise BuildError(format_error(self.who, f"unknown statement {type(s).__name__}",
                                      "expected a loop IR statement", Kernel=self.kname))

    def visit_Seq(self, s: Seq, depth: int) -> None:
        for x in s.stmts:
            self.stmt(x, depth)

    def visit_For(self, s: For, depth: int) -> None:
        stream = "nontemporal" in s.pragmas
        self.streaming += stream
        hint = next((h for h in LOAD_HINTS if h in s.pragmas), None)
        outer, self.load_hint = self.load_hint, hint or self.load_hint
        try:
            self._for(s, depth)
        finally:
            self.streaming -= stream
            self.load_hint = outer

    def _for(self, s: For, depth: int) -> None:
        if s.kind not in FOR_KINDS:
            raise BuildError(format_error(self.who, f"loop {s.var.name!r} has kind "
                                          f"{s.kind!r}", "expected serial, unrolled, "
                                          "vectorized or parallel", Kernel=self.kname))
        asynchronous = ASYNC_COPY in s.pragmas
        for p in s.pragmas:
            if p != ASYNC_COPY:
                self.emit(depth, f"// pragma {p}")
        if HALF2 in s.pragmas and self.d.name == "cuda":
            half2_loop(self, s, depth)
            return
        vec = vector_copy(s) if self.d.vector_copies else None
        if asynchronous and (vec is None or vec[0] not in ("uint4", "float4", "int4")):
            raise BuildError(format_error(
                self.who, f"loop {s.var.name!r} is a cp.async copy but not a 16-byte vector "
                "copy", "an aligned vector copy of 16 bytes", Kernel=self.kname))
        if vec is not None:
            vt, st, ld, guard, fill = vec
            if guard is not None:
                self.emit(depth, f"if ({strip_parens(self.expr(guard))}) {{")
                depth += 1
            zero = {s.var: Const(s.var.dtype, 0)}
            dst = self.index(st.buffer, tuple(simplify_expr(substitute(i, zero))
                                              for i in st.indices))
            src = self.index(ld.buffer, tuple(simplify_expr(substitute(i, zero))
                                              for i in ld.indices))
            if asynchronous:
                from polytile.targets.cuda.tensor_core import C_HELPERS

                if fill is None:
                    name, text = C_HELPERS["cp.async.cg.shared.global"]
                    self.helpers[name] = text
                    self.emit(depth, f"{name}(&{self.buffer(st.buffer)}[{dst}], "
                                     f"&{self.buffer(ld.buffer)}[{src}]);")
                else:
                    # zero-filled: where fill is false nothing is read, and the source
                    # operand is the buffer's start (the gather's address may be outside it)
                    name, text = C_HELPERS["cp.async.cg.shared.global.zfill"]
                    self.helpers[name] = text
                    cond = strip_parens(self.expr(fill))
                    self.emit(depth, f"{{ bool pt_fill = {cond};")
                    self.emit(depth + 1, f"{name}(&{self.buffer(st.buffer)}[{dst}], pt_fill ? "
                                         f"&{self.buffer(ld.buffer)}[{src}] : "
                                         f"{self.buffer(ld.buffer)}, pt_fill); }}")
            elif fill is not None:
                cond = strip_parens(self.expr(fill))
                self.emit(depth, f"*({vt}*)(&{self.buffer(st.buffer)}[{dst}]) = ({cond}) ? "
                                 f"*(const {vt}*)(&{self.buffer(ld.buffer)}[{src}]) : {vt}{{}};")
            elif (ld.buffer.scope == "local" and vt in _SCALAR_LANES
                  and isinstance(ld.buffer.size, int) and ld.buffer.size > s.extent.value):
                # a register array (a thread's accumulator tile) is not 16-byte aligned
                # and a vector pointer into it would force it to the stack; packing its
                # elements into one vector store (STG.128) makes ptxas keep each row of
                # 4 accumulators in an aligned register quad for the whole k loop, in the
                # same register bank as the B row it is multiplied with (an LDS.128 quad):
                # an FFMA bank conflict more per 3 (SGEMM 128 x 128 on an H200: 0.73x
                # cuBLAS against 0.86x with scalar stores). So one store per lane. A
                # register array of one vector (a row kernel's staged values) has no such
                # loop and keeps its 16-byte copy (softmax 4096^2: 0.83x the copy bound).
                for v in range(int(s.extent.value)):
                    lane = {s.var: Const(s.var.dtype, v)}
                    d = self.index(st.buffer, tuple(simplify_expr(substitute(i, lane))
                                                    for i in st.indices))
                    x = self.index(ld.buffer, tuple(simplify_expr(substitute(i, lane))
                                                    for i in ld.indices))
                    self.emit(depth, f"{self.buffer(st.buffer)}[{d}] = "
                                     f"{self.buffer(ld.buffer)}[{x}];")
            elif (self.load_hint and ld.buffer.scope == "global" and st.buffer.scope != "global"
                  and vt in LOAD_HINTS[self.load_hint] and self.d.name == "cuda"):
                # a hinted loop's global vector load: its L1 eviction priority
                name, text = LOAD_HINTS[self.load_hint][vt]
                self.helpers[name] = text
                self.emit(depth, f"*({vt}*)(&{self.buffer(st.buffer)}[{dst}]) = "
                                 f"{name}(&{self.buffer(ld.buffer)}[{src}]);")
            elif self.streaming and st.buffer.scope == "global" and vt in STREAM_STORES \
                    and self.d.name == "cuda":
                # a nontemporal loop's global vector store: st.global.cs (evict first),
                # the line is not kept in the caches for a reader that never comes
                name, text = STREAM_STORES[vt]
                self.helpers[name] = text
                self.emit(depth, f"{name}(&{self.buffer(st.buffer)}[{dst}], "
                                 f"*(const {vt}*)(&{self.buffer(ld.buffer)}[{src}]));")
            else:
                self.emit(depth, f"*({vt}*)(&{self.buffer(st.buffer)}[{dst}]) = "
                                 f"*(const {vt}*)(&{self.buffer(ld.buffer)}[{src}]);")
            if guard is not None:
                self.emit(depth - 1, "}")
            return
        if s.kind in (LoopKind.UNROLLED, LoopKind.VECTORIZED) and not (
                isinstance(s.extent, Const) and s.extent.value > MAX_UNROLL):
            # a full unroll of a long constant loop would stall nvcc: leave it rolled
            self.emit(depth, "#pragma unroll")
        name = self.names(s.var, s.var.name)
        t = self.d.ctype(s.var.dtype)
        lo = strip_parens(self.expr(s.min))
        if isinstance(s.min, Const) and s.min.value == 0:
            end = strip_parens(self.expr(s.extent))
        else:
            end = strip_parens(self.expr(Binary(s.extent.dtype, "add", s.min, s.extent)))
        inc = f"++{name}" if s.step == 1 else f"{name} += {s.step}"
        self.emit(depth, f"for ({t} {name} = {lo}; {name} < {end}; {inc}) {{")
        self.env[id(s.var)] = name
        self.texts = {}
        self.scopes.append({name})
        self.stmt(s.body, depth + 1)
        self.scopes.pop()
        self.emit(depth, "}")

    def visit_While(self, s: While, depth: int) -> None:
        self.emit(depth, f"while ({strip_parens(self.expr(s.cond))}) {{")
        self.block(s.body, depth + 1)
        self.emit(depth, "}")

    def visit_IfThenElse(self, s: IfThenElse, depth: int) -> None:
        self.emit(depth, f"if ({strip_parens(self.expr(s.cond))}) {{")
        self.block(s.then_case, depth + 1)
        if s.else_case is not None:
            self.emit(depth, "} else {")
            self.block(s.else_case, depth + 1)
        self.emit(depth, "}")

    def visit_LetStmt(self, s: LetStmt, depth: int) -> None:
        name = self.names(s.var, s.var.name)
        value = strip_parens(self.expr(s.value))
        if s.value.dtype != s.var.dtype:
            value = self.cast(value, s.value.dtype, s.var.dtype)
        opened = not self.declare(name)
        if opened:
            self.emit(depth, "{")
            depth += 1
            self.scopes.append({name})
        self.emit(depth, f"const {self.d.ctype(s.var.dtype)} {name} = {value};")
        self.env[id(s.var)] = name
        self.texts = {}
        self.stmt(s.body, depth)
        if opened:
            self.scopes.pop()
            self.emit(depth - 1, "}")

    def visit_Allocate(self, s: Allocate, depth: int) -> None:
        b, d = s.buffer, self.d
        if b.scope not in ("shared", "local", "stack") + FRAGMENT_SCOPES:
            raise BuildError(format_error(
                self.who, f"buffer {b.name!r} of scope {b.scope!r} is allocated inside "
                f"kernel {self.kname!r}", "expected scope 'shared' or 'local' inside a kernel "
                "('global'/'heap' buffers are allocated outside the kernels)"))
        self.dtypes.add(b.dtype)
        name = self.names(b, b.name)
        self.buffers[id(b)] = name
        self.texts = {}
        t = d.mem_type(b.dtype)
        dynamic = b.scope == "shared" and not all(sym.is_static(x) for x in b.shape)
        size = "".join(f"[{sym.text(x)}]" for x in b.shape) if dynamic else \
            self._const_size(b)
        opened = not self.declare(name)
        if opened:
            self.emit(depth, "{")
            depth += 1
            self.scopes.append({name})
        if b.scope == "shared" and id(b) in self.smem_offsets:
            off = self.smem_offsets[id(b)]
            if not sym.is_static(off):
                off = self.expr(_as_i64(off))
            self.emit(depth, f"{t}* {name} = reinterpret_cast<{t}*>({self.smem_name} + "
                             f"{off});  // {size} elements, dynamic shared memory")
        elif b.scope == "shared":
            period = self._period(b)
            words = (d.shared_prefix, f"__align__({period})" if period else d.shared_align, t)
            self.emit(depth, f"{' '.join(w for w in words if w)} {name}[{size}];")
        elif b.scope in FRAGMENT_SCOPES:
            self.uses_fragments = True
            th, tw = fragment_tile(b.scope, b.dtype, b.shape[-1])
            self.emit(depth, f"{d.fragment_type(b, s.body, self.who)} {name}"
                             f"[{size // (th * tw)}];")
        else:
            words = (d.local_prefix, t)
            self.emit(depth, f"{' '.join(w for w in words if w)} {name}[{size}];")
        self.stmt(s.body, depth)
        if opened:
            self.scopes.pop()
            self.emit(depth - 1, "}")

    def visit_Store(self, s: Store, depth: int) -> None:
        b = s.buffer
        if b.scope in FRAGMENT_SCOPES:
            raise BuildError(format_error(
                self.who, f"fragment {b.name!r} ({b.scope}) is written element by element",
                "fragments written only by tensor-core intrinsics (tensorize the stages that "
                "write them)", Kernel=self.kname))
        value = self.expr(s.value)
        if s.value.dtype != b.dtype:
            value = self.cast(value, s.value.dtype, b.dtype)
        if b.dtype == "bool":
            value = f"({self.d.mem_type('bool')})({strip_parens(value)})"
        self.emit(depth, f"{self.buffer(b)}[{self.index(b, s.indices)}] = {strip_parens(value)};")

    def visit_Evaluate(self, s: Evaluate, depth: int) -> None:
        # only calls in the code of tensor intrinsics have side effects
        if isinstance(s.value, ExternCall):
            self.emit(depth, f"{self.expr(s.value)};")

    def visit_TensorCall(self, s: TensorCall, depth: int) -> None:
        self.emit(depth, f"// {s.intrin.name}.{s.part}")
        self.stmt(s.body, depth)

    def visit_Assert(self, s: Assert, depth: int) -> None:
        # the message cannot reach the host: the launch fails and names the kernel
        self.emit(depth, f"if (!({strip_parens(self.expr(s.cond))})) {{ {self.d.trap} }}"
                         f"  // {s.message}")

    def visit_Sync(self, s: Sync, depth: int) -> None:
        if s.scope != "shared":
            raise BuildError(format_error(self.who, f"sync of scope {s.scope!r}",
                                          "expected scope 'shared'", Kernel=self.kname))
        self.emit(depth, self.d.barrier)

    def visit_WarpShuffle(self, s: WarpShuffle, depth: int) -> None:
        if self.d.name != "cuda":
            raise BuildError(format_error(self.who, f"warp shuffle into {s.buffer.name!r}",
                                          "warp shuffles only in CUDA kernels (the "
                                          "warp_reduce pass runs for target cuda only)",
                                          Kernel=self.kname))
        call = ExternCall(s.buffer.dtype, "__shfl_xor_sync",
                          (Const("uint32", s.mask), s.value, Const("int32", s.lane_xor)),
                          "pure_extern")
        self.visit_Store(Store(s.buffer, s.indices, call), depth)

    def visit_KernelLaunch(self, s: KernelLaunch, depth: int) -> None:
        raise LoweringError(format_error(
            self.who, f"kernel {s.name!r} is launched inside kernel {self.kname!r}",
            "expected kernel launches only at the top level of the function"))

def _tma_destinations(k: KernelLaunch) -> set:
    """``id`` of the shared buffers the ``tma.load_2d`` calls of kernel ``k`` write."""
    from polytile.schedule.passes.tma_copy import TMA_LOAD

    return {id(x.value.args[0].buffer) for x in walk_stmts(k.body)
            if isinstance(x, Evaluate) and isinstance(x.value, ExternCall)
            and x.value.name == TMA_LOAD}


def _swizzle_period(b: Buffer, d: CDialect, who: str) -> int:
    """Bytes of the swizzle pattern of shared buffer ``b`` (its start's alignment), 0 when
    it is not swizzled."""
    if b.swizzle == "none":
        return 0
    if d.name != "cuda":
        raise BuildError(format_error(who, f"shared buffer {b.name!r} is swizzled "
                                      f"({b.swizzle})", "a CUDA target (the Hopper tensor "
                                      "cores' layouts)"))
    from polytile.targets.cuda.wgmma import SWIZZLE_ROW_BYTES

    return 8 * SWIZZLE_ROW_BYTES[b.swizzle]


@deep("build")
def fragment_type(b: Buffer, body: Stmt, d: CDialect, who: str) -> str:
    """The C++ type of one tile of fragment buffer ``b``: ``nvcuda::wmma::fragment<use, 16,
    16, 16, T, layout>``, the layout taken from the ``:layout`` tag of the calls that load
    it in ``body`` (matrix_a/matrix_b only)."""
    use = b.scope.split(".")[1]
    if b.scope == "wgmma.accumulator":   # targets/cuda/wgmma_intrin.py: float[N / 2]
        width = b.shape[-1]
        if b.dtype != "float32" or len(b.shape) != 2 or b.shape[0] % 64 or width % 8 \
                or not 8 <= width <= 256:
            raise BuildError(format_error(who, f"fragment {b.name!r} of {b.dtype}"
                                          f"{list(b.shape)} (wgmma.accumulator)",
                                          "float32 tiles of 64 rows by 8..256 columns "
                                          "(a multiple of 8)"))
        return f"pt_wgmma_acc<{width}>"
    tags = {x.name.partition(":")[2] for st in walk_stmts(body) for e in _exprs(st)
            for x in _calls(e) if any(isinstance(a, AccessPtr) and a.buffer is b
                                      for a in x.args)}
    if "mma" in tags:   # the mma.sync path: register tiles (targets/cuda/tensor_core.py)
        from polytile.targets.cuda.tensor_core import MMA_FRAGMENT_TYPES

        if (b.scope, b.dtype) not in MMA_FRAGMENT_TYPES or b.size % 256:
            raise BuildError(format_error(who, f"fragment {b.name!r} of {b.dtype}"
                                          f"{list(b.shape)} on the mma.sync path",
                                          "whole 16x16 tiles of float16 or bfloat16 "
                                          "(accumulators: float16/float32)"))
        return MMA_FRAGMENT_TYPES[(b.scope, b.dtype)]
    t = {"float16": "half", "float32": "float", "int8": "signed char", "uint8": "unsigned char",
         "int32": "int", "bfloat16": "__nv_bfloat16"}.get(b.dtype)
    tr, tc = fragment_tile(b.scope, b.dtype)
    if t is None or b.size % (tr * tc):
        raise BuildError(format_error(who, f"fragment {b.name!r} of {b.dtype}{list(b.shape)}",
                                      "whole 16x16 tiles of float16/float32/int8/int32 "
                                      "(16x8 and 8x16 for tf32 operands)"))
    shape = "16, 16, 16"
    if (tr, tc) != (16, 16) or (use == "accumulator" and _tf32_accumulator(b, body)):
        # tf32 (m16n16k8): float32 operands are held as precision::tf32
        shape, t = "16, 16, 8", "nvcuda::wmma::precision::tf32" if use != "accumulator" else t
    layout = ""
    if use != "accumulator":
        tags = {x.name.partition(":")[2] for st in walk_stmts(body)
                for e in _exprs(st) for x in _calls(e)
                if any(isinstance(a, AccessPtr) and a.buffer is b for a in x.args)}
        tags.discard("")
        if not tags:
            raise BuildError(format_error(
                who, f"fragment {b.name!r} ({b.scope}) is not loaded by a tensor-core "
                "intrinsic", "fragments read and written only by tensor-core intrinsics",
                hint="tensorize the stages that write and read it "
                "(polytile.targets.cuda.tensor_core)"))
        if len(tags) != 1:
            raise BuildError(format_error(who, f"fragment {b.name!r} is loaded with layouts "
                                          f"{sorted(tags) or 'none'}", "one layout"))
        layout = f", nvcuda::wmma::{tags.pop()}"
    return f"nvcuda::wmma::fragment<nvcuda::wmma::{use}, {shape}, {t}{layout}>"


def _tf32_accumulator(b: Buffer, body: Stmt) -> bool:
    """Is accumulator ``b`` updated by a tf32 MMA (a call that also takes a float32
    ``matrix_a`` fragment)?"""
    def ptrs(x):
        return [a.buffer for a in x.args if isinstance(a, AccessPtr)]

    return any(any(p is b for p in ptrs(x)) and any(
        p.scope == "wmma.matrix_a" and p.dtype == "float32" for p in ptrs(x))
        for st in walk_stmts(body) for e in _exprs(st) for x in _calls(e))


def _exprs(st: Stmt):
    from polytile.schedule.loop_ir import stmt_exprs
    return stmt_exprs(st)


def _tensor_maps(k: KernelLaunch, names, pos: dict, who: str) -> list:
    """The tensor maps the ``tma.load_2d`` calls of kernel ``k`` read (one per source,
    box and swizzle; :mod:`polytile.schedule.passes.tma_copy`), named by ``names``."""
    from polytile.schedule.passes.tma_copy import TMA_LOAD

    from .gpu.tensor_map import TensorMapParam

    out: dict = {}
    for x in walk_stmts(k.body):
        if not (isinstance(x, Evaluate) and isinstance(x.value, ExternCall)
                and x.value.name == TMA_LOAD):
            continue
        a = x.value.args
        src, dst = a[1].buffer, a[0].buffer
        if id(src) not in pos:
            raise BuildError(format_error(
                who, f"a TMA copy reads {src.name!r}, which is not an argument of the "
                "function", "TMA copies of argument buffers (their tensor maps are built "
                "at launch from the argument's pointer)", Kernel=k.name))
        m = TensorMapParam(src, a[7].value, a[8].value, a[4].value, a[5].value,
                           dst.swizzle, "")
        if m.key() not in out:
            out[m.key()] = TensorMapParam(src, m.rows, m.cols, m.box_rows, m.box_cols,
                                          m.swizzle, names(m, f"{src.name}_tmap"))
    return list(out.values())


def _calls(e):
    from polytile.te.visitor import collect
    return collect(e, ExternCall)


def print_c_module(func: PrimFunc, dialect: CDialect, fast_math: bool = False,
                   limits: DeviceLimits | None = None, min_blocks: int = 0) -> CModule:
    """Print ``func`` as C source in ``dialect``.

    Parameters
    ----------
    func : PrimFunc
        Lowered and flattened loop IR whose body is ``KernelLaunch`` statements, in
        ``Seq`` and ``Allocate`` (scope ``global``/``heap``) only.
    dialect : CDialect
        The target's table (``CUDADialect()``...).
    fast_math : bool
        Use the dialect's fast math functions (a ``-fast-math`` target).
    limits : DeviceLimits, optional
        The device's limits (launch shapes, static shared memory); default: those of the
        backend named ``dialect.name``.
    min_blocks : int
        With N > 0, kernels of a fixed block size get ``__launch_bounds__(threads, N)``
        (a ``-min-blocks=N`` CUDA target).

    Returns
    -------
    CModule
        The source and the host plan (workspace buffers, kernels with their parameters).

    Raises
    ------
    LoweringError
        A statement outside every kernel other than ``Seq``/``Allocate``, or a kernel
        launched inside a kernel.
    BuildError
        Unsupported constructs: an unknown intrinsic, dtype, statement or index tag, a
        buffer or variable used out of scope, a non-constant shared/local buffer, a launch
        shape over the dialect's limits.
    InternalError
        When ``func`` breaks the loop-IR contract (several indices per access).
    """
    return CPrinter(dialect, fast_math, limits, min_blocks).module(func)
