"""Vector copies in C dialects: a vectorized loop that copies contiguous, aligned elements
becomes one ``float4``/``int4`` (or 2-wide; ``uint4``/``uint2`` for 8 or 4 16-bit
elements) load and store (128-bit memory instructions on
NVIDIA GPUs: CUDA C Programming Guide, "Device Memory Accesses").
"""

from __future__ import annotations

from polytile.schedule.kinds import LoopKind
from polytile.schedule.loop_ir import For, IfThenElse, Load, Store
from polytile.te import dtype as dt
from polytile.te.expr import Binary, Cast, Const, Expr, Var
from polytile.te.visitor import free_vars

#: (element dtype, lanes) -> C vector type
VECTOR_TYPES = {("float32", 4): "float4", ("float32", 2): "float2",
                ("int32", 4): "int4", ("int32", 2): "int2",
                # 16-bit elements are copied as bits (the shared staging of tensor cores)
                ("float16", 8): "uint4", ("float16", 4): "uint2",
                ("bfloat16", 8): "uint4", ("bfloat16", 4): "uint2"}


def _linear(e: Expr) -> tuple[dict, int] | None:
    """``({term: coefficient}, constant)``: ``e`` as an integer sum of multiples of terms;
    a term is a variable or any other sub-expression (kept whole)."""
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return {}, int(e.value)
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, Cast) and dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
        return _linear(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for v, k in b[0].items():
            terms[v] = terms.get(v, 0) + sign * k
        return terms, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        for c, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, Const) and dt.is_int(c.dtype):
                lo = _linear(other)
                if lo is None:
                    return None
                return {v: k * c.value for v, k in lo[0].items()}, lo[1] * c.value
    return {e: 1}, 0


def _contiguous_aligned(index: Expr, var: Var, lanes: int) -> bool:
    lin = _linear(index)
    if lin is None:
        return False
    terms, const = lin
    if terms.get(var, 0) != 1:
        return False
    for t, k in terms.items():
        if t is var:
            continue
        if k % lanes or (not isinstance(t, Var) and any(x is var for x in free_vars(t))):
            return False
    return const % lanes == 0


def vector_copy(s: For) -> tuple[str, Store, Load, Expr | None] | None:
    """``(vector type, store, load, guard)`` when loop ``s`` is a vectorized copy
    ``dst[base + v] = src[base' + v]`` of 2, 4 (or 8 16-bit) elements with both bases provably
    multiples of the width (buffers are at least 16-byte aligned), possibly under a guard
    that does not depend on the lane; else ``None``."""
    if s.kind != LoopKind.VECTORIZED or not isinstance(s.extent, Const) or s.step != 1:
        return None
    if not (isinstance(s.min, Const) and s.min.value == 0):
        return None
    st, guard = s.body, None
    if isinstance(st, IfThenElse) and st.else_case is None and not any(
            x is s.var for x in free_vars(st.cond)):
        st, guard = st.then_case, st.cond
    if not isinstance(st, Store) or not isinstance(st.value, Load):
        return None
    ld = st.value
    vt = VECTOR_TYPES.get((st.buffer.dtype, int(s.extent.value)))
    if vt is None or ld.buffer.dtype != st.buffer.dtype or len(st.indices) != 1:
        return None
    lanes = int(s.extent.value)
    if not (_contiguous_aligned(st.indices[0], s.var, lanes)
            and _contiguous_aligned(ld.indices[0], s.var, lanes)):
        return None
    return vt, st, ld, guard
