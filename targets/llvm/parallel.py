"""Parallel loops: outlining into a libgomp ``GOMP_parallel`` region.

A ``For`` of kind ``parallel`` (not nested in another one) becomes::

    closure = {i32 status, i64 min, i64 extent, i64 next, captured...}  ; alloca in the caller
    GOMP_parallel(@f.par<k>, &closure, 0 /* default threads */, 0)
    if (closure.status != 0) fail(closure.status)

    void @f.par<k>(i8* closure)                 ; run by every thread of the team
        st = @f.par<k>.body<k+1>(min, extent, &closure.next, captured...)
        if (st != 0) atomic store st to closure.status

    internal noinline i32 @f.par<k>.body(i64 min, i64 extent, i64* next, noalias ptrs...)
        n = ceil(extent / step); chunk = ceil(n / (CHUNKS_PER_THREAD * omp_get_num_threads()))
        while ((j0 = atomic fetch_add(next, chunk)) < n):
            for j in [j0, min(j0 + chunk, n)): var = min + j * step; body

Chunks are taken from a shared counter (OpenMP's ``schedule(dynamic, chunk)``), a few per
thread, rather than one static chunk per thread: on cores shared with other processes a
thread that is descheduled for a time slice leaves its chunks to the others, where a static
split makes the whole loop wait for it (on the shared 2-core test machine, ResNet-50's
convolutions at 2 threads ran no faster than at 1 with static chunks, although the split
gave both threads equal work: per-thread CPU time 19 / 18 ticks). The counter's atomic
add is ``monotonic``: chunks need distinct indices only, the team's barrier at the end of
``GOMP_parallel`` publishes what the bodies wrote.

No chunking makes a loop scale where the process does not get the cores: Linux shares the
CPUs between sessions (autogroups) before threads, so while another session keeps a thread
busy, a process's threads get one CPU's time in all. Both threads then wait in the run
queue as long as they run (``/proc/self/task/*/schedstat``), and every 2-thread kernel
takes its 1-thread time: on the shared 2-core Zen 4 VM at load 3, conv2d 56x56x64 nchwc
2.37 / 2.47 ms at 1 / 2 threads, torch's conv2d 2.21 / 2.32, polytile's 512^3 matmul
2.56 / 2.62, all threads' CPU time equal to the wall time at 2 threads. Samples during
which no thread waited (``benchmarks/cpu_ops.py --undisturbed``) show the loops scaling:
ResNet-50 conv2d nchwc 28x28x128 2.42 -> 1.44 ms, 14x14x256 2.53 -> 1.64, 1x1 256->64
1.46 -> 1.01 (torch 1.85, 1.86, 1.31 at 2 threads in the same samples).

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
body function per thread, whatever chunks it takes). Parallel loops nested inside the body
run serially.
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


#: chunks per thread of a parallel loop's iterations (see the module doc): more balance
#: the threads better when one is descheduled, at one atomic add per chunk
CHUNKS_PER_THREAD = 4


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
    clo_ty = ir.LiteralStructType([I32, I64, I64, I64] + [v.type for v in cap_vals])
    thread_fn = cg.new_function("par", llx.VOID, [I8P])
    tb = ir.IRBuilder(thread_fn.append_basic_block("entry"))
    clo = tb.bitcast(thread_fn.args[0], clo_ty.as_pointer())
    fields = [tb.load(tb.gep(clo, [I32(0), I32(k)], inbounds=True)) for k in (1, 2)]
    fields.append(tb.gep(clo, [I32(0), I32(3)], inbounds=True))  # the shared chunk counter
    fields += [tb.load(tb.gep(clo, [I32(0), I32(k)], inbounds=True))
               for k in range(4, len(clo_ty.elements))]
    st = tb.call(body_fn, fields)
    with tb.if_then(tb.icmp_signed("!=", st, I32(0)), likely=False):
        tb.store_atomic(st, tb.gep(clo, [I32(0), I32(0)], inbounds=True), "monotonic", 4)
    tb.ret_void()

    # the caller
    slot = cg.alloca(clo_ty, 1, f"{s.var.name}.closure")
    for k, v in enumerate([I32(0), lo, ext, I64(0)] + cap_vals):
        b.store(v, b.gep(slot, [I32(0), I32(k)], inbounds=True))
    fnptr_ty = ir.FunctionType(llx.VOID, [I8P]).as_pointer()
    gomp = llx.declare(cg.module, "GOMP_parallel", llx.VOID, [fnptr_ty, I8P, I32, I32])
    cg.fence_streams()  # the threads may read what this one streamed
    b.call(gomp, [thread_fn, b.bitcast(slot, I8P), I32(0), I32(0)])
    status = b.load_atomic(b.gep(slot, [I32(0), I32(0)], inbounds=True), "monotonic", 4)
    with b.if_then(b.icmp_signed("!=", status, I32(0)), likely=False):
        cg.fail(status)


def _emit_body(cg: CodeGen, s: For, caps: list, cap_types: list) -> ir.Function:
    fn = cg.new_function("par_body", I32, [I64, I64, I64.as_pointer()] + cap_types)
    fn.attributes.add("noinline")
    env = {}
    for x, a in zip(caps, fn.args[3:]):
        a.name = x.name
        if isinstance(x, Buffer):
            a.add_attribute("noalias")
        env[x] = a
    saved = cg.st
    cg.st = type(cg.st)(fn, env, in_parallel=True)
    try:
        b = cg.b
        lo, ext, next_ = fn.args[0], fn.args[1], fn.args[2]
        nth = b.call(llx.declare(cg.module, "omp_get_num_threads", I32, []), [])
        nth = b.mul(b.sext(nth, I64), I64(CHUNKS_PER_THREAD))
        step = I64(s.step)
        pos = b.icmp_signed(">", ext, I64(0))
        n = b.select(pos, b.sdiv(b.add(ext, I64(s.step - 1)), step), I64(0))
        chunk = llx.call_intrinsic(b, "smax", [b.sdiv(b.add(n, b.sub(nth, I64(1))), nth),
                                                I64(1)])
        name = s.var.name
        grab = b.append_basic_block(f"{name}.grab")
        work = b.append_basic_block(f"{name}.chunk")
        done = b.append_basic_block(f"{name}.done")
        b.branch(grab)
        b.position_at_end(grab)
        begin = b.atomic_rmw("add", next_, chunk, "monotonic")
        b.cbranch(b.icmp_signed("<", begin, n), work, done)
        b.position_at_end(work)
        end = llx.call_intrinsic(b, "smin", [b.add(begin, chunk), n])

        def body(j):
            var = b.add(lo, b.mul(j, step)) if s.step != 1 else b.add(lo, j)
            cg.let(s.var, var, lambda: cg.stmt(s.body))

        cg.loop(begin, end, 1, f"{name}.par", body)
        cg.b.branch(grab)
        cg.b.position_at_end(done)
        cg.fence_streams()  # before the team's barrier: the caller reads the results
        cg.b.ret(I32(llx.STATUS_OK))
        cg.st.finish()
    finally:
        cg.st = saved
    return fn
