"""One schedule for NVIDIA and AMD GPUs, then AMD matrix cores (MFMA).

1. A GEMM tiled through shared memory (``__shared__``: an SM's shared memory on NVIDIA, a
   compute unit's LDS on AMD) is built for ``cuda`` and for ``hip -mcpu=gfx942`` without
   changing a line of the schedule; both lowerings run on polytile's reference
   interpreter and match numpy. The limits differ per target (64-lane wavefronts, 64 KiB
   of LDS on gfx942, 160 KiB on gfx950) and are checked when lowering.
2. The same GEMM in float16 on MFMA: :func:`polytile.targets.hip.gemm.mfma_gemm` tensorizes
   the wavefront tiles onto ``v_mfma_f32_32x32x8f16`` (A and B read from LDS by each lane
   in the instruction's register layout, the 32x32 accumulators in registers). The
   interpreter runs each MFMA call through the 64 lanes' registers; where hipcc exists
   the code is compiled for gfx90a and gfx942 and the MFMA instructions found in the
   compiled code are printed.

No AMD GPU is available to this project: nothing here runs on AMD hardware, and the HIP
runtime (through hip-python) is untested. Run:
``python tutorials/09_hip_mfma.py [--n 64] [--no-compile]``.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

import polytile
from polytile import te
from polytile.errors import BuildError
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.hip import compile as hc
from polytile.targets.hip.gemm import mfma_gemm


def shared_gemm(n: int, tile: int = 16):
    """``C = A @ B`` in float32: ``tile x tile`` blocks of threads, A and B tiles staged
    in shared memory (LDS) for each ``tile``-wide step of k."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = C.op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    ko, ki = s[C].split(k, factor=tile)
    s[C].reorder(bi, bj, ko, ti, tj, ki)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    for S in (AS, BS):
        s[S].compute_at(s[C], ko)
        a0, a1 = S.op.axis
        s[S].bind(a0, te.thread_axis("threadIdx.y"))
        s[S].bind(a1, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def check(f, inputs, out_dtype, ref, what: str, bound: float) -> None:
    out = np.full(ref.shape, np.nan, out_dtype)
    run(f, *inputs, out)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    if not err < bound:
        raise SystemExit(f"{what}: relative error {err:.2e} over {bound:.0e}")
    print(f"{what}: result matches numpy (relative error {err:.1e})")


def kernel_head(source: str) -> str:
    return next(ln for ln in source.splitlines() if "__global__" in ln)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="matrix size (a multiple of 32)")
    p.add_argument("--no-compile", action="store_true", help="print sources only")
    a = p.parse_args()
    n = a.n
    rng = np.random.default_rng(0)

    print("== 1. one shared-memory schedule, two vendors")
    n1 = 23   # an odd size (ragged last tiles), small: the interpreter runs every thread
    x, y = rng.uniform(-1, 1, (n1, n1)).astype("float32"), \
        rng.uniform(-1, 1, (n1, n1)).astype("float32")
    ref = x.astype("float64") @ y.astype("float64")
    for target in ("cuda", "hip -mcpu=gfx942"):
        s, args = shared_gemm(n1)
        check(lower(s, args, target=target, stop_after=None), (x, y), "float32", ref,
              f"{target:18s} on the interpreter", 1e-5)
        try:
            m = polytile.build(s, args, target=target)
            print(f"{target:18s} {kernel_head(m.get_source())}")
        except BuildError as ex:   # no CUDA compiler here: the source is still printed
            print(f"{target:18s} not compiled: {str(ex).splitlines()[0]}")
    lim = polytile.target.Target("hip -mcpu=gfx942").limits
    print(f"gfx942: wavefront {lim.warp_size} lanes, {lim.max_threads_per_block} threads, "
          f"{lim.shared_bytes_per_block // 1024} KiB of LDS per workgroup")

    print("\n== 2. float16 on MFMA (v_mfma_f32_32x32x8f16)")
    s, args = mfma_gemm(n, n, n, block=(64, 64, 32), wave=(32, 32))
    a16 = rng.uniform(-1, 1, (n, n)).astype("float16")
    b16 = rng.uniform(-1, 1, (n, n)).astype("float16")
    check(lower(s, args, target="hip -mcpu=gfx942", stop_after=None), (a16, b16), "float32",
          a16.astype("float64") @ b16.astype("float64"), "MFMA GEMM on the interpreter",
          1e-5)
    if hc.hipcc_path() is None or a.no_compile:
        src = polytile.build(s, args, target="hip -mcpu=gfx942").get_source()
        print("\n".join(ln.strip() for ln in src.splitlines() if "pt_mfma_f32_32x32x8f16(" in ln))
        print("hipcc not used: no compiled code to inspect")
        return
    for mcpu in ("gfx90a", "gfx942"):
        m = polytile.build(s, args, target=f"hip -mcpu={mcpu}")
        if mcpu == "gfx942":
            src = m.get_source()
            body = src[src.index("extern \"C\""):]
            print(body)
        found = collections.Counter(m.mfma_instructions())
        print(f"{mcpu}: compiled by {m.code_object.how}; MFMA instructions: "
              + ", ".join(f"{k} x{v}" for k, v in sorted(found.items())))
        if not found:
            raise SystemExit(f"{mcpu}: no v_mfma instruction in the compiled code")


if __name__ == "__main__":
    main()
