"""Hopper ``wgmma.mma_async`` as tensor intrinsics for ``tensorize`` (sm_90a).

The schedule-language path to the warpgroup MMA of :mod:`polytile.targets.cuda.wgmma`
(whose generated kernel stays the fast path):

=========================  ==================================================================
``wgmma_mma(n, dtype)``    ``c[64, n] += a[64, 16] b[16, n]`` (float32 accumulation), A and B
                           read from shared memory through matrix descriptors; ``reset``
                           zeroes the accumulator
``wgmma_store(n)``         ``out[64, n] = c[64, n]``: each thread of the warpgroup stores its
                           registers (:func:`~polytile.targets.cuda.wgmma.d_fragment`)
=========================  ==================================================================

Operand layout (PTX ISA, "Shared Memory Matrix Layout", no swizzle, both operands
K-major): a shared tile is stored as ``[k // 8, row, k % 8]``, so that each 8 x 8 *core
matrix* (8 rows of 16 bytes) is 128 contiguous bytes. The intrinsic's operands are
therefore 3-D, ``a[2, 64, 8]`` and ``b[2, n, 8]`` (the two 8-wide k halves of a k16 step),
and a GEMM that tensorizes to it reads its operands through stages of that shape
(:func:`wgmma_gemm_schedule`): core matrices adjacent in M (or N) are 128 bytes apart
(SBO), those adjacent in K one k-group stride apart (LBO = the region's first stride x
2 bytes). B is K-major, so the schedule's GEMM is ``C = A @ Bt^T`` with ``Bt[N, K]``
(both operands copied by 16-byte ``cp.async`` from row-major global rows).

The accumulator is a buffer of scope ``wgmma.accumulator``: a 64 x n float32 tile held by
the 128 threads of a warpgroup (``float[n / 2]`` each, C type ``pt_wgmma_acc<n>``). In
the loop IR it is, like WMMA fragments, a per-thread array holding the whole tile (what
the interpreter runs): stages that use it must not bind ``threadIdx.x``, whose 128 threads
(``blockDim.x == 128``) form the warpgroup that issues the collective instructions.

Each MMA call is synchronous: ``fence.proxy.async`` (the tiles were written through the
generic proxy: ``cp.async`` or stores), ``wgmma.fence``, one ``wgmma.mma_async``,
``wgmma.commit_group``, ``wgmma.wait_group 0``. The generated kernel overlaps MMAs with
copies across stages; this path does not.
"""

from __future__ import annotations

from polytile import te, tir

#: rows of one warpgroup MMA (m64nNk16) and its k step
WG_M, WG_K = 64, 16
PTX = {"float16": "f16", "bfloat16": "bf16"}

WGMMA_TYPES = r"""#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.mma_async needs sm_90a: build with target='cuda -arch=sm_90a'"
#endif
template <int N> struct pt_wgmma_acc { float r[N / 2]; };   // m64nN f32 D
__device__ __forceinline__ unsigned pt_wgmma_thread() {
  // the thread's rank in its warpgroup (blockDim.x is a multiple of 128)
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128u;
}
__device__ __forceinline__ unsigned long long pt_wgmma_desc(const void* p, unsigned lbo,
                                                            unsigned sbo) {
  // PTX ISA "Matrix Descriptor", no swizzle: start >> 4 (bits 0-13), LBO >> 4 (16-29),
  // SBO >> 4 (32-45)
  unsigned long long a = (unsigned)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32);
}"""


def _mma_helper(n: int, dtype: str) -> tuple[str, str]:
    p = PTX[dtype]
    ctype = {"float16": "half", "bfloat16": "__nv_bfloat16"}[dtype]
    name = f"wgmma_mma_async_m64n{n}k16_f32_{p}_kk"
    regs = n // 2
    outs = ", ".join(f'"+f"(d.r[{i}])' for i in range(regs))
    dlist = ", ".join(f"%{i}" for i in range(regs))
    text = (
        f"__device__ __forceinline__ void {name}(pt_wgmma_acc<{n}>& d, const {ctype}* a, "
        f"int a_kstride, const {ctype}* b, int b_kstride) {{\n"
        "  // A and B K-major in no-swizzle core matrices [k / 8][row][k % 8]: LBO (K) = the\n"
        "  // k-group stride in bytes, SBO (M or N) = 128 bytes; D += A B, then waited for\n"
        "  unsigned long long da = pt_wgmma_desc(a, 2u * a_kstride, 128u);\n"
        "  unsigned long long db = pt_wgmma_desc(b, 2u * b_kstride, 128u);\n"
        "  asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n"
        "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
        "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + str(regs + 2) + ", 0;\\n\"\n"
        f"    \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{p}.{p} "
        f"{{{dlist}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, 0;\\n}}\\n\"\n"
        f"    : {outs}\n"
        "    : \"l\"(da), \"l\"(db), \"r\"(1) : \"memory\");\n"
        "  asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
        "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n}")
    return name, text


_FILL = ("wgmma_fill", r"""template <int N> __device__ __forceinline__ void wgmma_fill(pt_wgmma_acc<N>& d, float v) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d.r[i] = v;
}""")

