"""Hopper ``wgmma.mma_async`` as tensor intrinsics for ``tensorize`` (sm_90a).

The schedule-language path to the warpgroup MMA of :mod:`polytile.targets.cuda.wgmma`
(whose generated kernel keeps TMA and warp specialization):

=================================  ==========================================================
``wgmma_mma(n, dtype, swizzle=``   ``c[64, n] += a[64, 16] b[n, 16]^T`` (float32
``"128B", asynchronous=True)``     accumulation), ``a``/``b`` K-major rows of shared
                                   buffers swizzled by ``Stage.swizzle``, read through
                                   descriptors of that mode; ``reset`` zeroes ``c``
``wgmma_mma(n, dtype, swizzle=``   ``c[64, n] += a[64, 16] B[16, n]`` with ``B[K, N]`` read
``"128B", b_major="mn")``          MN-major (``imm-trans-b = 1``): ``b[n / 64, 16, 64]``, the
                                   swizzled atoms of 64 columns of :func:`wgmma_nn_compute`
``wgmma_mma(n, dtype)``            the same over no-swizzle core matrices ``a[2, 64, 8]``,
                                   ``b[2, n, 8]`` (:func:`wgmma_gemm_compute`)
``wgmma_store(n)``                 ``out[64, n] = c[64, n]``: each thread of the warpgroup
                                   stores its registers (:func:`~.wgmma.d_fragment`)
=================================  ==========================================================

Swizzled operands (PTX ISA, "Shared Memory Matrix Layout", swizzling modes): a
``cache_read`` tile ``[rows, BK]`` whose rows are exactly the mode's width (``BK = 64``
float16 for 128B) with ``s[AS].swizzle("128B")``: chunk ``j`` of row ``r`` at ``j ^ r %
8`` (:func:`~.wgmma.swizzle_elements`, the layout of the generated kernel's
``a_offset_128b``). A k16 step is 32 bytes of a row: the descriptor's start is the
region's logical address, SBO the 8-row period, LBO unused. No-swizzle operands: a tile
stored as ``[k // 8, row, k % 8]``, each 8 x 8 core matrix 128 contiguous bytes (SBO 128
bytes, LBO the region's first stride).

The accumulator is a buffer of scope ``wgmma.accumulator``: a 64 x n float32 tile held by
the 128 threads of a warpgroup (``float[n / 2]`` each, C type ``pt_wgmma_acc<n>``). In
the loop IR it is, like WMMA fragments, a per-thread array holding the whole tile (what
the interpreter runs): stages that use it must not bind ``threadIdx.x``, whose 128 threads
(``blockDim.x == 128``) form the warpgroup that issues the collective instructions.

Synchronous calls fence (``fence.proxy.async``, ``wgmma.fence``), issue, commit and wait
(``wgmma.wait_group 0``). Asynchronous ones (:data:`WGMMA_GROUP`, a ``te.AsyncGroup``)
only issue: ``s[CF].pipeline(ko, stages=S, mma_wait=N)`` fences once per k tile before its
barrier, commits the tile's MMAs as one group and waits with ``wgmma.wait_group N``, so
they run while the next tile is awaited and issued. The C helpers (descriptor, fences,
commit/wait, the ``wgmma.mma_async`` asm) are those of :mod:`.wgmma`.
"""

from __future__ import annotations

from polytile import te, tir
from polytile.errors import BuildError, format_error
from polytile.te import dtype as dt

from .wgmma import (SWIZZLE, SWIZZLE_BYTES, WGMMA_CORE, _mma_helper, d_store_16b_c,
                    mma_helper_name)

#: rows of one warpgroup MMA (m64nNk16) and its k step
WG_M, WG_K = 64, 16
PTX = {"float16": "f16", "bfloat16": "bf16"}

#: the protocol of the asynchronous MMA (``wgmma_mma(..., asynchronous=True)``): a proxy
#: fence before the barrier that publishes the tiles, ``wgmma.fence`` before a group of
#: calls, ``wgmma.commit_group`` after it, ``wgmma.wait_group N``
WGMMA_GROUP = te.AsyncGroup(fence="wgmma.fence_proxy_async", begin="wgmma.fence",
                            commit="wgmma.commit_group", wait="wgmma.wait_group")

WGMMA_TYPES = r"""#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.mma_async needs sm_90a: build with target='cuda -arch=sm_90a'"
#endif
template <int N> struct pt_wgmma_acc { float r[N / 2]; };   // m64nN f32 D
__device__ __forceinline__ unsigned pt_wgmma_thread() {
  // the thread's rank in its warpgroup (blockDim.x is a multiple of 128)
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128u;
}
""" + WGMMA_CORE + r"""
__device__ __forceinline__ void wgmma_wait_group_n(int n) {
  // wgmma.wait_group takes an immediate: n is a constant at every call (folded)
  switch (n) {
    case 0: wgmma_wait_group<0>(); break;
    case 1: wgmma_wait_group<1>(); break;
    case 2: wgmma_wait_group<2>(); break;
    case 3: wgmma_wait_group<3>(); break;
    case 4: wgmma_wait_group<4>(); break;
    case 5: wgmma_wait_group<5>(); break;
    case 6: wgmma_wait_group<6>(); break;
    default: wgmma_wait_group<7>(); break;
  }
}"""


