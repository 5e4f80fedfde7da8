"""The HIP table of the C printer (:mod:`polytile.targets.c_printer`), a
:class:`~polytile.targets.c_dialect.GPUDialect`.

HIP C++ spells kernels, ``__shared__`` memory (the LDS of an AMD compute unit),
``__syncthreads()``, the hardware indices and the half precision functions as CUDA does, so
only the differences live here: the headers (``hip/hip_runtime.h``, ``hip/hip_fp16.h``),
the trap, AMD's fast math (``__expf``... lower to the native ``v_exp_f32``/``v_log_f32``
instructions), bfloat16 and the MFMA helpers (:mod:`.mfma`).

bfloat16 is kept as its bit pattern (``unsigned short``) with two conversion functions of
our own (round to nearest even, NaN kept quiet): ``hip/hip_bf16.h`` exists only from ROCm
6 on (Debian 12's ROCm 5.2 has the older ``hip_bfloat16.h`` class), and the bfloat16 MFMA
builtins take the bit patterns (``short`` vectors) anyway.
"""

from __future__ import annotations

from typing import ClassVar

from ..c_dialect import GPUDialect

_PREAMBLE = (
    "#include <hip/hip_runtime.h>",
    "#ifndef __HIPCC_RTC__",
    "#include <stdint.h>",
    "#endif",
)

_BF16 = r"""// bfloat16 as its bit pattern: hip_bf16.h is not in every ROCm (module doc)
typedef unsigned short pt_bf16;
__device__ __forceinline__ float pt_bf16_to_float(pt_bf16 x) {
  return __uint_as_float((unsigned)x << 16);
}
__device__ __forceinline__ pt_bf16 pt_bf16_from_float(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (pt_bf16)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (pt_bf16)(u >> 16);
}
__device__ __forceinline__ pt_bf16 pt_bf16_from_bits(unsigned short b) { return b; }"""

# native AMD instructions (v_exp_f32, v_log_f32, v_sin_f32...) through the OCML wrappers
# HIP names after CUDA's fast intrinsics; float32 only
_FAST_MATH = {"exp": "__expf", "log": "__logf", "log2": "__log2f", "log10": "__log10f",
              "sin": "__sinf", "cos": "__cosf", "pow": "__powf"}


class HIPDialect(GPUDialect):
    """HIP C++ for AMD GPUs as accepted by hipcc (clang ``-x hip``) and hiprtc."""

    name = "hip"
    preamble: ClassVar[tuple] = _PREAMBLE
    dtype_headers: ClassVar[dict] = {"float16": "#include <hip/hip_fp16.h>", "bfloat16": _BF16}
    trap = "__builtin_trap();"
    type_map: ClassVar[dict] = {**GPUDialect.type_map, "bfloat16": "pt_bf16"}
    bfloat16_from_float = "pt_bf16_from_float"
    bfloat16_to_float = "pt_bf16_to_float"
    bfloat16_from_bits = "pt_bf16_from_bits"
    math: ClassVar[dict] = {**GPUDialect.math,
                            "fast_exp": {"float32": "__expf", "float64": "exp"}}
    fast_math: ClassVar[dict] = {name: {"float32": fn} for name, fn in _FAST_MATH.items()}

    def call_helper(self, name: str) -> tuple | None:
        """The MFMA helpers of :mod:`.mfma` (``mfma.*`` calls)."""
        from .mfma import c_helper   # mfma builds on te/tir

        return c_helper(name)

    def fragment_type(self, b, body, who: str) -> str:
        """The register tile of an MFMA accumulator (:func:`.mfma.fragment_type`)."""
        from .mfma import fragment_type

        return fragment_type(b, who)
