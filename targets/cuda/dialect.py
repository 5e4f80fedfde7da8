"""The CUDA table of the C printer (:mod:`polytile.targets.c_printer`), a
:class:`~polytile.targets.c_dialect.CDialect`.

Only spellings live here: what CUDA calls a kernel, a barrier, a thread index, a half
precision number and its math functions. The structure of the generated code is the
printer's.

Fixed-width integers: NVRTC has no ``<stdint.h>``, so under ``__CUDACC_RTC__`` the source
declares them itself (``int64_t`` is ``long long``, as on every CUDA platform); under nvcc it
includes the system header.
"""

from __future__ import annotations

from typing import ClassVar

from ..c_dialect import CDialect

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

# half precision functions of cuda_fp16.h; the others compute in float and round back
_HALF_MATH = {"exp": "hexp", "exp2": "hexp2", "log": "hlog", "log2": "hlog2",
              "log10": "hlog10", "sqrt": "hsqrt", "rsqrt": "hrsqrt", "sin": "hsin",
              "cos": "hcos", "floor": "hfloor", "ceil": "hceil", "round": "hrint",
              "trunc": "htrunc", "abs": "__habs", "isnan": "__hisnan"}

# -use_fast_math intrinsics (PTX ex2.approx/lg2.approx/sin.approx...), float32 only
_FAST_MATH = {"exp": "__expf", "log": "__logf", "log2": "__log2f", "log10": "__log10f",
              "sin": "__sinf", "cos": "__cosf", "pow": "__powf"}


class CUDADialect(CDialect):
    """CUDA C++ as accepted by NVRTC and nvcc (sm_53 and newer for half arithmetic)."""

    name = "cuda"
    preamble: ClassVar[tuple] = _INT_TYPEDEFS
    dtype_headers: ClassVar[dict] = {"float16": "#include <cuda_fp16.h>",
                     "bfloat16": "#include <cuda_bf16.h>"}
    kernel_prefix = 'extern "C" __global__'
    launch_bounds = "__launch_bounds__({threads})"
    restrict = "__restrict__"
    shared_prefix = "__shared__"
    shared_align = "__align__(16)"
    dynamic_shared_decl = "extern __shared__ __align__(16) unsigned char {name}[];"
    barrier = "__syncthreads();"
    vector_copies = True
    trap = "__trap();"
    device_inline = "__device__ __forceinline__"
    index_names: ClassVar[dict] = {f"{k}.{a}": f"{k}.{a}" for k in ("blockIdx", "threadIdx")
                   for a in "xyz"}
    type_map: ClassVar[dict] = {**CDialect.type_map, "float16": "half", "bfloat16": "__nv_bfloat16"}
    half_from_float = "__float2half_rn"
    half_to_float = "__half2float"
    half_from_double = "__double2half"
    half_from_int64 = "__ll2half_rn"
    half_from_uint64 = "__ull2half_rn"
    half_from_bits = "__ushort_as_half"
    bfloat16_from_float = "__float2bfloat16_rn"
    bfloat16_to_float = "__bfloat162float"
    bfloat16_from_bits = "__ushort_as_bfloat16"
    float_from_bits = "__int_as_float"
    double_from_bits = "__longlong_as_double"
    math: ClassVar[dict] = {name: ({**fns, "float16": _HALF_MATH[name]} if name in _HALF_MATH else fns)
            for name, fns in CDialect.math.items()}
    math["fast_exp"] = {"float32": "__expf", "float64": "exp"}
    fast_math: ClassVar[dict] = {name: {"float32": fn} for name, fn in _FAST_MATH.items()}