_STORE = ("wgmma_store_d", r"""template <int N> __device__ __forceinline__ void wgmma_store_d(float* dst, const pt_wgmma_acc<N>& d, int ldm) {
  // register 4j + r of thread t: row 16 (t / 32) + (t % 32) / 4 + 8 (r / 2), column
  // 8 j + 2 (t % 4) + r % 2 (PTX ISA "wgmma .m64nNk16 register fragments", D; d_fragment)
  unsigned t = pt_wgmma_thread(), l = t % 32;
  int row = 16 * (t / 32) + l / 4, col = 2 * (l % 4);
  bool wide = ldm % 2 == 0 && reinterpret_cast<unsigned long long>(dst) % 8 == 0;
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* p = dst + (row + 8 * h) * ldm + 8 * j + col;
      if (wide) {
        *reinterpret_cast<float2*>(p) = make_float2(d.r[4 * j + 2 * h], d.r[4 * j + 2 * h + 1]);
      } else {
        p[0] = d.r[4 * j + 2 * h];
        p[1] = d.r[4 * j + 2 * h + 1];
      }
    }
}""")


def c_helpers() -> dict:
    """The helpers of the calls below (call name -> (C name, definition)), for
    ``tensor_core.C_HELPERS``; the MMA helpers, one per (n, dtype), are added when an
    intrinsic is declared (:func:`wgmma_mma`)."""
    return {"wgmma.fill": _FILL, "wgmma.store": _STORE}


def _register(call: str, helper: tuple[str, str]) -> None:
    from .tensor_core import C_HELPERS

    C_HELPERS.setdefault(call, helper)


def _check_n(n: int, who: str) -> None:
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"{who}: n={n!r}; expected a multiple of 8 in 8..256 "
                         "(wgmma m64nNk16)")


def wgmma_mma(n: int, dtype: str = "float16", name: str = "") -> te.TensorIntrin:
    """``c[i, j] = sum_{kb, kk} a[kb, i, kk] * b[kb, j, kk]`` over ``i < 64``, ``j < n``,
    ``kb < 2``, ``kk < 8`` (one ``wgmma.mma_async.m64nNk16``, float32 accumulation),
    operands ``dtype`` (float16 or bfloat16) cast to float32. ``a`` and ``b`` are shared
    regions in the K-major core-matrix layout (strides ``[s, 8, 1]``, any ``s``: the
    descriptor's LBO); ``c`` is a ``wgmma.accumulator`` tile of 64 x ``n``.

    Raises
    ------
    ValueError
        ``n`` not a multiple of 8 in 8..256, or another dtype.
    """
    _check_n(n, "wgmma_mma")
    if dtype not in PTX:
        raise ValueError(f"wgmma_mma: dtype {dtype!r}; expected float16 or bfloat16")
    a = te.placeholder((2, WG_M, 8), name="a", dtype=dtype)
    b = te.placeholder((2, n, 8), name="b", dtype=dtype)
    kb = te.reduce_axis((0, 2), name="kb")
    kk = te.reduce_axis((0, 8), name="kk")
    c = te.compute((WG_M, n), lambda i, j: te.sum(
        a[kb, i, kk].astype("float32") * b[kb, j, kk].astype("float32"), axis=[kb, kk]),
        name="c")
    binds = {a: tir.decl_buffer(a.shape, dtype, "a", strides=[te.var("sa"), 8, 1],
                                scope="shared"),
             b: tir.decl_buffer(b.shape, dtype, "b", strides=[te.var("sb"), 8, 1],
                                scope="shared"),
             c: tir.decl_buffer(c.shape, "float32", "c", scope="wgmma.accumulator")}
    call = f"wgmma.mma_async_m64n{n}k16_{PTX[dtype]}"
    _register(call, _mma_helper(n, dtype))

    def fcompute(ins, outs):
        fa, fb = ins
        fc = outs[0]
        update = tir.call_intrin("void", call, fc.access_ptr("w"), fa.access_ptr("r"),
                                 fa.strides[0], fb.access_ptr("r"), fb.strides[0])
        reset = tir.call_intrin("void", "wgmma.fill", fc.access_ptr("w"),
                                te.const(0, "float32"))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=name or f"wgmma_m64n{n}k16_{dtype}")


def wgmma_store(n: int, name: str = "") -> te.TensorIntrin:
    """``dst[64, n] = frag[64, n]`` from a ``wgmma.accumulator`` tile to a float32 region
    of any row stride (float2 stores where aligned).

    Raises
    ------
    ValueError
        ``n`` not a multiple of 8 in 8..256.
    """
    _check_n(n, "wgmma_store")
    f = te.placeholder((WG_M, n), name="frag", dtype="float32")
    c = te.compute((WG_M, n), lambda i, j: f[i, j], name="dst")
    binds = {f: tir.decl_buffer(f.shape, "float32", "frag", scope="wgmma.accumulator"),
             c: tir.decl_buffer(c.shape, "float32", "dst", strides=[te.var("ldm"), 1])}

    def fcompute(ins, outs):
        return tir.call_intrin("void", "wgmma.store", outs[0].access_ptr("w"),
                               ins[0].access_ptr("r"), outs[0].strides[0])

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name or f"wgmma_store_{n}")