def _raw_helper(n: int, p: str, trans_b: int = 0) -> str:
    """:func:`~polytile.targets.cuda.wgmma._mma_helper` with B K-major (``trans_b=0``) or
    MN-major (1), guarded so that several wrappers of one shape can each carry it."""
    guard = f"PT_{mma_helper_name(n, p, trans_b).upper()}"
    return (f"#ifndef {guard}\n#define {guard}\n{_mma_helper(n, p, trans_b=trans_b)}\n"
            "#endif\n")


def _mma_helper_core(n: int, dtype: str) -> tuple[str, str]:
    p = PTX[dtype]
    ctype = {"float16": "half", "bfloat16": "__nv_bfloat16"}[dtype]
    name = f"wgmma_m64n{n}k16_{p}_core_sync"
    text = _raw_helper(n, p) + (
        f"__device__ __forceinline__ void {name}(pt_wgmma_acc<{n}>& d, const {ctype}* a, "
        f"int a_kstride, const {ctype}* b, int b_kstride) {{\n"
        "  // A and B K-major in no-swizzle core matrices [k / 8][row][k % 8]: LBO (K) = the\n"
        "  // k-group stride in bytes, SBO (M or N) = 128 bytes; D += A B, then waited for\n"
        "  fence_proxy_async_shared_cta();\n"
        "  wgmma_fence();\n"
        f"  {mma_helper_name(n, p, 0)}(d.r, wgmma_descriptor(a, 2u * a_kstride, 128u), "
        "wgmma_descriptor(b, 2u * b_kstride, 128u), 1);\n"
        "  wgmma_commit_group();\n"
        "  wgmma_wait_group<0>();\n}")
    return name, text


def _mma_helper_swizzled(n: int, dtype: str, mode: str, asynchronous: bool,
                         b_major: str = "k") -> tuple[str, str]:
    p = PTX[dtype]
    ctype = {"float16": "half", "bfloat16": "__nv_bfloat16"}[dtype]
    width = SWIZZLE_BYTES[mode]
    mn = b_major == "mn"
    name = (f"wgmma_m64n{n}k16_{p}_sw{width}{'_mn' if mn else ''}_"
            f"{'async' if asynchronous else 'sync'}")
    sync = ("" if asynchronous else "  fence_proxy_async_shared_cta();\n  wgmma_fence();\n")
    done = ("" if asynchronous else "  wgmma_commit_group();\n  wgmma_wait_group<0>();\n")
    how = ("issued only: the software pipeline groups and waits (te.AsyncGroup)"
           if asynchronous else "then waited for")
    a_desc = f"wgmma_descriptor(a, 16u, {8 * width}u, {SWIZZLE[mode]}u)"
    if mn:
        # B MN-major (wgmma.b_offset_128b): atoms of W-byte rows of n, one row per k, 8 rows
        # apart by SBO = 8 W bytes, the atoms (W bytes of n each) LBO = b_atom elements apart
        text = _raw_helper(n, p, 1) + (
            f"__device__ __forceinline__ void {name}(pt_wgmma_acc<{n}>& d, const {ctype}* a, "
            f"const {ctype}* b, int b_atom) {{\n"
            f"  // A K-major in {width}-byte rows swizzled {mode} (SBO = 8 rows); B MN-major\n"
            f"  // (imm-trans-b 1): {width}-byte rows of n per k swizzled {mode}, SBO = 8 rows,\n"
            f"  // LBO = the stride of the {width}-byte column atoms; D += A B, {how}\n"
            + sync +
            f"  {mma_helper_name(n, p, 1)}(d.r, {a_desc}, wgmma_descriptor(b, "
            f"{dt.nbytes(dtype)}u * b_atom, {8 * width}u, {SWIZZLE[mode]}u), 1);\n"
            + done + "}")
        return name, text
    text = _raw_helper(n, p) + (
        f"__device__ __forceinline__ void {name}(pt_wgmma_acc<{n}>& d, const {ctype}* a, "
        f"const {ctype}* b) {{\n"
        f"  // A and B K-major in {width}-byte rows swizzled {mode} (Stage.swizzle): SBO = 8\n"
        f"  // rows = {8 * width} bytes, LBO unused (k16 lies in one row); D += A B, {how}\n"
        + sync +
        f"  {mma_helper_name(n, p, 0)}(d.r, {a_desc}, wgmma_descriptor(b, 16u, {8 * width}u, "
        f"{SWIZZLE[mode]}u), 1);\n"
        + done + "}")
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


