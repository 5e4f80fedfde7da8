"""Vector copies in C dialects: a vectorized loop that copies contiguous, aligned elements
becomes one ``float4``/``int4`` (or 2-wide; ``uint4``/``uint2`` for 8 or 4 16-bit
elements, ``uint4``/``uint2`` for 16 or 8 8-bit ones) load and store (128-bit memory
instructions on
NVIDIA GPUs: CUDA C Programming Guide, "Device Memory Accesses").
"""

from __future__ import annotations

from polytile.schedule.kinds import LoopKind
from polytile.schedule.passes.async_copy import contiguous_aligned, copy_parts
from polytile.schedule.loop_ir import For, Load, Store
from polytile.te.expr import Const, Expr

#: (element dtype, lanes) -> C vector type
VECTOR_TYPES = {("float32", 4): "float4", ("float32", 2): "float2",
                ("int32", 4): "int4", ("int32", 2): "int2",
                # 16-bit elements are copied as bits (the shared staging of tensor cores)
                ("float16", 8): "uint4", ("float16", 4): "uint2",
                ("bfloat16", 8): "uint4", ("bfloat16", 4): "uint2",
                # and 8-bit ones (int8 tensor-core staging)
                ("int8", 16): "uint4", ("int8", 8): "uint2",
                ("uint8", 16): "uint4", ("uint8", 8): "uint2"}


def vector_copy(s: For) -> tuple[str, Store, Load, Expr | None, Expr | None] | None:
    """``(vector type, store, load, guard, fill)`` when loop ``s`` is a vectorized copy
    ``dst[base + v] = src[base' + v]`` of 2, 4 (or 8 16-bit) elements with both bases provably
    multiples of the width (buffers are at least 16-byte aligned), possibly under a guard
    that does not depend on the lane, or a zero-filled one (``select(fill, src, 0)``,
    ``fill`` the same for every lane; None for a plain copy); else ``None``."""
    if s.kind != LoopKind.VECTORIZED or not isinstance(s.extent, Const) or s.step != 1:
        return None
    if not (isinstance(s.min, Const) and s.min.value == 0):
        return None
    parts = copy_parts(s)
    if parts is None:
        return None
    st, guard, ld, fill = parts
    vt = VECTOR_TYPES.get((st.buffer.dtype, int(s.extent.value)))
    if vt is None or ld.buffer.dtype != st.buffer.dtype or len(st.indices) != 1:
        return None
    lanes = int(s.extent.value)
    if not (contiguous_aligned(st.indices[0], s.var, lanes)
            and contiguous_aligned(ld.indices[0], s.var, lanes)):
        return None
    return vt, st, ld, guard, fill
