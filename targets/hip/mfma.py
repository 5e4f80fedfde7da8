"""AMD MFMA matrix-core intrinsics for ``tensorize`` (CDNA2 ``gfx90a``, CDNA3 ``gfx942``,
CDNA4 ``gfx950``).

One MFMA instruction multiplies an ``M x K`` tile of A by a ``K x N`` tile of B and adds
an ``M x N`` accumulator, all three spread over the 64 lanes of a wavefront: each lane
holds a few elements of each in its registers. Which elements is the instruction's
*layout*, kept here as data: :class:`Layout` maps ``(lane, register element)`` to
``(row, column)`` of a tile, and the same function prints the C index expressions of the
helpers (through :class:`_CExpr`) and drives the reference interpreter's lane-level model
(:func:`emulate`). There is no second copy of a layout.

Source of the layouts: AMD's "AMD Instinct MI300 Instruction Set Architecture" (CDNA3
ISA) guide, section 7.1 "Matrix fused multiply-add (MFMA)" with its dependency and
register-layout tables (the CDNA2 guide's section 7.1 for gfx90a), as tabulated by AMD's
Matrix Instruction Calculator (``matrix_calculator.py --register-layout``, the ``gfx9``
calculation: an input element ``X[i][k]`` of an ``M``-row operand with ``E`` consecutive
``k`` per lane sits in lane ``(k // E) * M + i``, element ``k % E``; an output element
``D[i][j]`` of ``N`` columns in register ``(i // (4 * 64/N)) * 4 + i % 4`` of lane
``((i // 4) % (64/N)) * N + j``). ``tests/targets/test_hip_mfma.py`` checks entries of
those tables.

=============================  =========  =============================================
instruction (``__builtin_``)   ``-mcpu``  per lane
=============================  =========  =============================================
``v_mfma_f32_32x32x8f16``      all        A, B: 4 x f16;   C/D: 16 x f32
``v_mfma_f32_16x16x16f16``     all        A, B: 4 x f16;   C/D: 4 x f32
``v_mfma_f32_32x32x8bf16_1k``  all        A, B: 4 x bf16;  C/D: 16 x f32
``v_mfma_f32_16x16x16bf16_1k`` all        A, B: 4 x bf16;  C/D: 4 x f32
``v_mfma_i32_16x16x16i8``      gfx90a     A, B: 4 x i8;    C/D: 4 x i32
``v_mfma_i32_16x16x32_i8``     gfx942+    A, B: 8 x i8;    C/D: 4 x i32
=============================  =========  =============================================

(gfx942 spells the first four ``v_mfma_f32_32x32x8_f16``...; the builtins keep one name.)

Intrinsics, in the model of :mod:`polytile.targets.cuda.tensor_core`:

* :func:`mfma_mma` -- ``c[i, j] += sum_k a[i, k] * b[k, j]`` on one ``M x N x K`` step;
  A and B are read straight from shared memory (LDS) or global memory with any row
  stride, each lane loading its own elements; C is an accumulator fragment, scope
  ``mfma.accumulator_32x32`` or ``mfma.accumulator_16x16`` (a row-major array of tiles
  held in registers); ``reset`` zeroes it.
* :func:`mfma_store` -- ``out[i, j] = frag[i, j]``: each lane stores its elements.

In the loop IR a fragment is a per-thread array (each thread holds the whole tile, which
the interpreter runs); on the device the 64 lanes of a wavefront hold it together and
execute every call together. Hence a kernel that uses fragments must give
``threadIdx.x`` a multiple of 64 lanes and must not bind the loops of fragment stages to
``threadIdx.x`` (checked in lowering, :func:`polytile.schedule.gpu.check_wavefronts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from polytile import te, tir
from polytile.errors import BuildError, format_error

WAVEFRONT = 64


# ------------------------------------------------------------------ layouts as data
class _CExpr:
    """A C integer expression built by running a layout function on symbols."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    @staticmethod
    def _of(x) -> str:
        return x.text if isinstance(x, _CExpr) else str(int(x))

    def _bin(self, op: str, other, swap: bool = False) -> _CExpr:
        a, b = (self._of(other), self.text) if swap else (self.text, self._of(other))
        return _CExpr(f"({a} {op} {b})")

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __floordiv__(self, o): return self._bin("/", o)     # lanes and registers are >= 0
    def __mod__(self, o): return self._bin("%", o)


