"""TMA bulk tensor copies and mbarriers (sm_90): the C helpers and the host's tensor maps,
shared by the generated GEMM (:mod:`.wgmma`) and the schedule language's TMA copies
(``Stage.pipeline(..., tma=True)``, :mod:`polytile.schedule.passes.tma_copy`).

* :data:`MBARRIER_C`: ``mbarrier`` helpers (PTX ISA, "Parallel Synchronization and
  Communication Instructions: mbarrier"): init, arrive, ``arrive.expect_tx``,
  ``try_wait.parity``.
* :data:`TMA_C`: the ``PtTensorMap`` parameter type (a 128-byte, 64-aligned opaque
  ``CUtensorMap``) and ``tma_load_2d`` (PTX ISA, "cp.async.bulk.tensor": a box of a 2-D
  tensor into shared memory, completing on an mbarrier by the bytes it writes).
* :data:`PIPELINE_C`: the calls of the schedule language's TMA copies (``tma.init``,
  ``tma.load_2d``, ``tma.wait``; one thread of the block issues, every thread waits).
* :func:`encode_tensor_map`: ``cuTensorMapEncodeTiled`` (CUDA driver API, "Tensor Map
  Object Management") of a row-major 2-D array; out-of-bounds elements of a box read as
  zero.
"""

from __future__ import annotations

#: byte width of a shared row of each swizzle mode, and the ``CUtensorMapSwizzle`` name
SWIZZLE_NAMES = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
                 "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}
#: ``CUtensorMapDataType`` of the element types a map may hold
DATA_TYPES = {"float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
              "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
              "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
              "int8": "CU_TENSOR_MAP_DATA_TYPE_UINT8", "uint8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
              "int32": "CU_TENSOR_MAP_DATA_TYPE_INT32"}
#: most elements of a box side (PTX ISA / driver API: ``boxDim[i] <= 256``)
MAX_BOX = 256

MBARRIER_C = r"""// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"):
// a 64-bit shared object with a pending-arrival count and a phase; try_wait.parity P
// returns true once the phase of parity P has completed (so on a fresh barrier, parity 1
// -- the phase "before" phase 0 -- counts as complete)
#ifndef PT_MBARRIER
#define PT_MBARRIER
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(a) : "memory");
}
__device__ __forceinline__ void mbarrier_wait_parity(unsigned long long* bar, unsigned parity) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
               "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n"
               "@!p bra WAIT_%=;\n}" :: "r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar,
                                                          unsigned bytes) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(a), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
#endif"""

TMA_C = r"""// TMA (PTX ISA "cp.async.bulk.tensor"): the tensor map is a 128-byte, 64-aligned opaque
// object built on the host (cuTensorMapEncodeTiled), passed as a __grid_constant__
// parameter and addressed generically; the copy completes on an mbarrier by
// complete_tx of its bytes, which the issuing thread announced with arrive.expect_tx
#ifndef PT_TMA
#define PT_TMA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "TMA copies (cp.async.bulk.tensor, mbarrier tx counts; Stage.pipeline(..., tma=True)) need sm_90 or later: build with target='cuda -arch=sm_90'"
#endif
struct alignas(64) PtTensorMap { unsigned long long opaque[16]; };
__device__ __forceinline__ void tma_load_2d(void* dst, const PtTensorMap* map, int c0, int c1,
                                            unsigned long long* bar) {
  unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(d), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1),
                  "r"(b) : "memory");
}
__device__ __forceinline__ bool pt_tma_leader() {
  // the block's first thread issues the copies (blockDim.y, .z > 1 allowed)
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}
#endif"""

#: the calls of :mod:`polytile.schedule.passes.tma_copy` (call name -> (C name, text))
PIPELINE_C = {
    "tma.init": ("pt_tma_init", r"""__device__ __forceinline__ void pt_tma_init(void* bar, int n, unsigned count) {
  // n mbarriers of `count` arrivals (one arrive.expect_tx per copy of a slot), made
  // visible to the async proxy; a barrier of the block follows
  if (pt_tma_leader()) {
    for (int i = 0; i < n; ++i) mbarrier_init((unsigned long long*)bar + i, count);
    fence_mbarrier_init();
  }
}"""),
    "tma.load_2d": ("pt_tma_load_2d", r"""__device__ __forceinline__ void pt_tma_load_2d(void* dst, const PtTensorMap* map, int c0, int c1,
                                               unsigned bytes, void* bar) {
  // box (c0, c1) of the map (c0 the innermost coordinate) into dst: the first thread
  // announces its bytes on bar and issues the copy
  if (pt_tma_leader()) {
    mbarrier_arrive_expect_tx((unsigned long long*)bar, bytes);
    tma_load_2d(dst, map, c0, c1, (unsigned long long*)bar);
  }
}"""),
    "tma.wait": ("pt_tma_wait", r"""__device__ __forceinline__ void pt_tma_wait(void* bar, unsigned parity) {
  // every thread: the phase of this parity has completed (its copies have landed)
  mbarrier_wait_parity((unsigned long long*)bar, parity);
}"""),
}


def encode_tensor_map(drv, ptr: int, dtype: str, rows: int, cols: int, box_rows: int,
                      box_cols: int, swizzle: str = "none", who: str = "tma"):
    """The ``CUtensorMap`` of a row-major ``[rows, cols]`` array of ``dtype`` at device
    address ``ptr`` (``drv``: cuda-python's driver module): dimensions ``(cols, rows)``
    innermost first, row stride ``cols * itemsize`` bytes, boxes ``(box_cols,
    box_rows)``, ``swizzle`` (``"none"``, ``"32B"``, ``"64B"``, ``"128B"``), no interleave,
    256-byte L2 promotion, out-of-bounds elements filled with zeros.

    Raises
    ------
    DeviceError
        When the driver refuses the encoding (via ``driver.check``; alignment of ``ptr``
        to 16 bytes, strides of multiples of 16 bytes, box sides of at most 256).
    """
    from polytile.te import dtype as dt

    from .driver import check

    return check(drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, DATA_TYPES[dtype]), 2, int(ptr),
        [drv.cuuint64_t(cols), drv.cuuint64_t(rows)],
        [drv.cuuint64_t(cols * dt.nbytes(dtype))],
        [drv.cuuint32_t(box_cols), drv.cuuint32_t(box_rows)],
        [drv.cuuint32_t(1), drv.cuuint32_t(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, SWIZZLE_NAMES[swizzle]),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled", who)


__all__ = ["DATA_TYPES", "MAX_BOX", "MBARRIER_C", "PIPELINE_C", "SWIZZLE_NAMES", "TMA_C",
           "encode_tensor_map"]