_STORE_16B_TEXT = r"""#ifndef PT_WGMMA_STORE_D16
#define PT_WGMMA_STORE_D16
template <int N, bool STREAM = false> __device__ __forceinline__ void wgmma_store_d16(float* dst, const pt_wgmma_acc<N>& d, int ldm) {
  // one float4 per 8-column chunk (wgmma.d_store_16b): lanes l and l ^ 1 trade halves
  // (__shfl_xor_sync 1), the even lane storing columns c .. c + 3 of row r, the odd lane
  // c - 2 .. c + 1 of row r + 8; 16-byte columns need ldm % 4 == 0 and a 16-byte dst
  unsigned t = pt_wgmma_thread(), l = t % 32;
  int row = 16 * (t / 32) + l / 4, col = 2 * (l % 4);
  bool odd = l & 1;
  if (ldm % 4 == 0 && reinterpret_cast<unsigned long long>(dst) % 16 == 0) {
""" + d_store_16b_c("dst", "ldm", "col", "d.r", "N / 8", [
    "if (STREAM) __stcs(reinterpret_cast<float4*>(out + 8 * j), v);   // st.global.cs",
    "else *reinterpret_cast<float4*>(out + 8 * j) = v;"], "    ") + r"""    return;
  }
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* p = dst + (row + 8 * h) * ldm + 8 * j + col;
      p[0] = d.r[4 * j + 2 * h];
      p[1] = d.r[4 * j + 2 * h + 1];
    }
}
#endif"""
_STORE_16B = ("wgmma_store_d16", _STORE_16B_TEXT)
_STORE_16B_STREAM = ("wgmma_store_d16s", _STORE_16B_TEXT + r"""
template <int N> __device__ __forceinline__ void wgmma_store_d16s(float* dst, const pt_wgmma_acc<N>& d, int ldm) {
  // the 16-byte epilogue with streaming stores (evict first: C is not read again)
  wgmma_store_d16<N, true>(dst, d, ldm);
}""")


def c_helpers() -> dict:
    """The helpers of the calls below (call name -> (C name, definition)), for
    ``tensor_core.C_HELPERS``; the MMA helpers, one per (n, dtype), are added when an
    intrinsic is declared (:func:`wgmma_mma`)."""
    return {"wgmma.fill": _FILL, "wgmma.store": _STORE, "wgmma.store16": _STORE_16B,
            "wgmma.store16s": _STORE_16B_STREAM,
            WGMMA_GROUP.fence: ("fence_proxy_async_shared_cta", ""),
            WGMMA_GROUP.begin: ("wgmma_fence", ""),
            WGMMA_GROUP.commit: ("wgmma_commit_group", ""),
            WGMMA_GROUP.wait: ("wgmma_wait_group_n", "")}


def _register(call: str, helper: tuple[str, str]) -> None:
    from .tensor_core import C_HELPERS

    C_HELPERS.setdefault(call, helper)


def _check_n(n: int, who: str) -> None:
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"{who}: n={n!r}; expected a multiple of 8 in 8..256 "
                         "(wgmma m64nNk16)")


def wgmma_mma(n: int, dtype: str = "float16", name: str = "", *, swizzle: str = "none",
              asynchronous: bool = False, b_major: str = "k") -> te.TensorIntrin:
    """One ``wgmma.mma_async.m64nNk16`` (float32 accumulation, operands ``dtype``,
    float16 or bfloat16, cast to float32) from shared memory into a ``wgmma.accumulator``
    tile ``c`` of 64 x ``n``; ``reset`` zeroes it.

    ``swizzle="none"``: ``c[i, j] = sum_{kb, kk} a[kb, i, kk] * b[kb, j, kk]`` over
    ``kb < 2``, ``kk < 8``, ``a`` and ``b`` in the K-major no-swizzle core-matrix layout
    (strides ``[s, 8, 1]``, any ``s``: the descriptor's LBO; :func:`wgmma_gemm_compute`).

    ``swizzle="128B"`` (or ``"64B"``, ``"32B"``): ``c[i, j] = sum_k a[i, k] * b[j, k]``
    over ``k < 16``, ``a[64, 16]`` and ``b[n, 16]`` regions of K-major rows of exactly
    ``W`` bytes (strides ``[W / 2, 1]``) of buffers swizzled the same way
    (``s[AS].swizzle(mode)`` on ``cache_read`` tiles of ``A[M, K]`` and ``Bt[N, K]``); the
    descriptors carry the mode, SBO = 8 rows, and the region's logical start address
    (the tensor cores apply the swizzle), which must begin an 8-row pattern.

    ``asynchronous=True`` (swizzled only): the ``update`` only issues the MMA (no
    ``wgmma.fence``, commit or wait of its own; :data:`WGMMA_GROUP`): the k loop must be
    pipelined with ``s[CF].pipeline(ko, stages=S, mma_wait=N)``, which groups each k
    tile's MMAs and waits with ``wgmma.wait_group N``. Synchronous calls fence, commit
    and wait for themselves.

    ``b_major="mn"`` (swizzled only): B is read MN-major (``imm-trans-b = 1``; PTX ISA
    "Shared Memory Matrix Layout", the canonical MN-major swizzled layout), from
    ``C = A @ B`` with ``B[K, N]`` as it is: ``c[i, j] = sum_k a[i, k] * b[j // E, k, j %
    E]`` with ``E = W / 2`` elements (64 float16 for 128B), ``b[n / E, 16, E]`` a region
    of *atoms* of ``E`` columns, rows of ``W`` bytes one per k (strides ``[s, E, 1]``,
    any ``s``, a multiple of 8 rows: the descriptor's LBO), e.g. the shared stage ``BR[N
    / E, K, E]`` of :func:`wgmma_nn_compute` swizzled by ``s[BR].swizzle(mode)`` (the
    layout of :func:`~polytile.targets.cuda.wgmma.b_offset_128b`); SBO = 8 rows. ``n``
    must be a multiple of ``E``. A stage reading ``B`` otherwise (``Bt[j, k]``, another
    layout) does not match and ``tensorize`` refuses it (ScheduleError).

    Raises
    ------
    ValueError
        ``n`` not a multiple of 8 in 8..256, another dtype or swizzle mode, or
        ``asynchronous`` without a swizzle; ``b_major`` not ``"k"`` or ``"mn"``, ``"mn"``
        without a swizzle or with ``n`` not a multiple of ``E``.
    BuildError
        When the code is generated (``build``, ``lower(stop_after=None)``) for regions
        whose buffer is not swizzled in the intrinsic's mode or whose rows are not ``W``
        bytes.
    """
    _check_n(n, "wgmma_mma")
    if dtype not in PTX:
        raise ValueError(f"wgmma_mma: dtype {dtype!r}; expected float16 or bfloat16")
    if swizzle != "none" and swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"wgmma_mma: swizzle {swizzle!r}; expected 'none' or one of "
                         f"{', '.join(SWIZZLE_BYTES)}")
    if asynchronous and swizzle == "none":
        raise ValueError("wgmma_mma: asynchronous=True needs a swizzled layout "
                         "(swizzle='128B', '64B' or '32B')")
    if b_major not in ("k", "mn"):
        raise ValueError(f"wgmma_mma: b_major {b_major!r}; expected 'k' or 'mn'")
    if b_major == "mn" and swizzle == "none":
        raise ValueError("wgmma_mma: b_major='mn' needs a swizzled layout (swizzle='128B', "
                         "'64B' or '32B')")
    if swizzle == "none":
        return _wgmma_mma_core(n, dtype, name)
    width = SWIZZLE_BYTES[swizzle]
    if b_major == "mn":
        return _wgmma_mma_mn(n, dtype, name, swizzle, asynchronous)
    a = te.placeholder((WG_M, WG_K), name="a", dtype=dtype)
    b = te.placeholder((n, WG_K), name="b", dtype=dtype)
    k = te.reduce_axis((0, WG_K), name="k")
    c = te.compute((WG_M, n), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k), name="c")
    binds = {a: tir.decl_buffer(a.shape, dtype, "a", strides=[te.var("sa"), 1],
                                scope="shared"),
             b: tir.decl_buffer(b.shape, dtype, "b", strides=[te.var("sb"), 1],
                                scope="shared"),
             c: tir.decl_buffer(c.shape, "float32", "c", scope="wgmma.accumulator")}
    flavour = "async" if asynchronous else "sync"
    call = f"wgmma.mma_async_m64n{n}k16_{PTX[dtype]}_sw{width}_{flavour}"
    _register(call, _mma_helper_swizzled(n, dtype, swizzle, asynchronous))
    iname = name or f"wgmma_m64n{n}k16_{dtype}_sw{width}" + ("_async" if asynchronous
                                                            else "")

    def fcompute(ins, outs):
        fa, fb = ins
        # (decl_tensor_intrin probes fcompute on unscoped buffers: nothing to check)
        for v in (fa, fb) if fa.scope == "shared" else ():
            row = v.strides[0] * dt.nbytes(dtype) if isinstance(v.strides[0], int) else None
            if v.buffer.swizzle != swizzle or row != width:
                raise _swizzle_error(iname, v, swizzle, width, row)
        return _mma_bodies(call, outs[0], fa.access_ptr("r"), fb.access_ptr("r"))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=iname,
                                 async_group=WGMMA_GROUP if asynchronous else None,
                                 layouts=_b_layouts("k", swizzle, dtype))