@dataclass(frozen=True)
class Layout:
    """Where the elements of one ``rows x cols`` operand tile live in a wavefront.

    ``at(lane, r) -> (row, col)``: the tile element held in register element ``r``
    (``0 <= r < per_lane``) of lane ``lane`` (``0 <= lane < 64``). Every element of the
    tile is held exactly once (:meth:`table` checks it).
    """

    rows: int
    cols: int
    per_lane: int
    at: Callable

    def table(self) -> np.ndarray:
        """``T[row, col] = lane * per_lane + r``: the inverse of ``at`` as an array.

        Raises
        ------
        ValueError
            When ``at`` leaves a tile element unheld or holds one twice.
        """
        t = np.full((self.rows, self.cols), -1, dtype=np.int64)
        for lane in range(WAVEFRONT):
            for r in range(self.per_lane):
                i, j = self.at(lane, r)
                if not (0 <= i < self.rows and 0 <= j < self.cols) or t[i, j] >= 0:
                    raise ValueError(f"layout: lane {lane} element {r} -> ({i}, {j}) is "
                                     f"outside the {self.rows}x{self.cols} tile or held twice")
                t[i, j] = lane * self.per_lane + r
        if (t < 0).any():
            raise ValueError("layout: some tile elements are held by no lane")
        return t

    def coords(self) -> tuple:
        """``(rows, cols)``: ``[64, per_lane]`` integer arrays of ``at`` over every lane and
        register element (``at`` evaluated on numpy arrays)."""
        lane = np.arange(WAVEFRONT, dtype=np.int64)[:, None]
        r = np.arange(self.per_lane, dtype=np.int64)[None, :]
        i, j = self.at(lane, r)
        return (np.broadcast_to(i, (WAVEFRONT, self.per_lane)),
                np.broadcast_to(j, (WAVEFRONT, self.per_lane)))

    def c_index(self, lane: str, r: str, ld: str) -> str:
        """The C offset ``row * ld + col`` of element ``r`` of lane ``lane``."""
        i, j = self.at(_CExpr(lane), _CExpr(r))
        return f"{_CExpr._of(i)} * {ld} + {_CExpr._of(j)}"


