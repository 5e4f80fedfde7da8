"""A CUDA SGEMM from one thread per output to shared-memory and register tiling.

The steps are the classic ones (Volkov & Demmel, SC 2008; the TVM "How to optimize GEMM on
GPU" schedule): (1) one thread per output element; (2) tiles of A and B staged in shared
memory by the threads of a block; (3) each thread computes a register tile of outputs from
shared memory, with a strided thread layout so that warps read contiguous shared memory;
(4) the CUTLASS SIMT layout (16x8 outputs per thread as 4x2 sub-tiles of 4x4 on virtual
threads, a 128x256 block), k tiles of 16 copied by ``cp.async`` two stages deep, blocks
launched in groups of 8 tile rows (0.88x cuBLAS on an H200 at 4096^3; the 128x128 block
of 8x8 outputs 0.86x). ``--variants`` adds other tiles and :func:`warp_tiles`
(CUTLASS's warp-level thread layout). Every step prints TFLOP/s and the ratio to cuBLAS
(through torch, tensor cores off) in the same run. Run: ``python tutorials/04_cuda_gemm.py [--n 4096]`` on a machine with an NVIDIA
GPU; without one it only builds (as ``--no-run``), and ``--print-source`` shows the CUDA C.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import polytile
from polytile import te


def matmul(m: int, n: int, k: int):
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` in float32."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def naive(m, n, k):
    """One thread per output element, 16x16 threads per block."""
    A, B, C = matmul(m, n, k)
    s = te.create_schedule(C.op)
    bi, bj, ti, tj = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 16)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def shared_tiles(m, n, k, tile: int = 32, kt: int = 32):
    """Blocks of tile x tile outputs; A and B tiles of depth kt fetched cooperatively into
    shared memory; one output per thread."""
    A, B, C = matmul(m, n, k)
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    bi, bj, ti, tj = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=kt)
    s[C].reorder(bi, bj, ti, tj, ko, ki)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    for T in (AS, BS):
        s[T].compute_at(s[C], ko)
        fused = s[T].fuse(*s[T].op.axis)
        rest, tx = s[T].split(fused, factor=tile)
        _, ty = s[T].split(rest, factor=tile)
        s[T].bind(ty, te.thread_axis("threadIdx.y"))
        s[T].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def register_tiles(m, n, k, block: int = 128, threads: int = 16, kt: int = 16, vec: int = 4):
    """Block tile ``block`` x ``block`` computed by ``threads`` x ``threads`` threads, each
    owning a contiguous (block/threads)^2 register tile (``C.local``) accumulated over k;
    A and B tiles of depth ``kt`` staged in shared memory with ``vec``-wide cooperative
    loads."""
    A, B, C = matmul(m, n, k)
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    per = block // threads          # outputs per thread along each axis
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    ty, iin = s[C].split(ii, factor=per)
    tx, jin = s[C].split(jj, factor=per)
    s[C].reorder(bi, bj, ty, tx, iin, jin)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].unroll(iin)
    s[C].vectorize(jin)
    # the register tile: all outputs of one thread, accumulated over k
    s[CL].compute_at(s[C], tx)
    ci, cj = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, ki, ci, cj)
    for ax in (ki, ci, cj):
        s[CL].unroll(ax)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        fused = s[T].fuse(*s[T].op.axis)
        rest, v = s[T].split(fused, factor=vec)
        rest, tx_ = s[T].split(rest, factor=threads)
        _, ty_ = s[T].split(rest, factor=threads)
        s[T].bind(ty_, te.thread_axis("threadIdx.y"))
        s[T].bind(tx_, te.thread_axis("threadIdx.x"))
        s[T].vectorize(v)
    return s, [A, B, C]


def pipelined_tiles(m, n, k, block: int = 128, threads: int = 16, vt: int = 2, kt: int = 16,
                    stages: int = 3, *, block_n: int | None = None,
                    threads_n: int | None = None, vt_n: int | None = None, group: int = 8):
    """The register tiling of the CUTLASS SIMT SGEMM: a ``block`` x ``block_n`` tile on
    ``threads`` x ``threads_n`` threads (``threadIdx.y``, ``threadIdx.x``), each owning
    ``vt`` x ``vt_n`` sub-tiles of ``block / (threads * vt)`` x ``block_n / (threads_n *
    vt_n)`` outputs (8x8 outputs per thread by default, as 2 x 2 sub-tiles of 4 x 4)
    spread ``block / vt`` (``block_n / vt_n``) apart by virtual threads (``vthread``), so
    that neighbouring threads read neighbouring 16-byte vectors of B's shared tile (no bank
    conflicts) and A's row values are broadcast. Each k step copies one column of A and one
    row of B from shared memory into registers (``A.shared.local``, ``B.shared.local``);
    nvcc merges these copies across the unrolled k steps into 16-byte shared loads
    (``LDS.128`` in the SASS: 32 of them for 512 ``FFMA`` per k tile of 8 at the default),
    which is what a transposed A tile would give. The shared tiles (``kt`` deep) are copied
    with 16-byte ``cp.async`` and software-pipelined ``stages`` deep
    (``s[CL].pipeline(ko, stages)``; 1: no pipeline), so the copies of the next k tiles
    overlap the FMAs of this one. ``group > 1`` launches the blocks ``group`` tile rows at a
    time down each tile column (Triton's ``GROUP_M``, :func:`polytile.targets.gpu_tiling.
    warp_tiles`) so that a wave of blocks shares A's and B's panels in L2 (the largest
    divisor of the tile rows at most ``group``).
    ``block_n``, ``threads_n``, ``vt_n`` default to ``block``, ``threads``, ``vt``.
    The defaults (a 128 x 128 block, k tiles of 16, 3 stages, groups of 8) ran at 0.86x
    cuBLAS on an H200 at 4096^3 (2 stages 0.855x, k tiles of 8 0.83x); :data:`TUNED`
    (the default step, 128 x 256, 16 x 8 per thread, 2 stages) at 0.88x.
    ``m``, ``n`` multiples of 4 (16-byte copies)."""
    block_n = block if block_n is None else block_n
    threads_n = threads if threads_n is None else threads_n
    vt_n = vt if vt_n is None else vt_n
    s, (A, B, C), (AS, BS, AL, BL, CL) = _staged_matmul(m, n, k)
    ty_ = te.thread_axis((0, threads), "threadIdx.y")
    tx_ = te.thread_axis((0, threads_n), "threadIdx.x")
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block_n)
    vy, ii = s[C].split(ii, nparts=vt)
    ty, ii = s[C].split(ii, nparts=threads)
    vx, jj = s[C].split(jj, nparts=vt_n)
    tx, jj = s[C].split(jj, nparts=threads_n)
    _grouped_blocks(s, C, bi, bj, (vy, vx, ty, tx, ii, jj), -(-m // block), group)
    s[C].bind(vy, te.thread_axis((0, vt), "vthread", name="vy"))
    s[C].bind(vx, te.thread_axis((0, vt_n), "vthread", name="vx"))
    s[C].bind(ty, ty_)
    s[C].bind(tx, tx_)
    s[C].vectorize(jj)
    ko, ki = _register_tile(s, CL, C, tx, kt)
    _shared_copies(s, (AS, BS), CL, ko, [(tx_, threads_n), (ty_, threads)])
    _pipeline(s, (AL, BL), CL, ko, ki, stages)
    return s, [A, B, C]


def warp_tiles(m, n, k, block: tuple = (128, 64), warps: tuple = (4, 1),
               lanes: tuple = (4, 8), vt: tuple = (2, 2), kt: int = 8, stages: int = 3,
               group: int = 8, pad: int = 0):
    """:func:`pipelined_tiles` with CUTLASS's SIMT warp tiling: the ``block`` tile
    (``BM x BN``) is split among ``warps = (WM, WN)`` warps (one of them 1, the other on
    ``threadIdx.z``); a warp's 32 lanes form a ``lanes = (LR, LC)`` grid
    (``threadIdx.y``, ``threadIdx.x``), each lane owning ``vt = (VM, VN)`` sub-tiles
    (``vthread``) of ``BM / (WM VM LR)`` rows ``LR`` apart and ``BN / (WN VN LC)``
    contiguous columns (4: one 16-byte vector of B's shared row, one ``STG.128`` of C).
    The ``LR`` rows a warp reads of A's shared tile at one k are consecutive rows (``kt``
    floats apart: free of bank conflicts at ``kt`` 8; ``pad`` > 0 pads A's shared rows to
    ``kt + pad`` floats for deeper k tiles) and its ``LC`` 16-byte vectors of B one
    128-byte row segment: each ``LDS.128`` is one shared-memory wavefront, where the 16 x
    16 thread grid of :func:`pipelined_tiles` (warps of 2 x 16 lanes) takes two.
    ``m``, ``n`` multiples of 4 (16-byte copies)."""
    (bm, bn), (wm, wn), (lr, lc), (vm, vn) = block, warps, lanes, vt
    if lr * lc != 32 or min(wm, wn) != 1 or bm % (wm * vm * lr) or bn % (wn * vn * lc):
        raise ValueError(f"warp_tiles: lanes {lanes} must make 32, one of warps {warps} "
                         f"be 1 and the block {block} a multiple of warps x vt x lanes")
    s, (A, B, C), (AS, BS, AL, BL, CL) = _staged_matmul(m, n, k)
    tz_ = te.thread_axis((0, wm * wn), "threadIdx.z")
    ty_, tx_ = te.thread_axis((0, lr), "threadIdx.y"), te.thread_axis((0, lc), "threadIdx.x")
    bi, bj, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], bm, bn)
    wi, ii = s[C].split(ii, nparts=wm)
    vy, ii = s[C].split(ii, nparts=vm)
    ii, li = s[C].split(ii, factor=lr)          # a lane's rows are lr apart
    wj, jj = s[C].split(jj, nparts=wn)
    vx, jj = s[C].split(jj, nparts=vn)
    lj, jj = s[C].split(jj, nparts=lc)          # contiguous columns: one vector
    _grouped_blocks(s, C, bi, bj, (wi, wj, vy, vx, li, lj, ii, jj), -(-m // bm), group)
    s[C].bind(wi if wm > 1 else wj, tz_)
    s[C].bind(vy, te.thread_axis((0, vm), "vthread", name="vy"))
    s[C].bind(vx, te.thread_axis((0, vn), "vthread", name="vx"))
    s[C].bind(li, ty_)
    s[C].bind(lj, tx_)
    s[C].vectorize(jj)
    ko, ki = _register_tile(s, CL, C, lj, kt)
    _shared_copies(s, (AS, BS), CL, ko, [(tx_, lc), (ty_, lr), (tz_, wm * wn)])
    if pad:
        s[AS].storage_align(s[AS].op.axis[0], kt + pad, 0)
    _pipeline(s, (AL, BL), CL, ko, ki, stages)
    return s, [A, B, C]


# ---------------------------------------------------------------- shared by the two above
def _staged_matmul(m, n, k):
    """The GEMM's schedule and its cache stages: ``(s, (A, B, C), (A.shared, B.shared,
    A.shared.local, B.shared.local, C.local))``."""
    A, B, C = matmul(m, n, k)
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AS, "local", [C])
    BL = s.cache_read(BS, "local", [C])
    CL = s.cache_write(C, "local")
    return s, (A, B, C), (AS, BS, AL, BL, CL)


def _grouped_blocks(s, C, bi, bj, inner: tuple, rows: int, group: int) -> None:
    """Order ``bi, bj, *inner`` and bind the block tiles: ``group`` tile rows at a time
    down each tile column on ``blockIdx.x`` (the largest divisor of the ``rows`` tile rows
    at most ``group``: a partial group of tile rows would not pipeline), the groups on
    ``blockIdx.y``."""
    group = max(1, min(group, rows))
    while rows % group:
        group -= 1
    if group > 1:
        bo, bii = s[C].split(bi, factor=group)
        s[C].reorder(bo, bj, bii, *inner)
        s[C].bind(bo, te.thread_axis("blockIdx.y"))
        s[C].bind(s[C].fuse(bj, bii), te.thread_axis("blockIdx.x"))
    else:
        s[C].reorder(bi, bj, *inner)
        s[C].bind(bi, te.thread_axis("blockIdx.y"))
        s[C].bind(bj, te.thread_axis("blockIdx.x"))


def _register_tile(s, CL, C, at, kt: int):
    """``C.local`` computed at ``C``'s loop ``at`` (a thread's outputs), accumulated over
    k tiles of ``kt``, its k step and both output axes unrolled: returns ``(ko, ki)``."""
    s[CL].compute_at(s[C], at)
    ci, cj = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, ki, ci, cj)
    for ax in (ki, ci, cj):
        s[CL].unroll(ax)
    return ko, ki


def _shared_copies(s, tiles, CL, ko, threads: list) -> None:
    """The shared ``tiles`` copied at ``C.local``'s k tile ``ko`` in 16-byte vectors by
    the block's threads: ``threads`` lists ``(thread axis, extent)`` innermost first."""
    for T in tiles:
        s[T].compute_at(s[CL], ko)
        fused = s[T].fuse(*s[T].op.axis)
        rest, v = s[T].split(fused, factor=4)
        axes = []
        for _, extent in threads:
            rest, ax = s[T].split(rest, factor=extent)
            axes.append(ax)
        for ax, (tag, _) in reversed(list(zip(axes, threads))):
            s[T].bind(ax, tag)
        s[T].vectorize(v)


def _pipeline(s, locals_, CL, ko, ki, stages: int) -> None:
    """The register copies of the shared tiles at each k step ``ki``; the shared copies
    pipelined ``stages`` deep over ``ko`` (1: no pipeline)."""
    for T in locals_:
        s[T].compute_at(s[CL], ki)
    if stages > 1:
        s[CL].pipeline(ko, stages=stages)


#: The default step's tile (the ``matmul`` GPU template's default at large float32 GEMMs,
#: found by tuning it): a 128 x 256 block on 8 x 32 threads, 16 x 8 outputs each (4 x 2
#: sub-tiles of 4 x 4), k tiles of 16, 2 stages (3 would not fit 48 KB), groups of 8.
TUNED = dict(threads=8, vt=4, block_n=256, threads_n=32, vt_n=2, kt=16, stages=2)

STEPS = [("one thread per output", naive),
         ("shared-memory tiles 32x32", shared_tiles),
         ("shared + 8x8 register tiles", register_tiles),
         ("16x8 vthread 128x256, cp.async x2, kt 16",
          lambda m, n, k: pipelined_tiles(m, n, k, **TUNED))]

#: ``--variants``: (title, schedule function, keyword arguments) timed besides the steps.
#: H200, 4096^3, ratio to cuBLAS in one run (C written back with scalar stores): 16x8
#: 128x256 kt 16 2 stages (the default step) 0.881; 8x8 128x128 kt 16 3 stages (the
#: previous default) 0.861 (0.855 with 2 stages, 0.83 with k tiles of 8, 0.78 without a
#: pipeline); warp tiles 0.75-0.80. A 16-byte write-back of C (STG.E.128 from the register
#: tile) cost 0.73x: it pins each accumulator row to an aligned register quad in B's bank
#: (FFMA bank conflicts 771 per 1024 FFMA instead of 469; see c_printer).
#: ptxas -v (sm_90, nvcc 13), no spills; SASS per k tile of 8 (FFMA : LDS.128):
#: pipelined 128 x 128: 128 registers, 512 : 32, 2 wavefronts per LDS.128 (warps of 2 x
#: 16 lanes); warp tiles 128 x 64 (4 warps of 4 x 8 lanes): 128 registers, 512 : 32, one
#: wavefront each; 128 x 256 16 x 8: 255 registers.
VARIANTS = [
    ("8x8 vthread 128x128, kt 16, 3 st, g8", pipelined_tiles, dict()),
    ("8x8 vthread 128x128, kt 16, 2 st, g8", pipelined_tiles, dict(kt=16, stages=2)),
    ("warp 4x8 128x64, kt 8, 3 st", warp_tiles, dict()),
    ("warp 4x8 128x128 8x16, kt 16 pad 4, 2 st", warp_tiles,
     dict(block=(128, 128), vt=(2, 4), kt=16, pad=4, stages=2)),
]


def main(argv=None) -> float | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="M = N = K (default 4096)")
    ap.add_argument("--print-source", action="store_true", help="print the CUDA C of each step")
    ap.add_argument("--no-run", action="store_true", help="build only (no GPU needed)")
    ap.add_argument("--variants", action="store_true",
                    help="also time the k-tile depths, pipeline depths, grouped blocks "
                    "and block tiles of VARIANTS")
    args = ap.parse_args(argv)
    return run_steps(args)


def run_steps(args) -> float | None:
    """The steps (and ``args.variants``) at ``args.n``: returns the cuBLAS figure in
    TFLOP/s (None without torch or a GPU)."""
    n = args.n
    ref_tflops = None
    if not args.no_run and not _have_gpu():
        print("no CUDA device: building only")
        args.no_run = True
    if not args.no_run:
        a = np.random.default_rng(0).uniform(-1, 1, (n, n)).astype("float32")
        b = np.random.default_rng(1).uniform(-1, 1, (n, n)).astype("float32")
        ref_tflops, ref = _cublas(a, b)
        da, db = polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda")
    steps = list(STEPS)
    if args.variants:
        steps += [(title, lambda m, n_, k, fn=fn, kw=kw: fn(m, n_, k, **kw))
                  for title, fn, kw in VARIANTS]
    wrong = []
    for title, make in steps:
        t0 = time.perf_counter()
        try:
            s, targs = make(n, n, n)
            f = polytile.build(s, targs, target="cuda")
        except Exception as exc:   # one failing variant must not hide the others' figures
            print(f"{title:42s} FAILED to build: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:120]}")
            wrong.append(title)
            continue
        t_build = time.perf_counter() - t0
        if args.print_source:
            print(f.get_source())
        if args.no_run:
            print(f"{title:42s} built in {t_build:.2f} s")
            continue
        dc = polytile.nd.array(np.full((n, n), np.nan, dtype="float32"), device="cuda")
        f(da, db, dc)
        err = np.abs(dc.numpy() - ref).max() / np.abs(ref).max()
        if not err < 1e-4:
            print(f"{title:42s} WRONG result (relative error {err:.2e})")
            wrong.append(title)
            continue
        t = f.time_evaluator(number=5, repeat=3)(da, db, dc).median
        tflops = 2.0 * n**3 / t / 1e12
        ratio = f"{tflops / ref_tflops:6.3f} x cuBLAS" if ref_tflops else ""
        print(f"{title:42s} {tflops:7.2f} TFLOP/s  {ratio}  (lower+build {t_build:.2f} s)")
    if wrong:
        raise SystemExit(f"failed: {', '.join(wrong)}")
    return ref_tflops


def _have_gpu() -> bool:
    try:
        from polytile.targets.cuda.runtime import device_count

        return device_count() > 0
    except Exception:  # no cuda-python, no driver
        return False


def _cublas(a: np.ndarray, b: np.ndarray):
    """cuBLAS fp32 (tensor cores off) through torch: (TFLOP/s or None, float64 reference)."""
    try:
        import torch
    except ImportError:
        print("torch not installed: no cuBLAS anchor")
        return None, (a.astype("float64") @ b.astype("float64")).astype("float32")
    ref = (torch.from_numpy(a).cuda().double() @ torch.from_numpy(b).cuda().double()).float()
    ref = ref.cpu().numpy()
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(3):
        ta @ tb
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    reps = 10
    for _ in range(reps):
        ta @ tb
    stop.record()
    torch.cuda.synchronize()
    t = start.elapsed_time(stop) / 1e3 / reps
    n = a.shape[0]
    tflops = 2.0 * n**3 / t / 1e12
    print(f"{'cuBLAS fp32 (torch, no TF32)':42s} {tflops:7.2f} TFLOP/s")
    return tflops, ref


if __name__ == "__main__":
    main()
