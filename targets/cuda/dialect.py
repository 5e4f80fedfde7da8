"""The CUDA table of the C printer (:mod:`polytile.targets.c_printer`), a
:class:`~polytile.targets.c_dialect.GPUDialect`.

Only spellings live here: CUDA's headers, its bfloat16 type, its trap and fast math, and
the tensor-core helpers (:mod:`.tensor_core`); kernels, barriers, thread indices and half
precision are spelled as in every GPU dialect. The structure of the generated code is the
printer's.

Fixed-width integers: NVRTC has no ``<stdint.h>``, so under ``__CUDACC_RTC__`` the source
declares them itself (``int64_t`` is ``long long``, as on every CUDA platform); under nvcc it
includes the system header.
"""

from __future__ import annotations

from typing import ClassVar

from ..c_dialect import GPUDialect

_INT_TYPEDEFS = (
    "#ifdef __CUDACC_RTC__",
    "typedef signed char int8_t;",
    "typedef short int16_t;",
    "typedef int int32_t;",
    "typedef long long int64_t;",
    "typedef unsigned char uint8_t;",
    "typedef unsigned short uint16_t;",
    "typedef unsigned int uint32_t;",
    "typedef unsigned long long uint64_t;",
    "#else",
    "#include <stdint.h>",
    "#endif",
)

# -use_fast_math intrinsics (PTX ex2.approx/lg2.approx/sin.approx...), float32 only
_FAST_MATH = {"exp": "__expf", "log": "__logf", "log2": "__log2f", "log10": "__log10f",
              "sin": "__sinf", "cos": "__cosf", "pow": "__powf"}

# te.fast_exp: ``ex2.approx.ftz`` of ``x * log2(e)``, what ``__expf`` is under
# ``-use_fast_math``; without that flag ``__expf`` keeps denormal results through a compare
# and two predicated multiplies per call (8 SASS instructions against 3; the fused row
# kernels in float16 are issue-bound on them). Errors as ``__expf`` (CUDA C Programming
# Guide, table of intrinsic functions: 2 + floor(|1.173 x|) ulp); results below 2^-126
# flush to 0. Without ``__CUDA_ARCH__`` (a host compile of the source) it is ``expf``.
_FAST_EXP = """__device__ __forceinline__ float pt_fast_exp(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.44269504088896341f));
  return y;
#else
  return expf(x);
#endif
}"""


class CUDADialect(GPUDialect):
    """CUDA C++ as accepted by NVRTC and nvcc (sm_53 and newer for half arithmetic)."""

    name = "cuda"
    preamble: ClassVar[tuple] = _INT_TYPEDEFS
    dtype_headers: ClassVar[dict] = {"float16": "#include <cuda_fp16.h>",
                                     "bfloat16": "#include <cuda_bf16.h>"}
    trap = "__trap();"
    type_map: ClassVar[dict] = {**GPUDialect.type_map, "bfloat16": "__nv_bfloat16"}
    bfloat16_from_float = "__float2bfloat16_rn"
    bfloat16_to_float = "__bfloat162float"
    bfloat16_from_bits = "__ushort_as_bfloat16"
    math: ClassVar[dict] = {**GPUDialect.math,
                            "fast_exp": {"float32": "pt_fast_exp", "float64": "exp"}}
    math_helpers: ClassVar[dict] = {"pt_fast_exp": _FAST_EXP}
    # numpy's NaN-propagating maximum/minimum of float32 as one instruction on sm_80+
    # (PTX ``max.NaN``/``min.NaN``, "Floating Point Instructions: max"), instead of two
    # compares and a select: a softmax's row maximum costs one instruction an element
    helper_specializations: ClassVar[dict] = {
        f"pt_f{op}": ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
                      f"template <> __device__ __forceinline__ float pt_f{op}<float>(float a, "
                      f"float b) {{ float y; asm(\"{op}.NaN.f32 %0, %1, %2;\" : \"=f\"(y) : "
                      "\"f\"(a), \"f\"(b)); return y; }\n#endif")
        for op in ("max", "min")}
    fast_math: ClassVar[dict] = {name: {"float32": fn} for name, fn in _FAST_MATH.items()}
    fragment_headers: ClassVar[tuple] = ("#include <mma.h>",)

    def call_helper(self, name: str) -> tuple | None:
        """The WMMA and mma.sync helpers of :mod:`.tensor_core` (``C_HELPERS``)."""
        from .tensor_core import C_HELPERS, MMA_TYPES   # tensor_core builds on te/tir

        if name.startswith("tma."):   # TMA copies of pipelines (tma.py)
            from .tma import MBARRIER_C, PIPELINE_C, TMA_C

            fn, text = PIPELINE_C[name]
            return fn, text, {"_pt_mbarrier": MBARRIER_C, "_pt_tma": TMA_C}
        if name not in C_HELPERS:
            return None
        fn, text = C_HELPERS[name]
        if name.startswith("wgmma."):   # the warpgroup intrinsics (wgmma_intrin.py)
            from .tensor_core import WGMMA_TYPES

            return fn, text, {"_pt_wgmma_types": WGMMA_TYPES}
        return fn, text, ({"_pt_mma_types": MMA_TYPES} if name.startswith("mma.") else {})

    def fragment_type(self, b, body, who: str) -> str:
        """``nvcuda::wmma::fragment<...>`` or an mma.sync register tile
        (:func:`polytile.targets.c_printer.fragment_type`)."""
        from ..c_printer import fragment_type

        return fragment_type(b, body, self, who)
