"""TMA copies of pipelined shared tiles (``Stage.pipeline(..., tma=True)``, sm_90).

What the loop IR means by them (the software pipeline builds them,
:mod:`.software_pipeline`; the reference interpreter runs exactly this):

* ``tma.init(&bar[0], S, n)``: ``S`` mbarriers of ``n`` arrivals each (one per copy
  into a slot), issued by the block's first thread; a barrier of the block follows.
* ``tma.load_2d(&dst[o], &src[0], c1, c0, R, C, &bar[s], M, N)``: the block's first thread
  (every thread calls it; the others do nothing) arrives on ``bar[s]`` and copies the box
  ``src[c0 .. c0 + R, c1 .. c1 + C]`` of the row-major ``src[M, N]`` into the ``R x C``
  elements of ``dst`` from flat offset ``o`` (in ``dst``'s swizzle, the hardware's);
  elements outside ``src`` read as zero. The source is read when the call runs, the
  destination written when a wait completes the phase of ``bar[s]``.
* ``tma.wait(&bar[s], p)``: the calling thread waits until the phase of parity ``p`` of
  ``bar[s]`` has completed: every arrival of it made, its copies landed.

The box of a tile is read off its copy (:func:`tma_boxes`): a ``cache_read`` stage
``S[r, c] = A[r + o0, c + o1]`` whose buffer is the tile; the origin ``(o0, o1)`` is the
source index minus the destination index of the copy's store, the same for every element
(checked at random points), and ``(R, C)`` the buffer's shape. TMA needs (CUDA driver API,
``cuTensorMapEncodeTiled``; PTX ISA, "Tensor copy" restrictions): 2-D sources of constant
shape, rows of a multiple of 16 bytes in global memory and in the box, box sides of at
most 256 elements, a destination aligned to 128 bytes (the 8-row period of a swizzle,
1024 bytes for 128B), and a
swizzled destination whose rows are exactly the mode's width (so that the hardware's
swizzle is the buffer's, :func:`polytile.targets.cuda.wgmma.swizzle_elements`).
Anything else is refused with a ``ScheduleError`` naming the pipeline, the stage and
what does not fit.

A copy under a condition (the partial tiles of sizes the tile does not divide, threads
past the tile) is one box all the same: TMA writes every element of the slot, those the
copy writes with the same values (the origin relation holds for every element of the
box), the others with the operand's values or, outside it, zeros. That is right because
the slot holds nothing else: the copy rewrites its tile each iteration, and an element it
leaves unwritten holds a stale value of an earlier tile, which the compute of a correct
schedule already does not depend on (its reads of a partial tile are guarded the same
way).
"""

from __future__ import annotations

import dataclasses
import random

from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cast, Const, Expr, Var
from polytile.te.visitor import collect, substitute

from ..loop_ir import (AccessPtr, Buffer, Evaluate, ExternCall, For, IfThenElse, Load, Stmt,
                       Store, expr_str, walk_stmts)
from .pipeline_slots import refuse

TMA_INIT, TMA_LOAD, TMA_WAIT = "tma.init", "tma.load_2d", "tma.wait"
#: byte width of a shared row of each swizzle mode (the modes of ``Stage.swizzle``)
_SWIZZLE_BYTES = {"128B": 128, "64B": 64, "32B": 32}
MAX_BOX = 256


@dataclasses.dataclass(frozen=True)
class TmaBox:
    """The TMA copy of one box of a shared tile: ``dst[*lead, r, c] = src[origin[0] + r,
    origin[1] + c]`` over the last two dimensions of ``dst`` (the unslotted shared
    buffer)."""

    dst: Buffer
    src: Buffer
    origin: tuple
    #: the index of the box in the leading dimensions of ``dst`` (``dst[*lead, R, C]``)
    lead: tuple = ()


def _inner_vars(s: Stmt) -> list:
    """The copy's own variables: its loops' and the thread indices it reads."""
    out = {}
    for x in walk_stmts(s):
        if isinstance(x, For):
            out[id(x.var)] = x.var
        if isinstance(x, (Store, IfThenElse)):
            for e in ((*x.indices, x.value) if isinstance(x, Store) else (x.cond,)):
                for v in collect(e, Var):
                    if v.name.startswith("threadIdx."):
                        out[id(v)] = v
    return list(out.values())


def _eval(e: Expr, env: dict) -> int:
    from ..interpreter import _Interp

    it = _Interp()
    it.env = env
    return int(it.expr(e))