def _b_layouts(b_major: str, swizzle: str, dtype: str) -> dict:
    """``TensorIntrin.layouts`` of wgmma's ``b``: how an intrinsic of ``b_major`` reads B,
    and the fix for a stage whose B is in the other layout (the mixed-layout refusal of
    ``tensorize``)."""
    E = SWIZZLE_BYTES.get(swizzle, 16) // dt.nbytes(dtype)
    k_major = "K-major: b[n, 16], a row of k per column of C (Bt[N, K] = B^T, the " \
        "stage of wgmma_nt_compute)"
    mn_major = (f"MN-major: b[n / {E}, 16, {E}], atoms of {E} columns of B[K, N], a "
                "row per k (the stage BR of wgmma_nn_compute)")
    if b_major == "k":
        return {"b": (k_major, "for B[K, N] read as it is (MN-major), compute C with "
                      "wgmma_nn_compute(A, B) and tensorize with wgmma_mma(n, dtype, "
                      f"swizzle={swizzle!r}, b_major='mn') (schedule_wgmma_nn)")}
    return {"b": (mn_major, "for a K-major B (Bt[N, K], C = A @ Bt^T of wgmma_nt_compute) "
                  f"tensorize with wgmma_mma(n, dtype, swizzle={swizzle!r}, b_major='k') "
                  "(schedule_wgmma_nt)")}


def _mma_bodies(call: str, fc, *operands) -> tuple:
    """``(body, reset, update)`` of a wgmma tensor intrinsic: ``update`` calls ``call``
    on the accumulator ``fc`` and ``operands``, ``reset`` zero-fills the accumulator."""
    update = tir.call_intrin("void", call, fc.access_ptr("w"), *operands)
    reset = tir.call_intrin("void", "wgmma.fill", fc.access_ptr("w"), te.const(0, "float32"))
    ib = tir.ir_builder.create()
    ib.emit(reset)
    ib.emit(update)
    return ib.get(), reset, update


