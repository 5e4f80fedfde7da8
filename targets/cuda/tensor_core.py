"""NVIDIA tensor-core intrinsics for ``tensorize`` (WMMA, CUDA's ``nvcuda::wmma``).

Each function declares one :class:`~polytile.te.tensor_intrin.TensorIntrin` on a 16x16x16
tile, in the style of TVM's tensor-core tutorial:

=========================  ==================================================================
``wmma_load_a/b``          ``frag[i, j] = smem[i, j]``: ``wmma::load_matrix_sync`` from a
                           (shared or global) region with any row stride, into a
                           ``wmma.matrix_a`` / ``wmma.matrix_b`` fragment
``wmma_mma``               ``c[i, j] += a[i, k] * b[k, j]`` (``wmma::mma_sync``), with
                           ``reset`` = ``wmma::fill_fragment(c, 0)``; float16 inputs, float32
                           (``acc="float32"``) or float16 accumulation; bfloat16 inputs
                           with float32, int8 inputs with int32 accumulation
``wmma_store``             ``out[i, j] = frag[i, j]``: ``wmma::store_matrix_sync``
=========================  ==================================================================

Fragments are buffers of scope ``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``
(``s.cache_read(AS, "wmma.matrix_a", [CF])``, ``s.cache_write(C, "wmma.accumulator")``):
arrays of 16x16 tiles, declared ``nvcuda::wmma::fragment<...> name[tiles]`` by the C
printer (the layout of matrix_a/matrix_b from the ``:row_major``/``:col_major`` tag of the
calls that load them). Their meaning in the loop IR is a per-thread array (each thread of a
warp computes the whole tile, which is what the interpreter runs): the loops of fragment
stages must not be bound to ``threadIdx.x``, whose 32 lanes form the warp that executes the
collective WMMA calls together. Source: CUDA C++ Programming Guide, "Warp Matrix Functions".
"""

from __future__ import annotations

from polytile import te, tir
from polytile.te import dtype as dt

from ..gpu_tiling import cooperative_copy, fragment_tiles, warp_tiles

# the m and n extents of one tile (N_TILE where a GEMM's own N shadows N)
N = N_TILE = 16


def _stride(view) -> int:
    return view.strides[0]


def wmma_load_a(dtype: str = "float16", layout: str = "row_major",
                name: str = "") -> te.TensorIntrin:
    """``load_matrix_sync`` into a ``wmma.matrix_a`` fragment (rows ``i``, columns ``k``)."""
    return _load("matrix_a", dtype, layout, name)


def wmma_load_b(dtype: str = "float16", layout: str = "row_major",
                name: str = "") -> te.TensorIntrin:
    """``load_matrix_sync`` into a ``wmma.matrix_b`` fragment (rows ``k``, columns ``j``)."""
    return _load("matrix_b", dtype, layout, name)


def k_tile(dtype: str) -> int:
    """The k extent of one WMMA step: 8 for float32 operands (tf32, m16n16k8), else 16."""
    return 8 if dtype == "float32" else N


def _load(use: str, dtype: str, layout: str, name: str) -> te.TensorIntrin:
    shape = (N, k_tile(dtype)) if use == "matrix_a" else (k_tile(dtype), N)
    a = te.placeholder(shape, name="src", dtype=dtype)
    c = te.compute(shape, lambda i, j: a[i, j], name="frag")
    binds = {a: tir.decl_buffer(a.shape, dtype, "src", strides=[te.var("ldm"), 1]),
             c: tir.decl_buffer(c.shape, dtype, "frag", scope=f"wmma.{use}")}

    def fcompute(ins, outs):
        src, frag = ins[0], outs[0]
        # float32 operands are tf32 fragments, rounded (cvt.rna.tf32) after the load
        op = "wmma.load_matrix_sync_tf32" if dtype == "float32" else "wmma.load_matrix_sync"
        return tir.call_intrin("void", f"{op}:{layout}",
                               frag.access_ptr("w"), src.access_ptr("r"), _stride(src))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=name or f"wmma_load_{use[-1]}_{dtype}_{layout}")



def _matmul(a: te.Tensor, b: te.Tensor, acc: str, name: str) -> te.Tensor:
    """``a @ b`` summed in ``acc`` (operands cast to it unless they have it already): the
    compute a tensorized GEMM stage and its MMA intrinsics must both declare."""
    k = te.reduce_axis((0, a.shape[1]), name="k")
    if acc == a.dtype:
        return te.compute((a.shape[0], b.shape[1]),
                          lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name=name)
    return te.compute((a.shape[0], b.shape[1]),
                      lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k),
                      name=name)

def wmma_mma(dtype: str = "float16", acc: str = "float32", name: str = "") -> te.TensorIntrin:
    """``c[i, j] = sum_k a[i, k] * b[k, j]`` on 16x16x16 fragments (``mma_sync``); the
    stage must compute ``te.sum(A[i, k].astype(acc) * B[k, j].astype(acc))`` (or without
    casts when ``acc`` is ``dtype``). ``dtype="float32"`` is tf32 (m16n16k8: 16x8 and 8x16
    operands, float32 accumulation)."""
    kt = k_tile(dtype)
    a = te.placeholder((N, kt), name="a", dtype=dtype)
    b = te.placeholder((kt, N), name="b", dtype=dtype)
    c = _matmul(a, b, acc, "c")
    binds = {a: tir.decl_buffer(a.shape, dtype, "a", scope="wmma.matrix_a"),
             b: tir.decl_buffer(b.shape, dtype, "b", scope="wmma.matrix_b"),
             c: tir.decl_buffer(c.shape, acc, "c", scope="wmma.accumulator")}

    def fcompute(ins, outs):
        fa, fb = ins
        fc = outs[0]
        update = tir.call_intrin("void", "wmma.mma_sync", fc.access_ptr("w"),
                                 fa.access_ptr("r"), fb.access_ptr("r"), fc.access_ptr("r"))
        reset = tir.call_intrin("void", "wmma.fill_fragment", fc.access_ptr("w"),
                                te.const(0, acc))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=name or f"wmma_mma_{dtype}_{acc}")