def tma_boxes(copies: list, p) -> list:
    """The :class:`TmaBox` es of the shared buffers the statements ``copies`` (the copies
    of one iteration of the pipelined loop, pragma ``p``) write, in order of first store:
    one per 2-D box (the last two dimensions of a tile, :func:`_boxes_of`).

    Raises
    ------
    ScheduleError
        (primitive ``pipeline``) where a copy is not a TMA box (module docstring).
    """
    stores: dict = {}
    for c in copies:
        for x in walk_stmts(c):
            if isinstance(x, Store):
                stores.setdefault(id(x.buffer), []).append((x, c))
    boxes = []
    for group in stores.values():
        st0, c0 = group[0]
        dst = st0.buffer
        who = f"the copy into {dst.name!r} (stage {dst.name!r})"
        v = st0.value
        if not (isinstance(v, Load) and v.dtype == dst.dtype == v.buffer.dtype):
            refuse(p, f"{who} stores {expr_str(v)}, not an element of a global buffer of the same "
                   "type", "tma=True: cache_read copies of a global operand")
        src = v.buffer
        if src.scope in ("shared", "local") or len(src.shape) != 2 or len(dst.shape) < 2:
            refuse(p, f"{who} reads {src.name!r} of {len(src.shape)} dimensions in scope "
                   f"{src.scope!r} into a tile of {len(dst.shape)}", "tma=True: tiles of "
                   "2-D boxes (their last two dimensions) of 2-D global operands")
        if not all(isinstance(d, int) for d in (*src.shape, *dst.shape)):
            refuse(p, f"{who} reads {src.name!r} of shape {list(src.shape)}",
                   "tma=True: operands and tiles of constant shapes (the tensor map is "
                   "built for them)")
        rows, cols = dst.shape[-2:]
        nb = dt.nbytes(dst.dtype)
        sw = dst.swizzle
        if rows > MAX_BOX or cols > MAX_BOX:
            refuse(p, f"{who} is a box of {rows} x {cols} elements", f"tma=True: box "
                   f"sides of at most {MAX_BOX} elements", hint="a smaller tile")
        if (cols * nb) % 16 or (src.shape[1] * nb) % 16:
            refuse(p, f"{who} has rows of {cols * nb} bytes in a tile of {src.name!r}, "
                   f"whose rows are {src.shape[1] * nb} bytes", "tma=True: rows of a "
                   "multiple of 16 bytes in the tile and in the operand (TMA strides and "
                   "boxes)")
        if sw != "none" and cols * nb != _SWIZZLE_BYTES.get(sw):
            refuse(p, f"{who} is swizzled {sw} with rows of {cols * nb} bytes",
                   f"tma=True: rows of exactly {_SWIZZLE_BYTES.get(sw)} bytes (the TMA "
                   "swizzle of the mode is then the buffer's)")
        period = 8 * _SWIZZLE_BYTES[sw] if sw != "none" else 128
        if (rows * cols * nb) % period:
            refuse(p, f"{who} is a tile of {rows * cols * nb} bytes", f"tma=True: a "
                   f"multiple of {period} bytes, so that every slot starts aligned as TMA "
                   "needs (128 bytes; the 8-row pattern of a swizzle)")
        boxes += _boxes_of(p, who, group, dst, src)
    return boxes


