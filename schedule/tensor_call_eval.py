"""The reference semantics of a tensor intrinsic call, for the loop-IR interpreter.

A :class:`~polytile.schedule.loop_ir.TensorCall` (one tile of a tensorized stage, see
:mod:`polytile.schedule.tensorize`) runs, in the reference interpreter, the intrinsic's
*compute definition* evaluated with numpy on its operand regions (:func:`eval_tensor_call`),
never its code: so the interpreter checks that the matched tiles, offsets and strides
compute the definition whatever the intrinsic's code does. Sums accumulate in the
definition's accumulation dtype, rounded once per call. Regions of swizzled shared buffers
(``Stage.swizzle``) are read where the swizzle put their elements
(:func:`region_offsets`), as a tensor core reads them through its descriptor.
"""

from __future__ import annotations

import numpy as np

from polytile.errors import LoweringError
from polytile.te import dtype as dt
from polytile.te.expr import (And, Binary, Call, Cast, Cmp, Const, Expr, Not, Or, Reduce,
                              Select, TensorRead, Var)
from polytile.te.reduction import accumulation_dtype
from polytile.te.tensor_intrin import EXTERN_KEY

from .loop_ir import Buffer, TensorCall
from .tensorize import row_major


def _offset(buf: Buffer, idx: tuple) -> int:
    """The flat element offset of start index ``idx`` (one per dimension of ``buf``, or
    one flat offset)."""
    if len(idx) == 1 and len(buf.shape) != 1:
        return int(idx[0])
    return sum(int(i) * s for i, s in zip(idx, row_major(buf.shape)))


def _region(arr: np.ndarray, buf: Buffer, idx: tuple, shape: tuple, strides: tuple):
    flat = arr.reshape(-1)
    off = _offset(buf, idx)
    span = sum((e - 1) * s for e, s in zip(shape, strides)) + 1 if shape else 1
    if off < 0 or off + span > flat.size:
        raise IndexError(f"tensorize: region of {buf.name} at offset {off} (span {span}) is "
                         f"outside its {flat.size} elements")
    item = flat.itemsize
    if buf.swizzle != "none":
        return _swizzled_region(flat, buf, off, shape, strides)
    return np.lib.stride_tricks.as_strided(flat[off:], shape=shape,
                                           strides=tuple(s * item for s in strides))


def _logical_offsets(off: int, shape: tuple, strides: tuple) -> np.ndarray:
    logical = np.full(shape, off, dtype=np.int64)
    for k, (e, st) in enumerate(zip(shape, strides)):
        axis = [1] * len(shape)
        axis[k] = e
        logical = logical + (np.arange(e, dtype=np.int64) * st).reshape(axis)
    return logical


def region_offsets(buf: Buffer, idx: tuple, shape: tuple, strides: tuple) -> list:
    """The flat positions (swizzled where ``buf`` is) of the elements of the region of
    ``buf`` at start index ``idx`` (one per dimension, or one flat offset)."""
    from polytile.targets.cuda.wgmma import swizzle_elements

    out = _logical_offsets(_offset(buf, idx), shape, strides)
    if buf.swizzle != "none":
        out = swizzle_elements(out, buf.swizzle, dt.nbytes(buf.dtype))
    return [int(x) for x in out.reshape(-1)]


def _swizzled_region(flat: np.ndarray, buf: Buffer, off: int, shape: tuple, strides: tuple):
    """A read-only copy of the region of swizzled ``buf`` at logical offset ``off``: what a
    tensor core reads through a descriptor of the buffer's swizzle mode, whose start
    address must lie on a row that begins the swizzle pattern (base offset 0)."""
    from polytile.targets.cuda.wgmma import SWIZZLE_ROW_BYTES, swizzle_elements

    nbytes = dt.nbytes(buf.dtype)
    period = 8 * SWIZZLE_ROW_BYTES[buf.swizzle]
    if (off * nbytes) % period >= SWIZZLE_ROW_BYTES[buf.swizzle]:
        row = (off * nbytes) % period // SWIZZLE_ROW_BYTES[buf.swizzle]
        raise LoweringError(f"tensorize: a region of {buf.name} (swizzle {buf.swizzle}) "
                            f"starts at element {off}, on row {row} of its 8-row swizzle "
                            "pattern; expected a region starting on the pattern's first "
                            "row (descriptor base offset 0)")
    out = flat[swizzle_elements(_logical_offsets(off, shape, strides), buf.swizzle, nbytes)]
    out.flags.writeable = False
    return out