def _swizzle_error(iname: str, v, swizzle: str, width: int, row) -> BuildError:
    return BuildError(format_error(
        "tensorize", f"intrinsic {iname!r} reads {v.buffer.name!r} (swizzle "
        f"{v.buffer.swizzle}, rows of {row} bytes)", f"a buffer swizzled {swizzle} with rows "
        f"of {width} bytes", hint=f"s[{v.buffer.name.split('.')[0]}...].swizzle({swizzle!r}) "
        f"on the shared stage, its rows {width // dt.nbytes(v.buffer.dtype)} wide"))


def _wgmma_mma_mn(n: int, dtype: str, name: str, swizzle: str,
                  asynchronous: bool) -> te.TensorIntrin:
    """:func:`wgmma_mma` with ``b_major="mn"``: B read MN-major (``imm-trans-b = 1``)."""
    width = SWIZZLE_BYTES[swizzle]
    E = width // dt.nbytes(dtype)
    if n % E:
        raise ValueError(f"wgmma_mma: n={n} with b_major='mn' and swizzle {swizzle!r}; "
                         f"expected a multiple of {E} (B's atoms are {width}-byte rows)")
    a = te.placeholder((WG_M, WG_K), name="a", dtype=dtype)
    b = te.placeholder((n // E, WG_K, E), name="b", dtype=dtype)
    k = te.reduce_axis((0, WG_K), name="k")
    c = te.compute((WG_M, n), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j // E, k, j % E].astype("float32"), axis=k), name="c")
    binds = {a: tir.decl_buffer(a.shape, dtype, "a", strides=[te.var("sa"), 1],
                                scope="shared"),
             b: tir.decl_buffer(b.shape, dtype, "b", strides=[te.var("sl"), E, 1],
                                scope="shared"),
             c: tir.decl_buffer(c.shape, "float32", "c", scope="wgmma.accumulator")}
    flavour = "async" if asynchronous else "sync"
    call = f"wgmma.mma_async_m64n{n}k16_{PTX[dtype]}_sw{width}_mn_{flavour}"
    _register(call, _mma_helper_swizzled(n, dtype, swizzle, asynchronous, "mn"))
    iname = name or f"wgmma_m64n{n}k16_{dtype}_sw{width}_mn" + ("_async" if asynchronous
                                                               else "")

    def fcompute(ins, outs):
        fa, fb = ins
        if fa.scope == "shared":   # (the probe on unscoped buffers: nothing to check)
            nb = dt.nbytes(dtype)
            ra = fa.strides[0] * nb if isinstance(fa.strides[0], int) else None
            rb = fb.strides[1] * nb if isinstance(fb.strides[1], int) else None
            for v, row in ((fa, ra), (fb, rb)):
                if v.buffer.swizzle != swizzle or row != width:
                    raise _swizzle_error(iname, v, swizzle, width, row)
            sl = fb.strides[0]
            if n > E and not (isinstance(sl, int) and sl * nb % (8 * width) == 0):
                raise BuildError(format_error(
                    "tensorize", f"intrinsic {iname!r} reads atoms of {fb.buffer.name!r} "
                    f"{sl} elements apart", f"a multiple of 8 rows ({8 * width} bytes: the "
                    "swizzle pattern, LBO)", hint="a k tile of a multiple of 8"))
        return _mma_bodies(call, outs[0], fa.access_ptr("r"), fb.access_ptr("r"),
                           fb.strides[0])

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=iname,
                                 async_group=WGMMA_GROUP if asynchronous else None,
                                 layouts=_b_layouts("mn", swizzle, dtype))


def _wgmma_mma_core(n: int, dtype: str, name: str) -> te.TensorIntrin:
    """:func:`wgmma_mma` without swizzle: operands in no-swizzle core matrices."""
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
    _register(call, _mma_helper_core(n, dtype))
    iname = name or f"wgmma_m64n{n}k16_{dtype}"

    def fcompute(ins, outs):
        fa, fb = ins
        for v in (fa, fb):
            if v.buffer.swizzle != "none":
                raise BuildError(format_error(
                    "tensorize", f"intrinsic {iname!r} reads {v.buffer.name!r}, swizzled "
                    f"{v.buffer.swizzle}", "no-swizzle core matrices",
                    hint=f"wgmma_mma(n, dtype, swizzle={v.buffer.swizzle!r})"))
        fc = outs[0]
        update = tir.call_intrin("void", call, fc.access_ptr("w"), fa.access_ptr("r"),
                                 fa.strides[0], fb.access_ptr("r"), fb.strides[0])
        reset = tir.call_intrin("void", "wgmma.fill", fc.access_ptr("w"),
                                te.const(0, "float32"))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=iname)


def wgmma_store(n: int, name: str = "", *, epilogue: str = "8B") -> te.TensorIntrin:
    """``dst[64, n] = frag[64, n]`` from a ``wgmma.accumulator`` tile to a float32 region
    of any row stride. ``epilogue="8B"``: two float2 stores per thread and 8-column chunk
    (rows ``r`` and ``r + 8``) where 8-byte aligned; ``"16B"``: one float4 per chunk after
    a lane-pair ``__shfl_xor_sync`` (:func:`~polytile.targets.cuda.wgmma.d_store_16b`, the
    generated kernel's 16-byte epilogue; half the store instructions) where ``dst`` is
    16-byte aligned and the row stride a multiple of 4; ``"16B_stream"`` the same with
    streaming stores (``st.global.cs``, evict first: the output does not displace the
    operands in L2); all fall back to scalar stores otherwise (the check is made at run
    time, once per call).

    Raises
    ------
    ValueError
        ``n`` not a multiple of 8 in 8..256, or another ``epilogue``.
    """
    _check_n(n, "wgmma_store")
    calls = {"8B": "wgmma.store", "16B": "wgmma.store16", "16B_stream": "wgmma.store16s"}
    if epilogue not in calls:
        raise ValueError(f"wgmma_store: epilogue {epilogue!r}; expected one of "
                         f"{', '.join(calls)}")
    call = calls[epilogue]
    f = te.placeholder((WG_M, n), name="frag", dtype="float32")
    c = te.compute((WG_M, n), lambda i, j: f[i, j], name="dst")
    binds = {f: tir.decl_buffer(f.shape, "float32", "frag", scope="wgmma.accumulator"),
             c: tir.decl_buffer(c.shape, "float32", "dst", strides=[te.var("ldm"), 1])}

    def fcompute(ins, outs):
        return tir.call_intrin("void", call, outs[0].access_ptr("w"),
                               ins[0].access_ptr("r"), outs[0].strides[0])

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name or (
        f"wgmma_store_{n}" + {"8B": "", "16B": "_16b", "16B_stream": "_16bs"}[epilogue]))


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