def _boxes_of(p, who: str, group: list, dst: Buffer, src: Buffer) -> list:
    """The boxes of one tile ``dst[*L, R, C]`` (``group``: its stores and their copy
    statements): one per index ``l`` of the leading dimensions, ``dst[l, r, c] = src[o0 +
    g0 . l + r, o1 + g1 . l + c]``, the origin ``o`` the source index minus the destination
    index where the copy's own variables are 0, the steps ``g`` solved from random points of
    every store and checked at them."""
    import itertools

    import numpy as np

    st0, c0 = group[0]
    lead_shape = dst.shape[:-2]
    zero = {v: Const(v.dtype, 0) for v in _inner_vars(c0)}
    d0 = [substitute(i, zero) for i in st0.indices]
    if any(collect(i, Var) for i in d0):
        refuse(p, f"{who} stores at {[expr_str(i) for i in st0.indices]}, which depend on "
               "loops outside the copy", "tma=True: tiles indexed by the copy's own loops")
    d0 = [_eval(i, {}) for i in d0]
    s0 = [_i64(substitute(i, zero)) for i in st0.value.indices]
    base = [Binary("int64", "sub", s0[i], Const("int64", d0[len(lead_shape) + i]))
            for i in range(2)]
    rng = random.Random(0)
    rows, deltas = [], []
    for st, _ in group:
        if not (isinstance(st.value, Load) and st.value.buffer is src):
            refuse(p, f"{who} reads several buffers", "tma=True: one source per tile")
        vars_ = {id(x): x for e in (*st.indices, *st.value.indices, *base)
                 for x in collect(e, Var)}
        for _ in range(6):
            env = {x: _np_int(rng.randrange(0, 97)) for x in vars_.values()}
            d = [_eval(i, env) for i in st.indices]
            rows.append([x - y for x, y in zip(d[:-2], d0[:-2])])
            deltas.append([_eval(st.value.indices[i], env) - d[len(lead_shape) + i]
                           - _eval(base[i], env) for i in range(2)])
    if lead_shape:
        g = np.linalg.lstsq(np.array(rows, float), np.array(deltas, float), rcond=None)[0]
        g = np.rint(g).astype(np.int64)          # [len(lead), 2]
    else:
        g = np.zeros((0, 2), np.int64)
    for r, dl in zip(rows, deltas):
        if [int(np.dot(r, g[:, i])) for i in range(2)] != dl:
            refuse(p, f"{who} stores {src.name}[...] at an offset from its source that "
                   "changes across a box", "tma=True: tiles whose last two dimensions are "
                   "boxes of their operand")
    out = []
    for lead in itertools.product(*(range(n) for n in lead_shape)):
        shift = [int(np.dot(np.array(lead) - np.array(d0[:-2]), g[:, i])) if lead_shape
                 else 0 for i in range(2)]
        origin = tuple(Binary("int64", "add", base[i], Const("int64", shift[i]))
                       if shift[i] else base[i] for i in range(2))
        out.append(TmaBox(dst, src, origin, tuple(lead)))
    return out


def _np_int(v: int):
    import numpy as np

    return np.int64(v)


def _i64(e: Expr) -> Expr:
    return e if e.dtype == "int64" else Cast("int64", e)


def _i32(e: Expr) -> Expr:
    return e if e.dtype == "int32" else Cast("int32", e)


def tma_init(bar: Buffer, stages: int, arrivals: int) -> Stmt:
    """``tma.init``: ``stages`` mbarriers of ``arrivals`` arrivals."""
    return Evaluate(ExternCall("void", TMA_INIT, (
        AccessPtr("handle", bar, Const("int64", 0), "rw"), Const("int32", stages),
        Const("int32", arrivals)), "intrin"))


def tma_load(box: TmaBox, dst: Buffer, slot: Expr, bar: Buffer, subst: dict) -> Stmt:
    """``tma.load_2d`` of ``box`` (its origin with ``subst`` applied) into slot ``slot``
    of ``dst`` (the slotted buffer), completing on ``bar[slot]``."""
    rows, cols = box.dst.shape[-2:]
    o0, o1 = (substitute(o, subst) for o in box.origin)
    flat = 0
    for i, n in zip(box.lead, box.dst.shape[:-2]):
        flat = flat * n + i
    off = Binary("int64", "add", Binary("int64", "mul", _i64(slot),
                                        Const("int64", box.dst.size)),
                 Const("int64", flat * rows * cols))
    return Evaluate(ExternCall("void", TMA_LOAD, (
        AccessPtr("handle", dst, off, "w"), AccessPtr("handle", box.src, Const("int64", 0), "r"),
        _i32(o1), _i32(o0), Const("int32", rows), Const("int32", cols),
        AccessPtr("handle", bar, _i64(slot), "rw"), Const("int32", box.src.shape[0]),
        Const("int32", box.src.shape[1])), "intrin"))


def tma_wait(bar: Buffer, slot: Expr, parity: Expr) -> Stmt:
    """``tma.wait``: the phase of parity ``parity`` of ``bar[slot]`` has completed."""
    return Evaluate(ExternCall("void", TMA_WAIT, (
        AccessPtr("handle", bar, _i64(slot), "rw"), _i32(parity)), "intrin"))


def mbarrier_buffer(name: str, stages: int) -> Buffer:
    """The shared array of one mbarrier (8 bytes) per slot."""
    return Buffer(f"{name}.mbar", (stages,), "uint64", "shared")


__all__ = ["TMA_INIT", "TMA_LOAD", "TMA_WAIT", "TmaBox", "mbarrier_buffer", "tma_boxes",
           "tma_init", "tma_load", "tma_wait"]