def wmma_store(acc: str = "float32", name: str = "") -> te.TensorIntrin:
    """``store_matrix_sync`` of a ``wmma.accumulator`` fragment to a row-major region."""
    f = te.placeholder((N, N), name="frag", dtype=acc)
    c = te.compute((N, N), lambda i, j: f[i, j], name="dst")
    binds = {f: tir.decl_buffer(f.shape, acc, "frag", scope="wmma.accumulator"),
             c: tir.decl_buffer(c.shape, acc, "dst", strides=[te.var("ldm"), 1])}

    def fcompute(ins, outs):
        frag, dst = ins[0], outs[0]
        return tir.call_intrin("void", "wmma.store_matrix_sync", dst.access_ptr("w"),
                               frag.access_ptr("r"), _stride(dst))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name or f"wmma_store_{acc}")


_INLINE = "__device__ __forceinline__"

#: One C++ helper per instruction, named after it: call name -> (helper, definition). The
#: C printer defines a helper once when a kernel calls it.
C_HELPERS = {
    "wmma.load_matrix_sync": ("wmma_load_matrix_sync", (
        f"template <typename F, typename T> {_INLINE} void wmma_load_matrix_sync(F& frag, "
        "const T* src, int ldm) { nvcuda::wmma::load_matrix_sync(frag, src, ldm); }")),
    "wmma.load_matrix_sync_tf32": ("wmma_load_matrix_sync_tf32", (
        f"template <typename F> {_INLINE} void wmma_load_matrix_sync_tf32(F& frag, "
        "const float* src, int ldm) { nvcuda::wmma::load_matrix_sync(frag, src, ldm); "
        "for (int t = 0; t < frag.num_elements; ++t) "
        "frag.x[t] = nvcuda::wmma::__float_to_tf32(frag.x[t]); }")),
    "wmma.mma_sync": ("wmma_mma_sync", (
        f"template <typename D, typename A, typename B, typename C> {_INLINE} void "
        "wmma_mma_sync(D& d, const A& a, const B& b, const C& c) "
        "{ nvcuda::wmma::mma_sync(d, a, b, c); }")),
    "wmma.fill_fragment": ("wmma_fill_fragment", (
        f"template <typename F, typename T> {_INLINE} void wmma_fill_fragment(F& frag, T v) "
        "{ nvcuda::wmma::fill_fragment(frag, v); }")),
    "wmma.store_matrix_sync": ("wmma_store_matrix_sync", (
        f"template <typename T, typename F> {_INLINE} void wmma_store_matrix_sync(T* dst, "
        "const F& frag, int ldm) { nvcuda::wmma::store_matrix_sync(dst, frag, ldm, "
        "nvcuda::wmma::mem_row_major); }")),
}