def eval_tensor_call(s: TensorCall, arrays: list, indices: list) -> None:
    """Run ``s`` on numpy ``arrays`` (one per operand buffer) with evaluated start
    ``indices``: the intrinsic's compute definition, not its code."""
    if s.intrin.op.attrs.get(EXTERN_KEY) is s.intrin:
        raise LoweringError(f"interpreter: stage {s.intrin.name!r} is a te.extern, whose "
                            "external code the reference interpreter cannot run")
    if s.buffers[-1].swizzle != "none":
        raise LoweringError(f"interpreter: intrinsic {s.intrin.name!r} writes the swizzled "
                            f"buffer {s.buffers[-1].name!r}; swizzled buffers are operands")
    views = [_region(a, b, i, shape, st) for a, b, i, shape, st in
             zip(arrays, s.buffers, indices, s.shapes, s.strides)]
    intrin = s.intrin
    if intrin.emulate is not None:   # a model of the hardware instruction (MFMA lanes)
        intrin.emulate(s.part, views)
        return
    out = views[-1]
    body = intrin.op.body[0]
    odt = dt.to_numpy(intrin.output.dtype)
    if s.part == "reset":
        out[...] = _eval(body.combiner.identity, {}, {}, ())
        return
    ins = {id(t): v for t, v in zip(intrin.inputs, views[:-1])}
    axes = list(intrin.op.axis)
    red = list(intrin.op.reduce_axis)
    n = len(axes) + len(red)
    env = {}
    for k, a in enumerate(axes + red):
        shape = [1] * n
        shape[k] = a.dom.extent
        env[a.var] = (np.arange(a.dom.extent, dtype=np.int64) + a.dom.min).reshape(shape)
    full = tuple(a.dom.extent for a in axes + red)
    if isinstance(body, Reduce):
        src = np.broadcast_to(_eval(body.source, env, ins, full), full)
        ax = tuple(range(len(axes), n))
        name = body.combiner.name
        if name == "sum":
            # in the accumulation dtype (float16 sums in float32), rounded once per call
            v = src.sum(axis=ax, dtype=dt.to_numpy(accumulation_dtype(body)))
        elif name == "max":
            v = src.max(axis=ax) if src.size else src.sum(axis=ax)
        elif name == "min":
            v = src.min(axis=ax) if src.size else src.sum(axis=ax)
        else:
            raise LoweringError(f"tensorize: the interpreter runs sum/max/min intrinsics, not "
                                f"{name!r}")
        if s.part == "update":
            a = out.astype(v.dtype)
            v = {"sum": a + v, "max": np.maximum(a, v), "min": np.minimum(a, v)}[name]
        out[...] = v.astype(odt)
    else:
        out[...] = np.broadcast_to(_eval(body, env, ins, full), full).astype(odt)


_NP_BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "min": np.minimum, "max": np.maximum}


def _eval(e: Expr, env: dict, ins: dict, full: tuple):
    t = type(e)
    npd = dt.to_numpy(e.dtype) if e.dtype != "bool" else np.bool_
    if t is Const:
        return np.array(e.value, dtype=npd)
    if t is Var:
        return env[e]
    if t is TensorRead:
        arr = ins[id(e.tensor)]
        idx = tuple(np.asarray(_eval(i, env, ins, full), dtype=np.int64) for i in e.indices)
        return arr[idx] if idx else arr[()]
    if t is Cast:
        return np.asarray(_eval(e.value, env, ins, full)).astype(npd)
    if t is Binary:
        a, b = _eval(e.a, env, ins, full), _eval(e.b, env, ins, full)
        if e.op in _NP_BIN:
            with np.errstate(all="ignore"):
                return np.asarray(_NP_BIN[e.op](a, b)).astype(npd)
        if e.op == "floordiv":
            return np.floor_divide(a, b).astype(npd)
        if e.op == "floormod":
            return np.mod(a, b).astype(npd)
    if t is Select:
        return np.where(_eval(e.cond, env, ins, full), _eval(e.true_value, env, ins, full),
                        _eval(e.false_value, env, ins, full)).astype(npd)
    if t is Cmp:
        a, b = _eval(e.a, env, ins, full), _eval(e.b, env, ins, full)
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[e.op](a, b)
    if t in (And, Or):
        f = np.logical_and if t is And else np.logical_or
        return f(_eval(e.a, env, ins, full), _eval(e.b, env, ins, full))
    if t is Not:
        return np.logical_not(_eval(e.a, env, ins, full))
    if t is Call:
        from .interpreter import _MATH
        with np.errstate(all="ignore"):
            return np.asarray(np.vectorize(_MATH[e.name])(
                *[_eval(a, env, ins, full) for a in e.args])).astype(npd)
    raise LoweringError(f"tensorize: the interpreter cannot run {type(e).__name__} in an "
                        "intrinsic's compute")
