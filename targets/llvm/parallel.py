"""Parallel loops: outlining into a libgomp ``GOMP_parallel`` region.

A ``For`` of kind ``parallel`` (not nested in another one) becomes::

    closure = {i32 status, i64 min, i64 extent, captured...}     ; alloca in the caller
    GOMP_parallel(@f.par<k>, &closure, 0 /* default threads */, 0)
    if (closure.status != 0) fail(closure.status)

    void @f.par<k>(i8* closure)                 ; run by every thread of the team
        st = @f.par<k>.body<k+1>(min, extent, captured...)
        if (st != 0) atomic store st to closure.status

    internal noinline i32 @f.par<k>.body(i64 min, i64 extent, noalias ptrs...)
        n = ceil(extent / step); chunk = ceil(n / omp_get_num_threads())
        for j in [tid * chunk, min((tid + 1) * chunk, n)): var = min + j * step; body

Captured values are the free variables and buffers of the loop (enclosing loop and let
variables, scalar parameters, buffer pointers). Passing buffer pointers as ``noalias``
arguments of the body function keeps the no-alias facts of the caller, so loads can still
be hoisted and vectorized. The body is kept out of line (``noinline``): inlined into the
thread function, its pointers become loads from the closure, which escapes to
``GOMP_parallel``, and LLVM no longer keeps a register-blocked accumulator in registers
across its reduction loop (LICM will not sink the stores of memory other threads may see;
a 12 x 32 matmul micro-kernel ran 10x slower for it), while a ``noalias`` argument that the
body does not capture is private enough. Allocations inside the body live in the body function (thread-private);
their failure sets the shared status, which the caller turns into its own failure (one
static chunk per thread, as OpenMP's ``schedule(static)``). Parallel loops nested inside
the body run serially.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from polytile.schedule.loop_ir import Buffer, For

from . import intrinsics as llx
from .analysis import used_symbols
from .intrinsics import I8P, I32, I64

if TYPE_CHECKING:
    from .codegen import CodeGen  # a type hint only: codegen.py imports this module


def _captured(cg: CodeGen, s: For) -> list:
    env = cg.st.env
    return [x for x in used_symbols(s) if x is not s.var and x in env]


def emit_parallel(cg: CodeGen, s: For) -> None:
    """Emit the parallel loop ``s`` at the current position of ``cg`` (see module doc)."""
    b = cg.b
    caps = _captured(cg, s)
    cap_vals = [cg.st.env[x] for x in caps]
    lo, ext = cg.index(s.min), cg.index(s.extent)

    # the body function: i32 (i64 min, i64 extent, captured...)
    body_fn = _emit_body(cg, s, caps, [v.type for v in cap_vals])

    # the thread function: void (i8* closure)
    clo_ty = ir.LiteralStructType([I32, I64, I64] + [v.type for v in cap_vals])
    thread_fn = cg.new_function("par", llx.VOID, [I8P])
    tb = ir.IRBuilder(thread_fn.append_basic_block("entry"))
    clo = tb.bitcast(thread_fn.args[0], clo_ty.as_pointer())
    fields = [tb.load(tb.gep(clo, [I32(0), I32(k)], inbounds=True))
              for k in range(1, len(clo_ty.elements))]
    st = tb.call(body_fn, fields)
    with tb.if_then(tb.icmp_signed("!=", st, I32(0)), likely=False):
        tb.store_atomic(st, tb.gep(clo, [I32(0), I32(0)], inbounds=True), "monotonic", 4)
    tb.ret_void()

    # the caller
    slot = cg.alloca(clo_ty, 1, f"{s.var.name}.closure")
    for k, v in enumerate([I32(0), lo, ext] + cap_vals):
        b.store(v, b.gep(slot, [I32(0), I32(k)], inbounds=True))
    fnptr_ty = ir.FunctionType(llx.VOID, [I8P]).as_pointer()
    gomp = llx.declare(cg.module, "GOMP_parallel", llx.VOID, [fnptr_ty, I8P, I32, I32])
    cg.fence_streams()  # the threads may read what this one streamed
    b.call(gomp, [thread_fn, b.bitcast(slot, I8P), I32(0), I32(0)])
    status = b.load_atomic(b.gep(slot, [I32(0), I32(0)], inbounds=True), "monotonic", 4)
    with b.if_then(b.icmp_signed("!=", status, I32(0)), likely=False):
        cg.fail(status)


def _emit_body(cg: CodeGen, s: For, caps: list, cap_types: list) -> ir.Function:
    fn = cg.new_function("par_body", I32, [I64, I64] + cap_types)
    fn.attributes.add("noinline")
    env = {}
    for x, a in zip(caps, fn.args[2:]):
        a.name = x.name
        if isinstance(x, Buffer):
            a.add_attribute("noalias")
        env[x] = a
    saved = cg.st
    cg.st = type(cg.st)(fn, env, in_parallel=True)
    try:
        b = cg.b
        lo, ext = fn.args[0], fn.args[1]
        omp = cg.module
        tid = b.call(llx.declare(omp, "omp_get_thread_num", I32, []), [])
        nth = b.call(llx.declare(omp, "omp_get_num_threads", I32, []), [])
        tid, nth = b.sext(tid, I64), b.sext(nth, I64)
        step = I64(s.step)
        pos = b.icmp_signed(">", ext, I64(0))
        n = b.select(pos, b.sdiv(b.add(ext, I64(s.step - 1)), step), I64(0))
        chunk = b.sdiv(b.add(n, b.sub(nth, I64(1))), nth)
        begin = b.mul(tid, chunk)
        end = llx.call_intrinsic(b, "smin", [b.add(begin, chunk), n])

        def body(j):
            var = b.add(lo, b.mul(j, step)) if s.step != 1 else b.add(lo, j)
            cg.let(s.var, var, lambda: cg.stmt(s.body))

        cg.loop(begin, end, 1, f"{s.var.name}.par", body)
        cg.fence_streams()  # before the team's barrier: the caller reads the results
        cg.b.ret(I32(llx.STATUS_OK))
        cg.st.finish()
    finally:
        cg.st = saved
    return fn