def ldmatrix_bank_ways(row_bytes: int, rows: int = 8, width_bytes: int = 16) -> int:
    """Bank-conflict degree of one ``ldmatrix`` 8x8 matrix (``rows`` rows of
    ``width_bytes`` at a stride of ``row_bytes``) in shared memory of 32 banks of 4 bytes:
    the most rows one bank serves (1: conflict-free, one wavefront). With float16 rows of
    64 elements (128 bytes) all 8 rows start in bank 0 (8-way); ``storage_align`` padding
    by 8 elements (144 bytes) spreads them over the 32 banks. Source: CUDA C Programming
    Guide, "Shared Memory" (compute capability 5.x+ bank layout)."""
    hits: dict = {}
    for r in range(rows):
        first = r * row_bytes // 4
        for w in range(width_bytes // 4):
            bank = (first + w) % 32
            hits[bank] = hits.get(bank, 0) + 1
    return max(hits.values())


def wmma_gemm(M: int, N: int, K: int, *, acc: str = "float32", block=None,
              warp=(64, 64), pad: int | None = None, vector: int | None = None,
              isa: str = "wmma",
              dtype: str = "float16", stages: int = 1, frags: str = "step",
              group: int = 1, swizzle: bool | str = False):
    """A hand-scheduled float16 GEMM on tensor cores through WMMA (TVM's tensor-core
    tutorial structure): ``C[M, N] = A[M, K] @ B[K, N]`` (row-major), ``C`` in ``acc``.
    ``dtype`` may also be ``bfloat16`` (``acc`` float32), ``int8`` (``acc`` int32, WMMA
    only) or ``float32`` (tf32 WMMA, m16n16k8, float32 accumulation); ``vector`` (copy
    lanes) and ``pad`` (row padding) default to 16 bytes.

    Blocks of ``block = (BM, BN, BK)``, by default (128, 128, 64), or (128, 128, 32) for
    float32 operands without a pipeline (its 4-byte tiles would exceed the 48 KiB of static
    shared memory): each block stages ``A[BM, BK]`` and ``B[BK, BN]`` in
    shared memory (rows padded by ``pad`` elements against bank conflicts, copied with
    ``vector``-element loads by all threads), each warp computes a ``warp = (WM, WN)`` tile
    as ``WM/16 x WN/16`` accumulator fragments, loading 16x16 fragments of A and B for each
    16-wide step of k (``frags="step"``; ``"tile"``: the fragments of a whole k tile
    loaded before its MMAs; ``"prefetch"``: per step, double-buffered, the first step's
    fragments of the next tile loaded before the last step's MMAs of this one, across the
    barrier: ``pipeline(..., fragment_prefetch=True)``). ``isa="mma"`` runs the same tiles through ``ldmatrix`` and
    ``mma.sync.aligned.m16n8k16`` (sm_80+) instead of WMMA; with ``swizzle`` (``isa="mma"``
    only) each shared tile whose rows are 32, 64 or 128 bytes (A's ``BK`` columns: 64 bytes
    for ``BK = 32`` float16) is stored XOR-swizzled (``s[S].swizzle("64B")``, the layout
    of the wgmma path), and one of 256, 512 or 1024-byte rows (B's ``BN`` columns) in the
    128B pattern over its rows (``"128B/512"``), instead of padded: ``ldmatrix`` stays
    conflict-free and the 16-byte ``cp.async`` of a warp writes whole 128-byte lines (ncu
    on the H200, 128x256x32 blocks: 14.6 and 11.2 shared wavefronts per ``LDGSTS`` of A's
    80-byte and B's 528-byte padded rows, 4 ideal; 8 for A's 64-byte swizzled rows, half
    lines of global memory); other tiles stay padded. ``swizzle="A"`` (or ``"B"``): that
    tile only. Threads: 32 lanes
    (``threadIdx.x``, the shared-memory copies only)
    times ``BM/WM x BN/WN`` warps (``threadIdx.z``, ``threadIdx.y``).

    The shared copies are 16-byte vectors, hence ``cp.async`` on sm_80+ (when ``K`` and
    ``N`` are multiples of 8). ``stages > 1`` software-pipelines the k-tile loop
    (``s[CF].pipeline(k.outer, stages=stages)``): ``stages`` shared buffers of each tile,
    the copies of tile ``k + stages - 1`` in flight during the MMAs of tile ``k``, and the
    16-wide k steps of a tile unrolled. Shared memory: ``stages * (BM * (BK + pad) +
    BK * (BN + pad)) * 2`` bytes (105 KiB for the default tiles and 3 stages; above 48
    KiB it is dynamic shared memory, within the 227 KiB of sm_90).

    Returns
    -------
    (Schedule, [A, B, C])

    Raises
    ------
    ScheduleError
        When lowered with sizes the tiles do not divide (a partial 16x16 tile cannot be a
        WMMA call).
    """
    from polytile.schedule import create_schedule  # schedules build on te

    if block is None:
        block = (128, 128, 32) if dtype == "float32" and stages == 1 else (128, 128, 64)
    BM, BN, BK = block
    WM, WN = warp
    if dtype == "int8" and acc != "int32":
        raise ValueError(f"wmma_gemm: int8 inputs accumulate in 'int32', not {acc!r}")
    if dtype == "float32" and (acc != "float32" or isa != "wmma"):
        raise ValueError(f"wmma_gemm: float32 inputs (tf32) take isa 'wmma' and 'float32' "
                         f"accumulation, not {isa!r} with {acc!r}")
    nbytes = {"int8": 1, "float32": 4}.get(dtype, 2)
    kt = k_tile(dtype)
    if vector is None:
        vector = 16 // nbytes           # 16-byte copies (cp.async)
    if pad is None:
        pad = 16 // nbytes              # rows stay multiples of 16 bytes (WMMA's ldm)
    if swizzle and isa != "mma":
        raise ValueError(f"wmma_gemm: swizzle needs isa 'mma' (ldmatrix), not {isa!r}")
    if swizzle not in (False, True, "A", "B"):
        raise ValueError(f"wmma_gemm: swizzle {swizzle!r}; expected a bool, 'A' or 'B'")
    if isa == "mma" and (dtype, acc) not in (("float16", "float32"), ("float16", "float16"),
                                             ("bfloat16", "float32")):
        raise ValueError(f"wmma_gemm: isa 'mma' takes float16 (float32 or float16 "
                         f"accumulation) or bfloat16 (float32 accumulation), not {dtype!r} "
                         f"with {acc!r}")
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    C = _matmul(A, B, acc, "C")
    s = create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CF = s.cache_write(C, "wmma.accumulator")
    AF = s.cache_read(AS, "wmma.matrix_a", [CF])
    BF = s.cache_read(BS, "wmma.matrix_b", [CF])
    wj, fi, fj, ti = warp_tiles(s, C, (BM, BN), (WM, WN), (N_TILE, N_TILE), group)
    if isa not in ("wmma", "mma"):
        raise ValueError(f"wmma_gemm: isa {isa!r}; expected 'wmma' or 'mma'")
    mma = isa == "mma"
    s[C].tensorize(ti, mma_store(acc) if mma else wmma_store(acc))
    # fragment indices must be constants (registers): unroll every loop over fragments
    s[C].unroll(fi)
    s[C].unroll(fj)
    s[CF].compute_at(s[C], wj)
    ko, kf, cfi, cfj, cti = fragment_tiles(s, CF, BK, (N_TILE, N_TILE, kt))
    s[CF].tensorize(cti, mma_mma(dtype, acc) if mma else wmma_mma(dtype, acc))
    for v in (cfi, cfj):
        s[CF].unroll(v)
    if stages > 1:
        # the 16-wide k steps of a tile unrolled: fragment loads of step k+1 can be issued
        # during the MMAs of step k (nvcc does not always unroll this loop on sm_90)
        s[CF].unroll(kf)
    if frags not in ("step", "tile", "prefetch"):
        raise ValueError(f"wmma_gemm: frags {frags!r}; expected 'step', 'tile' or 'prefetch'")
    if frags == "prefetch" and (stages < 2 or BK < 2 * kt):
        raise ValueError(f"wmma_gemm: frags 'prefetch' needs a pipeline (stages {stages}) "
                         f"and two k steps per tile or more (BK {BK}, steps of {kt})")
    s[AF].compute_at(s[CF], ko if frags == "tile" else kf)
    s[BF].compute_at(s[CF], ko if frags == "tile" else kf)
    loads = (mma_load_a(dtype), mma_load_b(dtype)) if mma else (wmma_load_a(dtype), wmma_load_b(dtype))
    for F, intrin, (t0, t1) in zip((AF, BF), loads, ((N_TILE, kt), (kt, N_TILE))):
        a0, a1 = F.op.axis
        o0, i0 = s[F].split(a0, factor=t0)
        o1, i1 = s[F].split(a1, factor=t1)
        s[F].reorder(o0, o1, i0, i1)
        s[F].tensorize(i0, intrin)
        s[F].unroll(o0)
        s[F].unroll(o1)
    if stages > 1:
        s[CF].pipeline(ko, stages=stages, fragment_prefetch=frags == "prefetch")
    for S, row, name in ((AS, BK * nbytes, "A"), (BS, BN * nbytes, "B")):
        s[S].compute_at(s[CF], ko)
        swz = swizzle is True or swizzle == name
        if swz and row in (32, 64, 128):
            s[S].swizzle(f"{row}B")
        elif swz and row in (256, 512, 1024):
            s[S].swizzle(f"128B/{row}")
        elif pad:
            width = S.op.axis[1].dom.extent
            s[S].storage_align(S.op.axis[0], width + pad if width % 32 else 32,
                               pad if width % 32 == 0 else 0)
        cooperative_copy(s, S, vector=vector, threads=(32, BN // WN, BM // WM))
    return s, [A, B, C]


#: The fastest hand-scheduled mma.sync GEMM measured (H200, 4096^3 float16, float32
#: accumulation: 419.3 TFLOP/s, 0.561x cuBLAS (747.6) in one run of 2026-12-02 09:25
#: (``benchmarks/gpu_gemm.py`` ``MMA_VARIANTS[36]``; same run: padded 128x256x32 [18] 402.5,
#: 0.535x; its A swizzled [40] 409.4; 256x128x32 with A swizzled [41] 418.6, 0.557x):
#: 128x256 blocks of 8 warps of 64x64, k tiles of 64 in 4 stages, fragment prefetch,
#: blocks grouped by 8 tile rows, both shared tiles swizzled (A 128B, B "128B/512"; 4
#: shared wavefronts per 16-byte cp.async of a warp, ncu). ``wmma_gemm(M, N, K,
#: **MMA_BEST)``; the tutorial's last mma.sync step, the benchmark's ``--isa best`` line
#: and the default of the ``cuda`` ``matmul`` template (float16/bfloat16, ``pad``
#: ``"swizzle"``) are this schedule. Still the fastest of 17 candidates in one run of
#: ``benchmarks/mma_candidates.py`` (H200, 2026-12-02 20:42, 7 interleaved rounds): fp16
#: 402.4 TFLOP/s = 0.548x cuBLAS 734.4, bf16 412.7 = 0.547x cuBLAS 754.1 (next: groups of
#: 16 0.543x; 128x128x64 in 3 stages, two blocks per SM, 0.532x / 0.539x; 128x256x128 in
#: 2 stages 0.518x; 256x128x64 0.505x; constant slots (``UNROLL_SLOTS``) 0.537x; A's tile
#: swizzled only 0.529x); ncu of one launch: 1.69 GHz, tensor pipe 76% busy, L2 35%
#: (4.5 TB/s), stalls per issue: math-pipe throttle 2.49, wait 2.46, barrier 0.11, long
#: scoreboard 0.12; ``mma_peak.py``'s 64x64 warp tile with its ldmatrix alone: 0.875x.
MMA_BEST = dict(isa="mma", block=(128, 256, 64), warp=(64, 64), stages=4, frags="prefetch",
                group=8, swizzle=True)

#: The fastest wgmma schedule through ``tensorize`` measured (H200, 4096^3 float16, ``C = A
#: @ B`` with B read MN-major, one run of ``benchmarks/gpu_gemm.py --isa tensorize --tma``,
#: 2026-12-02, beside cuBLAS 761.9 and Triton 685.0 TFLOP/s: 698.3 TFLOP/s, 0.917x cuBLAS,
#: 1.019x Triton, with the tiles copied by TMA (``tma=True``); the same schedule with
#: ``cp.async`` copies 635.4 (earlier runs: 639.1 beside cuBLAS 766.4 and Triton 689.4;
#: ungrouped with float2 stores 583.0, grouped 603.1; copies after the MMA wait 571.4, with
#: 16B stores 617.8); with TMA, copies after the MMA wait 700.2, ``C = A @ Bt^T`` 700.6, two
#: MMA groups in flight 535.4, 128x128 blocks in 5 stages 611.9): 128x256 blocks of k tiles
#: of 64 (128B-swizzled rows), 4 stages, one MMA group in flight, blocks in groups of 8 tile
#: rows, the 16-byte epilogue, TMA copies.
#: ``wgmma_gemm_schedule(M, N, K, **WGMMA_TENSORIZE_BEST)`` (``group`` must divide ``M /
#: 128``); the tutorial's tensorize step and the sm_90a default of the ``cuda`` ``matmul``
#: template (float16/bfloat16).
WGMMA_TENSORIZE_BEST = dict(block=(128, 256, 64), stages=4, swizzle="128B", mma_wait=1,
                            group=8, copy_after_wait=False, epilogue="16B", tma=True)

# ------------------------------------------------------------ mma.sync + ldmatrix (sm_80+)
# The same 16x16 tiles as WMMA, held in registers whose per-lane layout is PTX's (PTX ISA
# 9.7.13.4.8, "Matrix Fragments for mma.m16n8k16 with floating point type"): a 16x16 A tile
# in 4 registers (ldmatrix .x4), a 16x16 B tile as two k16n8 fragments (ldmatrix .x4
# .trans from row-major k x n shared memory), a 16x16 accumulator as two m16n8 ones. The
# fragment buffers keep their wmma.* scopes; the ``:mma`` tag of the calls picks these types.
MMA_TYPES = r"""struct pt_mma_a { unsigned r[4]; };      // 16x16 f16 A tile (ldmatrix.x4)
struct pt_mma_b { unsigned r[4]; };      // 16x16 f16 B tile: two k16n8 fragments
struct pt_mma_a_bf16 { unsigned r[4]; }; // the same tiles of bf16
struct pt_mma_b_bf16 { unsigned r[4]; };
struct pt_mma_c_f32 { float r[8]; };     // 16x16 f32 accumulator: two m16n8 fragments
struct pt_mma_c_f16 { unsigned r[4]; };  // 16x16 f16 accumulator (half2 registers)
__device__ __forceinline__ unsigned pt_lane() {
  // not volatile: the lane id is constant per thread, so nvcc may compute it once
  unsigned l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return l;
}"""

_MMA_HELPERS = {
    "mma.ldmatrix_x4": ("ldmatrix_x4", r"""template <typename F, typename T> __device__ __forceinline__ void ldmatrix_x4(F& f, const T* src, int ldm) {
  // lanes 0-15 address rows 0-15 at column 0, lanes 16-31 at column 8
  unsigned l = pt_lane();
  unsigned a = (unsigned)__cvta_generic_to_shared(src + (l % 16) * ldm + (l / 16) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3]) : "r"(a));
}"""),
    "mma.ldmatrix_x4_trans": ("ldmatrix_x4_trans", r"""template <typename F, typename T> __device__ __forceinline__ void ldmatrix_x4_trans(F& f, const T* src, int ldm) {
  // matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
  unsigned l = pt_lane();
  unsigned a = (unsigned)__cvta_generic_to_shared(
      src + ((l % 8) + 8 * ((l / 8) % 2)) * ldm + 8 * (l / 16));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(f.r[0]), "=r"(f.r[1]), "=r"(f.r[2]), "=r"(f.r[3]) : "r"(a));
}"""),
    "mma.mma_sync_m16n8k16": ("mma_sync_m16n8k16", r"""__device__ __forceinline__ void mma_sync_m16n8k16(pt_mma_c_f32& d, const pt_mma_a& a, const pt_mma_b& b, const pt_mma_c_f32& c) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d.r[4 * h]), "=f"(d.r[4 * h + 1]), "=f"(d.r[4 * h + 2]), "=f"(d.r[4 * h + 3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]),
                   "r"(b.r[2 * h + 1]), "f"(c.r[4 * h]), "f"(c.r[4 * h + 1]), "f"(c.r[4 * h + 2]),
                   "f"(c.r[4 * h + 3]));
}
__device__ __forceinline__ void mma_sync_m16n8k16(pt_mma_c_f32& d, const pt_mma_a_bf16& a, const pt_mma_b_bf16& b, const pt_mma_c_f32& c) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d.r[4 * h]), "=f"(d.r[4 * h + 1]), "=f"(d.r[4 * h + 2]), "=f"(d.r[4 * h + 3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]),
                   "r"(b.r[2 * h + 1]), "f"(c.r[4 * h]), "f"(c.r[4 * h + 1]), "f"(c.r[4 * h + 2]),
                   "f"(c.r[4 * h + 3]));
}
__device__ __forceinline__ void mma_sync_m16n8k16(pt_mma_c_f16& d, const pt_mma_a& a, const pt_mma_b& b, const pt_mma_c_f16& c) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, "
                 "{%2, %3, %4, %5}, {%6, %7}, {%8, %9};"
                 : "=r"(d.r[2 * h]), "=r"(d.r[2 * h + 1])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]),
                   "r"(b.r[2 * h + 1]), "r"(c.r[2 * h]), "r"(c.r[2 * h + 1]));
}"""),
    "mma.fill": ("mma_fill", r"""__device__ __forceinline__ void mma_fill(pt_mma_c_f32& c, float v) {
#pragma unroll
  for (int i = 0; i < 8; ++i) c.r[i] = v;
}
__device__ __forceinline__ void mma_fill(pt_mma_c_f16& c, half v) {
  half2 h = __halves2half2(v, v);
#pragma unroll
  for (int i = 0; i < 4; ++i) c.r[i] = *reinterpret_cast<unsigned*>(&h);
}"""),
    "mma.store": ("mma_store", r"""__device__ __forceinline__ float pt_selp(bool p, float x, float y) {
  // p ? x : y as one selp (a C conditional on the lane parity becomes a divergent branch)
  float r;
  asm("{ .reg .pred q; setp.ne.u32 q, %1, 0; selp.f32 %0, %2, %3, q; }"
      : "=f"(r) : "r"((unsigned)p), "f"(x), "f"(y));
  return r;
}
__device__ __forceinline__ void mma_store(float* dst, const pt_mma_c_f32& c, int ldm) {
  // m16n8 layout: lane l holds rows g = l/4 and g + 8, columns 2t and 2t + 1 (t = l%4) of
  // each n8 half h. Lanes t and t^1 swap a pair (shfl.sync.bfly) so that the even lane holds
  // columns 2t..2t+3 of row g and the odd one columns 2t-2..2t+1 of row g + 8: one
  // 16-byte store each (4-byte stores of the own values where dst or ldm is not 16-byte
  // aligned). No branch: the lane parity picks values by selp and the alignment predicates
  // the stores, so that every shuffle runs on a converged warp (with a branch on the parity
  // nvcc 13 ran each shuffle through its divergent-collective path: BRA.DIV, WARPSYNC)
  unsigned l = pt_lane();
  int g = l / 4, t = l % 4;
  bool odd = t & 1;
  unsigned wide = ldm % 4 == 0 && reinterpret_cast<unsigned long long>(dst) % 16 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float a0 = c.r[4 * h], a1 = c.r[4 * h + 1], b0 = c.r[4 * h + 2], b1 = c.r[4 * h + 3];
    float r0 = __shfl_xor_sync(0xffffffffu, pt_selp(odd, a0, b0), 1);
    float r1 = __shfl_xor_sync(0xffffffffu, pt_selp(odd, a1, b1), 1);
    float* w = dst + (g + 8 * odd) * ldm + 8 * h + 2 * (t & ~1);
    float* p = dst + g * ldm + 8 * h + 2 * t;
    float* q = p + 8 * ldm;
    asm volatile("{ .reg .pred w; setp.ne.u32 w, %0, 0;\n"
                 "  @w st.global.v4.f32 [%1], {%4, %5, %6, %7};\n"
                 "  @!w st.global.f32 [%2], %8;  @!w st.global.f32 [%2+4], %9;\n"
                 "  @!w st.global.f32 [%3], %10;  @!w st.global.f32 [%3+4], %11; }"
                 :: "r"(wide), "l"(w), "l"(p), "l"(q), "f"(pt_selp(odd, r0, a0)),
                    "f"(pt_selp(odd, r1, a1)), "f"(pt_selp(odd, b0, r0)),
                    "f"(pt_selp(odd, b1, r1)), "f"(a0), "f"(a1), "f"(b0), "f"(b1)
                 : "memory");
  }
}
__device__ __forceinline__ void mma_store(half* dst, const pt_mma_c_f16& c, int ldm) {
  unsigned l = pt_lane();
  int g = l / 4, t = l % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<unsigned*>(dst + (g + 8 * r) * ldm + 8 * h + 2 * t) = c.r[2 * h + r];
}"""),
}
C_HELPERS.update(_MMA_HELPERS)


#: the shared row (0-15) and 16-byte column chunk (0, 1) that lane ``l`` addresses in each
#: ``ldmatrix`` helper above
_LDMATRIX_LANE = {"mma.ldmatrix_x4": ("l % 16", "l / 16"),
                  "mma.ldmatrix_x4_trans": ("(l % 8) + 8 * ((l / 8) % 2)", "l / 16")}


def _ldmatrix_swizzled(call: str, width: int, first_row: bool) -> tuple[str, str]:
    """The helper of ``ldmatrix`` call ``call`` (``mma.ldmatrix_x4`` or ``..._trans``) on a
    buffer swizzled in rows of ``width`` bytes (``Stage.swizzle``): each lane addresses
    where :func:`polytile.targets.cuda.wgmma.swizzle_elements` put its row, the XOR of
    the 16-byte chunk (address bits 4..) with the 128-byte line (bits 7..); swizzled
    buffers start on the pattern's period in shared addresses (the C printer aligns them).

    Any region: the XOR of each lane's whole address (two integer instructions per call).
    ``first_row`` (``_sw<W>r``, one more argument ``c0``): a region that starts on the
    first row of the 8-row pattern, in 16-byte chunk ``c0`` (a constant) of its row, where
    the swizzle moves the lane's chunk ``c0 + h`` of row ``r`` to ``(c0 + h) ^ x(r)``: the
    lane's displacement from the region's start is a per-thread constant for each
    ``c0``, and the address the region's plus it, as without a swizzle (nvcc folds the
    tile offsets into the ``LDSM`` immediates)."""
    name, text = _MMA_HELPERS[call]
    mask = min(width, 128) // 16 - 1
    # the bits of the row within the pattern: address bits 7.. (the 128-byte line) for
    # rows of 128 bytes or less, the row's (bits log2(width)..) for the wide "128B/R"
    shift = max(width, 128).bit_length() - 1
    row, chunk = _LDMATRIX_LANE[call]
    head, sep, tail = text.partition("  asm volatile")
    if not first_row:
        head = head.replace(f"void {name}(", f"void {name}_sw{width}(")
        return f"{name}_sw{width}", (head + f"  a ^= (a >> {shift - 4}) & 0x{mask << 4:x}u;"
                                     f"   // swizzle of {width}-byte rows (Stage.swizzle)\n"
                                     + sep + tail)
    decl = head.split("{", 1)[0].replace(f"void {name}(", f"void {name}_sw{width}r(")
    decl = decl.replace("int ldm)", "int ldm, unsigned c0)")
    x = f"((r * {width}u >> 7) & {mask}u)" if width <= 128 else f"(r & {mask}u)"
    body = (f"{{\n  // swizzle of {width}-byte rows (Stage.swizzle), a region on the pattern's "
            f"first row,\n  // from chunk c0: chunk c of row r is stored at chunk c ^ "
            f"(r * {width} >> {shift}) % {mask + 1}\n"
            f"  unsigned l = pt_lane(), r = {row}, c = c0 + {chunk};\n"
            f"  unsigned a = (unsigned)__cvta_generic_to_shared(src) + r * ldm * "
            f"(unsigned)sizeof(T) +\n"
            f"               ((c ^ {x}) - c0) * 16u;\n")
    return f"{name}_sw{width}r", decl + body + sep + tail


for _call in _LDMATRIX_LANE:
    for _w in (32, 64, 128, 256, 512, 1024):
        for _first in (False, True):
            C_HELPERS[f"{_call}_sw{_w}" + ("r" if _first else "")] = \
                _ldmatrix_swizzled(_call, _w, _first)


def _first_row_chunk_wide(indices: tuple, shape: tuple, width: int,
                          nbytes: int) -> int | None:
    """:func:`_first_row_chunk` for rows of ``width`` > 128 bytes (``"128B/R"``) from the
    region's start ``indices`` per dimension of a buffer of ``shape`` (its last dimension
    the row): the row (the other dimensions flattened) a multiple of 8 and the column's
    terms whole 128-byte lines, whose 16-byte chunk modulo 8 is then the constant's (all
    the helper needs: the XOR changes a chunk's three low bits)."""
    from polytile.schedule.passes.async_copy import linear_terms

    if indices is None or len(indices) != len(shape) or len(shape) < 2:
        return None
    col = linear_terms(indices[-1])
    if col is None or not all(k * nbytes % 128 == 0 for k in col[0].values()) or \
            col[1] * nbytes % 16:
        return None
    inner = 1
    for ix, extent in zip(reversed(indices[:-1]), reversed(shape[:-1])):
        lin = linear_terms(ix)
        if lin is None or not all(k * inner % 8 == 0 for k in lin[0].values()) or \
                lin[1] * inner % 8:
            return None
        if not isinstance(extent, int):
            extent = getattr(extent, "value", None)
            if not isinstance(extent, int):
                return None
        inner *= extent
    return col[1] * nbytes // 16 % 8


def _first_row_chunk(offset, width: int, nbytes: int) -> int | None:
    """The 16-byte chunk (of its ``width``-byte row) where a 16x16 region at flat element
    offset ``offset`` (an expression) starts, when that is provably on the first row of a
    swizzle pattern (every term's coefficient a multiple of the period, ``8 * width``
    bytes, the constant's remainder a column of the first row, 16-byte aligned, the
    region within the row); None otherwise."""
    from polytile.schedule.passes.async_copy import linear_terms

    lin = linear_terms(offset)
    if lin is None:
        return None
    terms, const = lin
    period = 8 * width // nbytes
    col = const % period
    if not (all(k % period == 0 for k in terms.values()) and col + N <= width // nbytes
            and col * nbytes % 16 == 0):
        return None
    return col * nbytes // 16

# ------------------------------------------------------------------ cp.async (sm_80+)
# Asynchronous global -> shared copies (PTX ISA 9.7.9.25): the loop IR's meaning is in
# polytile.schedule.passes.async_copy. Below sm_80 they are ordinary 16-byte copies (and
# the group operations nothing), which keeps every schedule correct there.
_ASYNC_HELPERS = {
    "cp.async.cg.shared.global": ("cp_async_cg_shared_global", r"""__device__ __forceinline__ void cp_async_cg_shared_global(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}"""),
    "cp.async.cg.shared.global.zfill": ("cp_async_cg_shared_global_zfill", r"""__device__ __forceinline__ void cp_async_cg_shared_global_zfill(void* dst, const void* src, bool fill) {
  // src-size 16 copies, 0 reads nothing and writes 16 zero bytes (padding of a gather)
#if __CUDA_ARCH__ >= 800
  unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(a), "l"(src),
               "r"(fill ? 16 : 0) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = fill ? *reinterpret_cast<const uint4*>(src) : uint4{};
#endif
}"""),
    "cp.async.commit_group": ("cp_async_commit_group", r"""__device__ __forceinline__ void cp_async_commit_group() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}"""),
    "cp.async.wait_group": ("cp_async_wait_group", r"""__device__ __forceinline__ void cp_async_wait_group(int n) {
  // n is a constant at every call: the switch folds to one instruction
#if __CUDA_ARCH__ >= 800
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
#endif
}"""),
}
C_HELPERS.update(_ASYNC_HELPERS)

#: The C type of one fragment tile on the mma.sync path, by scope and dtype.
MMA_FRAGMENT_TYPES = {("wmma.matrix_a", "float16"): "pt_mma_a",
                      ("wmma.matrix_b", "float16"): "pt_mma_b",
                      ("wmma.matrix_a", "bfloat16"): "pt_mma_a_bf16",
                      ("wmma.matrix_b", "bfloat16"): "pt_mma_b_bf16",
                      ("wmma.accumulator", "float32"): "pt_mma_c_f32",
                      ("wmma.accumulator", "float16"): "pt_mma_c_f16"}


def mma_load_a(dtype: str = "float16") -> te.TensorIntrin:
    """``ldmatrix.x4`` of a 16x16 tile of A (row-major, shared memory) into registers."""
    return _mma_load("matrix_a", "mma.ldmatrix_x4:mma", dtype)


def mma_load_b(dtype: str = "float16") -> te.TensorIntrin:
    """``ldmatrix.x4.trans`` of a 16x16 tile of B (row-major k x n, shared memory)."""
    return _mma_load("matrix_b", "mma.ldmatrix_x4_trans:mma", dtype)


def _mma_load(use: str, call: str, dtype: str) -> te.TensorIntrin:
    a = te.placeholder((N, N), name="src", dtype=dtype)
    c = te.compute((N, N), lambda i, j: a[i, j], name="frag")
    binds = {a: tir.decl_buffer(a.shape, dtype, "src", strides=[te.var("ldm"), 1],
                                scope="shared")}

    def fcompute(ins, outs):
        # a swizzled shared tile (Stage.swizzle) is read by the helper that swizzles each
        # lane's address; the region's pointer stays logical
        mode = getattr(getattr(ins[0], "buffer", None), "swizzle", "none")
        name, _, tag = call.partition(":")
        if mode != "none":
            from .wgmma import SWIZZLE_ROW_BYTES

            width = SWIZZLE_ROW_BYTES[mode]
            nb = dt.nbytes(ins[0].dtype)
            if width > 128:
                c0 = _first_row_chunk_wide(ins[0].indices, ins[0].buffer.shape, width, nb)
            else:
                c0 = _first_row_chunk(ins[0].elem_offset, width, nb)
            if c0 is not None:
                return tir.call_intrin("void", f"{name}_sw{width}r:{tag}",
                                       outs[0].access_ptr("w"), ins[0].access_ptr("r"),
                                       _stride(ins[0]), te.const(c0, "uint32"))
            name = f"{name}_sw{width}"
        return tir.call_intrin("void", f"{name}:{tag}", outs[0].access_ptr("w"),
                               ins[0].access_ptr("r"), _stride(ins[0]))

    suffix = "" if dtype == "float16" else f"_{dtype}"
    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=f"mma_load_{use[-1]}{suffix}")


def mma_mma(dtype: str = "float16", acc: str = "float32") -> te.TensorIntrin:
    """Two ``mma.sync.aligned.m16n8k16`` per 16x16x16 tile, ``reset`` zeroing registers."""
    a = te.placeholder((N, N), name="a", dtype=dtype)
    b = te.placeholder((N, N), name="b", dtype=dtype)
    c = _matmul(a, b, acc, "c")

    def fcompute(ins, outs):
        fa, fb = ins
        fc = outs[0]
        update = tir.call_intrin("void", "mma.mma_sync_m16n8k16:mma", fc.access_ptr("w"),
                                 fa.access_ptr("r"), fb.access_ptr("r"), fc.access_ptr("r"))
        reset = tir.call_intrin("void", "mma.fill:mma", fc.access_ptr("w"), te.const(0, acc))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, name=f"mma_m16n8k16_{dtype}_{acc}")


def mma_store(acc: str = "float32") -> te.TensorIntrin:
    """Per-lane vector stores of a 16x16 accumulator tile (its m16n8 register layout)."""
    f = te.placeholder((N, N), name="frag", dtype=acc)
    c = te.compute((N, N), lambda i, j: f[i, j], name="dst")
    binds = {c: tir.decl_buffer(c.shape, acc, "dst", strides=[te.var("ldm"), 1])}

    def fcompute(ins, outs):
        return tir.call_intrin("void", "mma.store:mma", outs[0].access_ptr("w"),
                               ins[0].access_ptr("r"), _stride(outs[0]))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=f"mma_store_{acc}")


# ------------------------------------------------------------ wgmma (sm_90a, warpgroups)
# Declared in wgmma_intrin.py (the Hopper module's neighbour); re-exported here beside the
# WMMA and mma.sync intrinsics.
from .wgmma_intrin import (WGMMA_TYPES, c_helpers as _wgmma_helpers,  # noqa: E402
                           wgmma_gemm_compute, wgmma_gemm_schedule, wgmma_mma, wgmma_store)

C_HELPERS.update(_wgmma_helpers())

__all__ = ["C_HELPERS", "MMA_BEST", "WGMMA_TENSORIZE_BEST", "MMA_FRAGMENT_TYPES", "MMA_TYPES", "N", "WGMMA_TYPES", "k_tile",
           "ldmatrix_bank_ways", "mma_load_a", "mma_load_b", "mma_mma", "mma_store",
           "wgmma_gemm_compute", "wgmma_gemm_schedule", "wgmma_mma", "wgmma_store", "wmma_gemm",
           "wmma_load_a", "wmma_load_b", "wmma_mma", "wmma_store"]