def wgmma_gemm_schedule(M: int, N: int, K: int, *, block=(128, 128, 64), stages: int = 4,
                        dtype: str = "float16", swizzle: str = "auto", mma_wait="auto",
                        b_major: str = "k", group: int = 1, epilogue: str = "8B",
                        copy_after_wait: bool = False):
    """A hand schedule of ``C = A @ Bt^T`` (``A[M, K]``, ``Bt[N, K]``, float16/bfloat16 in,
    float32 out) through ``tensorize`` with :func:`wgmma_mma` and :func:`wgmma_store`: the
    ``cp.async`` main loop of :func:`~polytile.targets.cuda.wgmma.gemm_source` written in
    the schedule language. Blocks of ``block = (BM, BN, BK)`` (``blockIdx.y``,
    ``blockIdx.x``), one warpgroup per 64 rows (``threadIdx.y``), 128 threads
    (``threadIdx.x``) copying the k tiles into shared memory with 16-byte ``cp.async``.

    ``swizzle`` (``"auto"``: the mode whose row width is ``BK`` elements, ``"128B"`` for
    ``BK = 64`` in float16; ``"none"``): ``cache_read`` tiles ``[BM, BK]`` of ``A`` and
    ``[BN, BK]`` of ``Bt`` with ``s[AS].swizzle(mode)``, copied along whole global rows
    (coalesced), read by :func:`wgmma_mma` descriptors of that mode. ``"none"``: the
    restaged core-matrix compute of :func:`wgmma_gemm_compute`, synchronous MMAs.

    ``stages > 1`` pipelines the k-tile loop (``s[CF].pipeline``); ``mma_wait``
    (``"auto"``: 1 when ``stages >= 3``, 0 for 2, synchronous MMAs for 1; with a swizzle)
    keeps that many k tiles' MMA groups in flight (``wgmma.wait_group``) while the next
    tile is awaited and issued. Build for ``cuda -arch=sm_90a``. What the generated
    kernel (:class:`~polytile.targets.cuda.wgmma.WgmmaGemm`) adds: warp specialization,
    TMA, persistent tile order.

    ``b_major="mn"`` (with a swizzle): ``C = A @ B`` with ``B[K, N]`` read MN-major
    (:func:`wgmma_nn_compute`, :func:`schedule_wgmma_nn`; ``BN`` and ``N`` multiples of
    the swizzle row's elements), no transposed copy of ``B``.

    ``group > 1`` launches the blocks ``group`` tile rows at a time down each tile column
    (Triton's ``GROUP_M``, :func:`~polytile.targets.gpu_tiling.warp_tiles`): the blocks
    of one wave share the row panels of ``A`` and the column panels of ``B`` in L2. It
    must divide ``M / BM``. ``epilogue``: the stores of :func:`wgmma_store` (``"8B"``
    float2, ``"16B"`` float4 after a lane-pair shuffle). ``copy_after_wait`` (with
    ``mma_wait``): ``s[CF].pipeline(..., copy_after_wait=True)``, each k tile's copies
    issued after its MMA wait and a second barrier, ``stages - mma_wait`` tiles ahead
    (instead of ``stages - 1 - mma_wait``).

    Returns
    -------
    (Schedule, [A, Bt, C]), or (Schedule, [A, B, C]) with ``b_major="mn"``

    Raises
    ------
    ValueError
        ``BM`` not a multiple of 64, ``BN`` not a multiple of 8 in 8..256, ``BK`` not a
        multiple of 16, a swizzle whose row is not ``BK`` elements, ``mma_wait`` outside
        ``0..stages - 2``, a ``group`` that is not a positive divisor of ``M / BM``
        (sizes the tiles do not divide are refused when lowered, by ``tensorize``).
    """
    from polytile.schedule import create_schedule

    BM, BN, BK = block
    if BM % WG_M or BK % WG_K:
        raise ValueError(f"wgmma_gemm_schedule: block {block}; expected BM a multiple of 64 "
                         "and BK of 16")
    _check_n(BN, "wgmma_gemm_schedule")
    if swizzle == "auto":
        swizzle = next((m for m, w in SWIZZLE_BYTES.items() if w == BK * 2), "none")
    if b_major not in ("k", "mn"):
        raise ValueError(f"wgmma_gemm_schedule: b_major {b_major!r}; expected 'k' or 'mn'")
    if not (isinstance(group, int) and group >= 1 and (M // BM) % group == 0):
        raise ValueError(f"wgmma_gemm_schedule: group={group!r} with {M // BM} tile rows; "
                         "expected a positive divisor of M / BM")
    if swizzle == "none":
        if b_major == "mn":
            raise ValueError("wgmma_gemm_schedule: b_major='mn' needs a swizzle (BK of 16, "
                             "32 or 64 float16)")
        return _core_schedule(M, N, K, block, stages, dtype, group, epilogue)
    if SWIZZLE_BYTES.get(swizzle) != BK * 2:
        raise ValueError(f"wgmma_gemm_schedule: swizzle {swizzle!r} with BK={BK}; expected "
                         "the mode whose rows are BK elements (128B: 64, 64B: 32, 32B: 16) "
                         "or 'none'")
    if K <= BK:
        stages = 1     # one k tile: no loop to pipeline (nor to group MMAs over)
    if mma_wait == "auto":
        mma_wait = None if stages < 2 else min(stages - 2, 1)
    if mma_wait is not None and not (isinstance(mma_wait, int) and 0 <= mma_wait <= stages - 2):
        raise ValueError(f"wgmma_gemm_schedule: mma_wait={mma_wait!r} with stages={stages}; "
                         "expected None or an int in 0..stages - 2")
    A = te.placeholder((M, K), name="A", dtype=dtype)
    if b_major == "mn":
        B = te.placeholder((K, N), name="B", dtype=dtype)
        BR, C = wgmma_nn_compute(A, B, swizzle)
        s = create_schedule(C.op)
        schedule_wgmma_nn(s, C, A, BR, block, stages, swizzle, mma_wait, group=group,
                          epilogue=epilogue, copy_after_wait=copy_after_wait)
        return s, [A, B, C]
    Bt = te.placeholder((N, K), name="Bt", dtype=dtype)
    C = wgmma_nt_compute(A, Bt)
    s = create_schedule(C.op)
    schedule_wgmma_nt(s, C, A, Bt, block, stages, swizzle, mma_wait, group=group,
                      epilogue=epilogue, copy_after_wait=copy_after_wait)
    return s, [A, Bt, C]


def wgmma_nt_compute(A: te.Tensor, Bt: te.Tensor) -> te.Tensor:
    """``C[M, N] = sum_k A[i, k] * Bt[j, k]`` in float32 (``A[M, K]``, ``Bt[N, K]`` float16
    or bfloat16, placeholders or computed tensors): the compute the swizzled
    :func:`wgmma_mma` matches."""
    k = te.reduce_axis((0, A.shape[1]), name="k")
    return te.compute((A.shape[0], Bt.shape[0]), lambda i, j: te.sum(
        A[i, k].astype("float32") * Bt[j, k].astype("float32"), axis=k), name="C")


def schedule_wgmma_nt(s, C: te.Tensor, A: te.Tensor, Bt: te.Tensor, block, stages: int,
                      swizzle: str, mma_wait, *, group: int = 1,
                      epilogue: str = "8B", copy_after_wait: bool = False) -> None:
    """Schedule ``C = wgmma_nt_compute(A, Bt)`` in ``s`` as :func:`wgmma_gemm_schedule`
    does with a swizzle (arguments checked there): swizzled ``cache_read`` tiles of both
    operands, ``wgmma_mma`` tensorized, the k loop pipelined, blocks in groups of
    ``group`` tile rows, the stores of :func:`wgmma_store` ``epilogue``, the copies after
    the MMA wait with ``copy_after_wait``."""
    CF = s.cache_write(C, "wgmma.accumulator")
    BS = s.cache_read(Bt, "shared", [CF])
    _schedule_swizzled(s, C, CF, A, BS, block, stages, swizzle, mma_wait, "k", group,
                       epilogue, copy_after_wait)


def wgmma_nn_compute(A: te.Tensor, B: te.Tensor, swizzle: str = "128B") -> tuple:
    """``C[M, N] = sum_k A[i, k] * B[k, j]`` in float32 (``A[M, K]``, ``B[K, N]`` float16
    or bfloat16) written for :func:`wgmma_mma` with ``b_major="mn"``: ``BR[N / E, K, E] =
    B[k, a E + c]`` restages ``B`` in atoms of ``E`` columns (``E`` the elements of one
    ``swizzle`` row, 64 float16 for 128B; the MN-major layout of
    :func:`~polytile.targets.cuda.wgmma.b_offset_128b` once swizzled), ``C[i, j] = sum_k
    A[i, k] * BR[j // E, k, j % E]``. Returns ``(BR, C)``; ``BR`` is meant to be a shared
    stage (:func:`schedule_wgmma_nn`).

    Raises
    ------
    ValueError
        ``N`` not a multiple of ``E``, or an unknown swizzle mode.
    """
    if swizzle not in SWIZZLE_BYTES:
        raise ValueError(f"wgmma_nn_compute: swizzle {swizzle!r}; expected one of "
                         f"{', '.join(SWIZZLE_BYTES)}")
    E = SWIZZLE_BYTES[swizzle] // dt.nbytes(B.dtype)
    (K, N) = (int(B.shape[0]), int(B.shape[1]))
    if N % E:
        raise ValueError(f"wgmma_nn_compute: N={N}; expected a multiple of {E} (the "
                         f"{swizzle} atoms of B)")
    BR = te.compute((N // E, K, E), lambda a, k, c: B[k, a * E + c], name="BR")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((A.shape[0], N), lambda i, j: te.sum(
        A[i, k].astype("float32") * BR[j // E, k, j % E].astype("float32"), axis=k), name="C")
    return BR, C


def schedule_wgmma_nn(s, C: te.Tensor, A: te.Tensor, BR: te.Tensor, block, stages: int,
                      swizzle: str, mma_wait, *, group: int = 1,
                      epilogue: str = "8B", copy_after_wait: bool = False) -> None:
    """Schedule ``(BR, C) = wgmma_nn_compute(A, B, swizzle)`` in ``s`` as
    :func:`schedule_wgmma_nt` does, ``B`` read MN-major: ``BR`` is the shared stage of
    ``B`` (swizzled, copied along B's rows), :func:`wgmma_mma` with ``b_major="mn"``."""
    CF = s.cache_write(C, "wgmma.accumulator")
    s[BR].set_scope("shared")
    _schedule_swizzled(s, C, CF, A, BR, block, stages, swizzle, mma_wait, "mn", group,
                       epilogue, copy_after_wait)


def _schedule_swizzled(s, C, CF, A, BS, block, stages: int, swizzle: str, mma_wait,
                       b_major: str, group: int = 1, epilogue: str = "8B",
                       copy_after_wait: bool = False) -> None:
    BM, BN, BK = block
    AS = s.cache_read(A, "shared", [CF])
    wi = _blocks(s, C, BM, BN, group, epilogue)
    s[CF].compute_at(s[C], wi)
    ci, cj = CF.op.axis
    ko, ki = s[CF].split(CF.op.reduce_axis[0], factor=BK)
    kf, kk = s[CF].split(ki, factor=WG_K)
    s[CF].reorder(ko, kf, ci, cj, kk)
    s[CF].unroll(kf)     # BK / 16 MMAs issued back to back
    s[CF].tensorize(ci, wgmma_mma(BN, A.dtype, swizzle=swizzle,
                                  asynchronous=mma_wait is not None, b_major=b_major))
    if stages > 1:
        s[CF].pipeline(ko, stages=stages, mma_wait=mma_wait,
                       copy_after_wait=copy_after_wait and mma_wait is not None)
    for S in (AS, BS):
        s[S].compute_at(s[CF], ko)
        s[S].swizzle(swizzle)
        _copy_threads(s, S, BM)


def _blocks(s, C, BM: int, BN: int, group: int = 1, epilogue: str = "8B"):
    """Blocks of ``BM x BN`` over ``C`` (``group > 1``: ``group`` tile rows fused under
    the tile column on ``blockIdx.x``, as ``gpu_tiling.warp_tiles``) and one warpgroup
    per 64 rows (``threadIdx.y``), the store tensorized; returns the warpgroup loop."""
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    wi, ii = s[C].split(ii, factor=WG_M)
    s[C].reorder(bi, bj, wi, ii, jj)
    if group > 1:
        bo, bii = s[C].split(bi, factor=group)
        s[C].reorder(bo, bj, bii)
        s[C].bind(bo, te.thread_axis("blockIdx.y"))
        s[C].bind(s[C].fuse(bj, bii), te.thread_axis("blockIdx.x"))
    else:
        s[C].bind(bi, te.thread_axis("blockIdx.y"))
        s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(wi, te.thread_axis("threadIdx.y"))
    s[C].tensorize(ii, wgmma_store(BN, epilogue=epilogue))
    return wi


def _copy_threads(s, S, BM: int) -> None:
    """16-byte vectors (``cp.async``) of ``S``'s tile, consecutive over its rows, spread
    over the ``128 x BM / 64`` threads."""
    f = s[S].fuse(*S.op.axis)
    f, v = s[S].split(f, factor=8)          # 16 bytes: cp.async
    f, tx = s[S].split(f, factor=128)
    f, ty = s[S].split(f, factor=BM // WG_M)
    s[S].bind(tx, te.thread_axis("threadIdx.x"))
    s[S].bind(ty, te.thread_axis("threadIdx.y"))
    s[S].vectorize(v)
    s[S].unroll(f)


def _core_schedule(M, N, K, block, stages, dtype, group=1, epilogue="8B"):
    """:func:`wgmma_gemm_schedule` with ``swizzle="none"``: the core-matrix compute of
    :func:`wgmma_gemm_compute`, synchronous MMAs."""
    from polytile.schedule import create_schedule

    BM, BN, BK = block
    A, Bt, AS, BS, C = wgmma_gemm_compute(M, N, K, dtype)
    s = create_schedule(C.op)
    CF = s.cache_write(C, "wgmma.accumulator")
    wi = _blocks(s, C, BM, BN, group, epilogue)
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
        _copy_threads(s, S, BM)
    return s, [A, Bt, C]


__all__ = ["WGMMA_GROUP", "WGMMA_TYPES", "c_helpers", "wgmma_mma", "wgmma_store", "wgmma_gemm_compute",
           "wgmma_gemm_schedule", "wgmma_nn_compute", "schedule_wgmma_nn"]