def wgmma_gemm_compute(M: int, N: int, K: int, dtype: str = "float16"):
    """The GEMM ``C[M, N] = A[M, K] @ Bt[N, K]^T`` (float32) written for the warpgroup
    intrinsics: ``AS[K / 8, M, 8]`` and ``BS[K / 8, N, 8]`` restage A and Bt in the
    K-major core-matrix layout, ``C[i, j] = sum_{kb, kk} AS[kb, i, kk] * BS[kb, j, kk]``.
    Returns ``(A, Bt, AS, BS, C)``.

    Raises
    ------
    ValueError
        ``K`` not a multiple of 8 (a core matrix is 8 elements of k wide).
    """
    if K % 8:
        raise ValueError(f"wgmma_gemm_compute: K={K}; expected a multiple of 8")
    A = te.placeholder((M, K), name="A", dtype=dtype)
    Bt = te.placeholder((N, K), name="Bt", dtype=dtype)
    AS = te.compute((K // 8, M, 8), lambda kb, m, kk: A[m, kb * 8 + kk], name="AS")
    BS = te.compute((K // 8, N, 8), lambda kb, n, kk: Bt[n, kb * 8 + kk], name="BS")
    kb = te.reduce_axis((0, K // 8), name="kb")
    kk = te.reduce_axis((0, 8), name="kk")
    C = te.compute((M, N), lambda i, j: te.sum(
        AS[kb, i, kk].astype("float32") * BS[kb, j, kk].astype("float32"), axis=[kb, kk]),
        name="C")
    return A, Bt, AS, BS, C


def wgmma_gemm_schedule(M: int, N: int, K: int, *, block=(128, 128, 64), stages: int = 1,
                        dtype: str = "float16"):
    """A hand schedule of ``C = A @ Bt^T`` (:func:`wgmma_gemm_compute`; float16/bfloat16
    in, float32 out) through ``tensorize`` with :func:`wgmma_mma` and :func:`wgmma_store`:
    the synchronous ``cp.async`` main loop of :func:`~polytile.targets.cuda.wgmma.
    gemm_source` written in the schedule language. Blocks of ``block = (BM, BN, BK)``
    (``blockIdx.y``, ``blockIdx.x``), one warpgroup per 64 rows (``threadIdx.y``), 128
    threads (``threadIdx.x``) copying the k tiles of ``AS``/``BS`` into shared memory with
    16-byte ``cp.async``; ``stages > 1`` pipelines the k-tile loop
    (``s[CF].pipeline``). Build for ``cuda -arch=sm_90a``. The generated kernel
    (:class:`~polytile.targets.cuda.wgmma.WgmmaGemm`) remains the fast path: this one
    waits for each MMA and has no warp specialization or TMA.

    Returns
    -------
    (Schedule, [A, Bt, C])

    Raises
    ------
    ValueError
        ``BM`` not a multiple of 64, ``BN`` not a multiple of 8 in 8..256, ``BK`` not a
        multiple of 16 (sizes the tiles do not divide are refused when lowered, by
        ``tensorize``).
    """
    from polytile.schedule import create_schedule

    BM, BN, BK = block
    if BM % WG_M or BK % WG_K:
        raise ValueError(f"wgmma_gemm_schedule: block {block}; expected BM a multiple of 64 "
                         "and BK of 16")
    _check_n(BN, "wgmma_gemm_schedule")
    A, Bt, AS, BS, C = wgmma_gemm_compute(M, N, K, dtype)
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    wi, ii = s[C].split(ii, factor=WG_M)
    s[C].reorder(bi, bj, wi, ii, jj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.y"))
    s[C].tensorize(ii, wgmma_store(BN))
    s[CF].compute_at(s[C], wi)
    ci, cj = CF.op.axis
    ckb, ckk = CF.op.reduce_axis
    ko, kbi = s[CF].split(ckb, factor=BK // 8)
    kf, kb2 = s[CF].split(kbi, factor=2)
    s[CF].reorder(ko, kf, ci, cj, kb2, ckk)
    s[CF].tensorize(ci, wgmma_mma(BN, dtype))
    if stages > 1:
        s[CF].pipeline(ko, stages=stages)
    for S in (AS, BS):
        s[S].set_scope("shared")
        s[S].compute_at(s[CF], ko)
        f = s[S].fuse(*S.op.axis)
        f, v = s[S].split(f, factor=8)          # 16 bytes: cp.async
        f, tx = s[S].split(f, factor=128)
        f, ty = s[S].split(f, factor=BM // WG_M)
        s[S].bind(tx, te.thread_axis("threadIdx.x"))
        s[S].bind(ty, te.thread_axis("threadIdx.y"))
        s[S].vectorize(v)
    return s, [A, Bt, C]


__all__ = ["WGMMA_TYPES", "c_helpers", "wgmma_mma", "wgmma_store", "wgmma_gemm_compute",
           "wgmma_gemm_schedule"]