def input_layout(outer: int, k: int, transposed: bool) -> Layout:
    """The A (``outer x k``, rows i) or B (``k x outer``, ``transposed``: columns j) operand
    of a one-block MFMA: ``E = k * outer / 64`` consecutive ``k`` per lane, lane
    ``(k // E) * outer + i``."""
    e = k * outer // WAVEFRONT
    if transposed:
        return Layout(k, outer, e, lambda lane, r: ((lane // outer) * e + r, lane % outer))
    return Layout(outer, k, e, lambda lane, r: (lane % outer, (lane // outer) * e + r))


def output_layout(m: int, n: int) -> Layout:
    """The C/D operand (``m x n``, 32-bit elements) of a one-block MFMA: rows in groups of
    4 registers; ``64 / n`` groups of 4 rows side by side in the lanes of a register."""
    g = WAVEFRONT // n

    return Layout(m, n, m * n // WAVEFRONT,
                  lambda lane, r: ((r // 4) * 4 * g + (lane // n) * 4 + r % 4, lane % n))


@dataclass(frozen=True)
class MFMA:
    """One MFMA instruction: shape, dtypes, its clang builtin and where it exists."""

    name: str            # v_mfma_... (CDNA2 spelling)
    m: int
    n: int
    k: int
    dtype: str           # A and B
    acc: str             # C and D
    builtin: str
    archs: tuple         # -mcpu values that have it

    @property
    def a(self) -> Layout:
        return input_layout(self.m, self.k, False)

    @property
    def b(self) -> Layout:
        return input_layout(self.n, self.k, True)

    @property
    def c(self) -> Layout:
        return output_layout(self.m, self.n)

    @property
    def scope(self) -> str:
        return f"mfma.accumulator_{self.m}x{self.n}"


_ALL = ("gfx90a", "gfx942", "gfx950")
#: The MFMA instructions polytile emits, by name.
INSTRUCTIONS = {i.name: i for i in (
    MFMA("v_mfma_f32_32x32x8f16", 32, 32, 8, "float16", "float32",
         "__builtin_amdgcn_mfma_f32_32x32x8f16", _ALL),
    MFMA("v_mfma_f32_16x16x16f16", 16, 16, 16, "float16", "float32",
         "__builtin_amdgcn_mfma_f32_16x16x16f16", _ALL),
    MFMA("v_mfma_f32_32x32x8bf16_1k", 32, 32, 8, "bfloat16", "float32",
         "__builtin_amdgcn_mfma_f32_32x32x8bf16_1k", _ALL),
    MFMA("v_mfma_f32_16x16x16bf16_1k", 16, 16, 16, "bfloat16", "float32",
         "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k", _ALL),
    MFMA("v_mfma_i32_16x16x16i8", 16, 16, 16, "int8", "int32",
         "__builtin_amdgcn_mfma_i32_16x16x16i8", ("gfx90a",)),
    MFMA("v_mfma_i32_16x16x32_i8", 16, 16, 32, "int8", "int32",
         "__builtin_amdgcn_mfma_i32_16x16x32_i8", ("gfx942", "gfx950")),
)}


def instruction(name: str) -> MFMA:
    """The :class:`MFMA` named ``name`` (``v_mfma_`` prefix optional).

    Raises
    ------
    ValueError
        For an unknown name.
    """
    key = name if name.startswith("v_mfma_") else "v_mfma_" + name
    if key not in INSTRUCTIONS:
        raise ValueError(format_error("mfma", f"unknown MFMA instruction {name!r}",
                                      f"one of {', '.join(INSTRUCTIONS)}"))
    return INSTRUCTIONS[key]


def for_arch(mcpu: str) -> tuple:
    """Names of the MFMA instructions of ``mcpu`` (``DeviceLimits.tensor_intrinsics``)."""
    return tuple(n for n, i in INSTRUCTIONS.items() if mcpu in i.archs)


# ------------------------------------------------------------------ the intrinsics
def _matmul(a: te.Tensor, b: te.Tensor, acc: str, name: str) -> te.Tensor:
    k = te.reduce_axis((0, a.shape[1]), name="k")
    return te.compute((a.shape[0], b.shape[1]),
                      lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k),
                      name=name)


def mfma_mma(name: str = "v_mfma_f32_32x32x8f16") -> te.TensorIntrin:
    """``c[i, j] = sum_k a[i, k] * b[k, j]`` on one ``M x N x K`` MFMA step: ``a`` and
    ``b`` regions of any row stride (LDS or global), ``c`` an accumulator fragment. The
    stage must compute ``te.sum(A[i, k].astype(acc) * B[k, j].astype(acc), axis=k)``.

    Raises
    ------
    ValueError
        For an unknown instruction.
    """
    ins = instruction(name)
    a = te.placeholder((ins.m, ins.k), name="a", dtype=ins.dtype)
    b = te.placeholder((ins.k, ins.n), name="b", dtype=ins.dtype)
    c = _matmul(a, b, ins.acc, "c")
    binds = {a: tir.decl_buffer(a.shape, ins.dtype, "a", strides=[te.var("lda"), 1]),
             b: tir.decl_buffer(b.shape, ins.dtype, "b", strides=[te.var("ldb"), 1]),
             c: tir.decl_buffer(c.shape, ins.acc, "c", scope=ins.scope)}

    def fcompute(inputs, outs):
        fa, fb = inputs
        fc = outs[0]
        update = tir.call_intrin("void", f"mfma.{ins.name}", fc.access_ptr("w"),
                                 fa.access_ptr("r"), fa.strides[0], fb.access_ptr("r"),
                                 fb.strides[0])
        reset = tir.call_intrin("void", "mfma.fill", fc.access_ptr("w"), te.const(0, ins.acc))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=f"mfma_{ins.name[7:]}",
                                 emulate=_emulator(ins))


def mfma_store(m: int = 32, n: int = 32, acc: str = "float32") -> te.TensorIntrin:
    """``out[i, j] = frag[i, j]`` of an ``m x n`` accumulator tile into a region of any
    row stride, each lane storing its elements."""
    scope = f"mfma.accumulator_{m}x{n}"
    f = te.placeholder((m, n), name="frag", dtype=acc)
    c = te.compute((m, n), lambda i, j: f[i, j], name="dst")
    binds = {f: tir.decl_buffer(f.shape, acc, "frag", scope=scope),
             c: tir.decl_buffer(c.shape, acc, "dst", strides=[te.var("ldm"), 1])}

    def fcompute(inputs, outs):
        return tir.call_intrin("void", f"mfma.store_{m}x{n}", outs[0].access_ptr("w"),
                               inputs[0].access_ptr("r"), outs[0].strides[0])

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=f"mfma_store_{m}x{n}_{acc}",
                                 emulate=_store_emulator(output_layout(m, n)))


# ------------------------------------------------------------------ the interpreter's model
def _scatter(tile: np.ndarray, lay: Layout) -> np.ndarray:
    """The ``[64, per_lane]`` registers of a wavefront holding ``tile`` (by ``lay``)."""
    rows, cols = lay.coords()
    return tile[rows, cols]


def _gather(regs: np.ndarray, lay: Layout, fill) -> np.ndarray:
    """The tile the registers hold; elements no lane holds stay ``fill``."""
    rows, cols = lay.coords()
    tile = np.full((lay.rows, lay.cols), fill, dtype=regs.dtype)
    tile[rows, cols] = regs
    return tile


def _values(view, dtype: str, wide) -> np.ndarray:
    """The numbers of an operand region (bfloat16 as bits or ``ml_dtypes``) in ``wide``."""
    if dtype == "bfloat16":
        from polytile.te import dtype as dt

        return dt.bfloat16_values(np.ascontiguousarray(view)).astype(wide)
    return np.asarray(view).astype(wide)


def _poison(dtype) -> object:
    return np.iinfo(dtype).min if np.dtype(dtype).kind in "iu" else np.nan


def _emulator(ins: MFMA, layouts: tuple | None = None) -> Callable:
    """The lane-level model of ``ins`` the reference interpreter runs: operands scattered
    to the 64 lanes' registers by their layouts, the instruction's arithmetic on the
    matrices the registers hold (products exact, sums in ``acc``), the result scattered
    by the accumulator's layout and read back as a tile. A layout that misses or doubles
    an element poisons the result (NaN, or the integer minimum)."""
    lay_a, lay_b, lay_c = layouts or (ins.a, ins.b, ins.c)
    acc = np.float32 if ins.acc == "float32" else np.int32

    def run(part: str, views: list) -> None:
        out = views[-1]
        if part == "reset":
            out[...] = 0
            return
        wide = np.float64 if acc is np.float32 else np.int64   # exact products
        ra = _scatter(_values(views[0], ins.dtype, wide), lay_a)
        rb = _scatter(_values(views[1], ins.dtype, wide), lay_b)
        rc = _scatter(np.asarray(out).astype(acc), lay_c)
        ma = _gather(ra, lay_a, _poison(wide))
        mb = _gather(rb, lay_b, _poison(wide))
        mc = _gather(rc, lay_c, _poison(acc))
        if part == "body":
            mc = np.zeros_like(mc)
        d = (ma @ mb).astype(acc) + mc
        rd = _scatter(d, lay_c)
        out[...] = _gather(rd, lay_c, _poison(acc)).astype(out.dtype)

    return run


def _store_emulator(lay: Layout) -> Callable:
    def run(part: str, views: list) -> None:
        src, out = views
        out[...] = _gather(_scatter(np.asarray(src), lay), lay, _poison(src.dtype))

    return run


# ------------------------------------------------------------------ C helpers
_LANE = "__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u))"

#: C element type of the MFMA operands, the register vector and its element count
_OPERAND = {"float16": ("_Float16", "_Float16"), "bfloat16": ("short", "short"),
            "int8": ("signed char", "signed char")}
_ACC = {"float32": "float", "int32": "int"}
_MEM = {"float16": "half", "bfloat16": "pt_bf16", "int8": "int8_t"}


def _acc_type(m: int, n: int, acc: str) -> str:
    return f"pt_mfma_{m}x{n}_{'f32' if acc == 'float32' else 'i32'}"


def _acc_struct(m: int, n: int, acc: str) -> str:
    t, k = _ACC[acc], m * n // WAVEFRONT
    name = _acc_type(m, n, acc)
    return (f"typedef {t} {name}_v __attribute__((ext_vector_type({k})));\n"
            f"struct {name} {{ {name}_v r; }};  // one {m}x{n} tile: {k} x {t} per lane")


def _mma_helper(ins: MFMA) -> tuple:
    fn = "pt_" + ins.name[2:]
    acc_t = _acc_type(ins.m, ins.n, ins.acc)
    elem, _ = _OPERAND[ins.dtype]
    e = ins.a.per_lane
    vec = f"{fn}_in"
    lines = [f"typedef {elem} {vec} __attribute__((ext_vector_type({e})));",
             f"__device__ __forceinline__ void {fn}({acc_t}& d, const {_MEM[ins.dtype]}* a, "
             f"int lda, const {_MEM[ins.dtype]}* b, int ldb) {{",
             f"  // {ins.name}: lane l holds A[{ins.a.c_index('l', 'r', 'lda')}] and "
             f"B[{ins.b.c_index('l', 'r', 'ldb')}], r < {e}",
             f"  const unsigned l = {_LANE};",
             f"  const {elem}* pa = reinterpret_cast<const {elem}*>(a);",
             f"  const {elem}* pb = reinterpret_cast<const {elem}*>(b);",
             f"  {vec} va, vb;",
             "#pragma unroll",
             f"  for (unsigned r = 0; r < {e}; ++r) {{",
             f"    va[r] = pa[{ins.a.c_index('l', 'r', 'lda')}];",
             f"    vb[r] = pb[{ins.b.c_index('l', 'r', 'ldb')}];",
             "  }"]
    if ins.dtype == "int8":   # the i8 builtins take the lane's bytes as one int or long
        word = "int" if e == 4 else "long"
        lines.append(f"  d.r = {ins.builtin}(__builtin_bit_cast({word}, va), "
                     f"__builtin_bit_cast({word}, vb), d.r, 0, 0, 0);")
    else:
        lines.append(f"  d.r = {ins.builtin}(va, vb, d.r, 0, 0, 0);")
    lines.append("}")
    return fn, "\n".join(lines), {f"_pt_{acc_t}": _acc_struct(ins.m, ins.n, ins.acc)}


def _store_helper(m: int, n: int) -> tuple:
    lay = output_layout(m, n)
    lines = []
    structs = {}
    for acc in ("float32", "int32"):
        t, acc_t = _ACC[acc], _acc_type(m, n, acc)
        structs[f"_pt_{acc_t}"] = _acc_struct(m, n, acc)
        lines += [f"__device__ __forceinline__ void pt_mfma_store_{m}x{n}({t}* dst, "
                  f"const {acc_t}& c, int ldm) {{",
                  f"  const unsigned l = {_LANE};",
                  "#pragma unroll",
                  f"  for (unsigned r = 0; r < {lay.per_lane}; ++r) "
                  f"dst[{lay.c_index('l', 'r', 'ldm')}] = c.r[r];",
                  "}"]
    return f"pt_mfma_store_{m}x{n}", "\n".join(lines), structs


def _fill_helper() -> tuple:
    lines, structs = [], {}
    for m, n in ((32, 32), (16, 16)):
        for acc in ("float32", "int32"):
            acc_t = _acc_type(m, n, acc)
            structs[f"_pt_{acc_t}"] = _acc_struct(m, n, acc)
            lines.append(f"__device__ __forceinline__ void pt_mfma_fill({acc_t}& c, "
                         f"{_ACC[acc]} v) {{ c.r = v; }}")
    return "pt_mfma_fill", "\n".join(lines), structs


def c_helper(name: str) -> tuple | None:
    """``(C function, definition, preludes)`` of MFMA call ``name`` (see
    :meth:`polytile.targets.c_dialect.CDialect.call_helper`), or None."""
    if not name.startswith("mfma."):
        return None
    what = name[5:]
    if what == "fill":
        return _fill_helper()
    if what.startswith("store_"):
        m, n = (int(x) for x in what[6:].split("x"))
        return _store_helper(m, n)
    if what in INSTRUCTIONS:
        return _mma_helper(INSTRUCTIONS[what])
    return None


def fragment_type(b, who: str) -> str:
    """The C type of one tile of accumulator fragment ``b``.

    Raises
    ------
    BuildError
        For a fragment scope or dtype MFMA has no accumulator of.
    """
    if not b.scope.startswith("mfma.accumulator_") or b.dtype not in _ACC:
        raise BuildError(format_error(
            who, f"fragment {b.name!r} of {b.dtype} in scope {b.scope!r}",
            "MFMA accumulators (scope mfma.accumulator_32x32 or mfma.accumulator_16x16) "
            "of float32 or int32", hint="tensorize with polytile.targets.hip.mfma"))
    m, n = (int(x) for x in b.scope.rsplit("_", 1)[1].split("x"))
    return _acc_type(m, n, b.dtype)


def used_instructions(source: str) -> tuple:
    """The MFMA instructions whose helpers ``source`` defines (for the per-``-mcpu``
    check)."""
    return tuple(n for n in INSTRUCTIONS if f"pt_{n[2:]}(" in source)


__all__ = ["INSTRUCTIONS", "Layout", "MFMA", "WAVEFRONT", "c_helper", "for_arch",
           "fragment_type", "input_layout", "instruction", "mfma_mma", "mfma_store",
           "output_layout", "used_instructions"]
