"""The base table of the C printer: what a C dialect may spell differently.

:class:`CDialect` lists, as class attributes, every spelling the printer
(:mod:`polytile.targets.c_printer`) asks a dialect for: kernel prefix and launch bounds,
``restrict``, shared-memory and barrier syntax, hardware index names, the type map, half
conversions and the math functions per dtype. :class:`GPUDialect` holds what the GPU
dialects share (CUDA and HIP spell kernels, shared memory, barriers and hardware indices
alike); ``targets/cuda/dialect.py`` and ``targets/hip/dialect.py`` subclass it and override
tables only; the structure of the generated code is the printer's.
Device limits (threads per block, shared memory) are not spellings: they come from the
target's :class:`~polytile.backend.DeviceLimits`. ``name`` is the kind of the backend the
dialect belongs to.
"""

from __future__ import annotations

from typing import ClassVar

from polytile.errors import BuildError, format_error

#: identifiers the printer never uses for IR names
CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t
class compl const constexpr const_cast continue decltype default delete do double
dynamic_cast else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using
virtual void volatile wchar_t while xor xor_eq restrict main""".split())


class CDialect:
    """The table of one C dialect. Subclasses override class attributes only.

    Math functions: ``math[name][dtype]`` is a C function name or a format string with
    ``{0}``, ``{1}`` for the arguments; a ``float16`` entry missing from the table is
    computed in ``float32`` and rounded back. ``fast_math`` entries replace ``math`` ones
    under a ``-fast-math`` target.
    """

    name = "c"
    #: lines at the top of every source
    preamble: ClassVar[tuple] = ()
    #: include lines added when a dtype appears (``{"float16": "#include <cuda_fp16.h>"}``)
    dtype_headers: ClassVar[dict] = {}
    kernel_prefix = "void"
    #: text between the return type and the name; ``{threads}`` is the block size
    launch_bounds = ""
    restrict = ""
    shared_prefix = ""
    shared_align = ""
    local_prefix = ""
    #: declaration of the dynamic shared-memory array; ``{name}`` its identifier
    dynamic_shared_decl = ""
    barrier = ""
    #: how a failed run-time check stops a kernel
    trap = "abort();"
    #: print contiguous aligned vectorized copies as one float4/int4 load and store
    vector_copies = False
    device_inline = "static inline"
    #: integer bit counts: (name, 32 or 64) -> builtin on an unsigned (popcount) or signed
    #: (clz) operand of that width; empty where the dialect has none
    int_bit_fns: ClassVar[dict] = {}
    #: inline helper name (``pt_fmax``...) -> text appended to its generic definition
    #: (explicit specializations using the target's own instructions)
    helper_specializations: ClassVar[dict] = {}
    #: hardware index tag -> C expression
    index_names: ClassVar[dict] = {}
    #: dtype -> C type in registers (``bool`` is stored as ``memory_types["bool"]``)
    type_map: ClassVar[dict] = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
                "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
                "uint32": "uint32_t", "uint64": "uint64_t", "float32": "float",
                "float64": "double"}
    memory_types: ClassVar[dict] = {"bool": "uint8_t"}
    #: float16 conversions: C function names
    half_from_float = ""
    half_to_float = ""
    half_from_double = ""
    half_from_int64 = ""
    half_from_uint64 = ""
    half_from_bits = ""
    #: bfloat16 conversions (the only bfloat16 operations left after
    #: ``passes.bfloat16``): from float rounding to nearest even, to float, from the
    #: ``unsigned short`` bit pattern; empty where the dialect has no bfloat16
    bfloat16_from_float = ""
    bfloat16_to_float = ""
    bfloat16_from_bits = ""
    float_from_bits = ""
    double_from_bits = ""
    math: ClassVar[dict] = {
        "exp": {"float32": "expf", "float64": "exp"},
        "exp2": {"float32": "exp2f", "float64": "exp2"},
        "log": {"float32": "logf", "float64": "log"},
        "log2": {"float32": "log2f", "float64": "log2"},
        "log10": {"float32": "log10f", "float64": "log10"},
        "sqrt": {"float32": "sqrtf", "float64": "sqrt"},
        "rsqrt": {"float32": "rsqrtf", "float64": "rsqrt"},
        "tanh": {"float32": "tanhf", "float64": "tanh"},
        "erf": {"float32": "erff", "float64": "erf"},
        "sin": {"float32": "sinf", "float64": "sin"},
        "cos": {"float32": "cosf", "float64": "cos"},
        "floor": {"float32": "floorf", "float64": "floor"},
        "ceil": {"float32": "ceilf", "float64": "ceil"},
        "round": {"float32": "rintf", "float64": "rint"},  # half to even
        "trunc": {"float32": "truncf", "float64": "trunc"},
        "abs": {"float32": "fabsf", "float64": "fabs"},
        "pow": {"float32": "powf", "float64": "pow"},
        "fmod": {"float32": "fmodf", "float64": "fmod"},
        "isnan": {"float32": "isnan", "float64": "isnan"},
        "isinf": {"float32": "isinf", "float64": "isinf"},
        "isfinite": {"float32": "isfinite", "float64": "isfinite"},
        **{name: {"float32": name + "f", "float64": name} for name in (
            "tan", "asin", "acos", "atan", "sinh", "cosh", "log1p", "expm1", "atan2", "hypot",
            "copysign")},
        # TVM's fast variants: plain C has none, CUDA overrides fast_exp
        "fast_exp": {"float32": "expf", "float64": "exp"},
        "fast_tanh": {"float32": "tanhf", "float64": "tanh"},
        "fast_erf": {"float32": "erff", "float64": "erf"},
        "sigmoid": {"float32": "(1.0f / (1.0f + {exp}(-{0})))",
                    "float64": "(1.0 / (1.0 + {exp}(-{0})))"},
    }
    fast_math: ClassVar[dict] = {}
    #: math functions the dialect defines itself: C name -> its definition (added to the
    #: source once, where a kernel calls it)
    math_helpers: ClassVar[dict] = {}

    # ------------------------------------------------------------------ derived
    def ctype(self, dtype: str) -> str:
        """C type of a value of ``dtype`` in registers."""
        try:
            return self.type_map[dtype]
        except KeyError:
            raise BuildError(format_error(f"codegen_{self.name}", f"dtype {dtype!r} has no "
                                          f"{self.name} type", "expected one of "
                                          f"{', '.join(self.type_map)}")) from None

    def mem_type(self, dtype: str) -> str:
        """C type of an element of a buffer of ``dtype``."""
        return self.memory_types.get(dtype) or self.ctype(dtype)

    def math_fn(self, name: str, dtype: str, fast: bool) -> str | None:
        """The math table entry for ``name`` on ``dtype`` (None when absent)."""
        if fast and dtype in self.fast_math.get(name, {}):
            return self.fast_math[name][dtype]
        return self.math.get(name, {}).get(dtype)

    # ------------------------------------------------------------------ tensor intrinsics
    def call_helper(self, name: str) -> tuple | None:
        """The helper of intrinsic call ``name`` (``tir.call_intrin``'s name without its
        ``:tag``): ``(C function name, its definition, {key: prelude text} the definition
        needs)``, or None for a plain function call. The printer defines each once."""
        return None

    def fragment_type(self, b, body, who: str) -> str:
        """The C type of one tile of fragment buffer ``b`` (a scope of
        ``kinds.FRAGMENT_TILES``), given the statement ``body`` that uses it.

        Raises
        ------
        BuildError
            Where the dialect has no such fragments.
        """
        raise BuildError(format_error(who, f"fragment {b.name!r} of scope {b.scope!r}",
                                      f"no {b.scope} fragments in {self.name}"))

    #: lines added to the top of a source that declares fragments
    fragment_headers: ClassVar[tuple] = ()


#: half precision math functions of ``cuda_fp16.h`` and ``hip_fp16.h`` (the same names in
#: both); the functions missing here compute in float32 and round back
HALF_MATH = {"exp": "hexp", "exp2": "hexp2", "log": "hlog", "log2": "hlog2",
             "log10": "hlog10", "sqrt": "hsqrt", "rsqrt": "hrsqrt", "sin": "hsin",
             "cos": "hcos", "floor": "hfloor", "ceil": "hceil", "round": "hrint",
             "trunc": "htrunc", "abs": "__habs", "isnan": "__hisnan"}


class GPUDialect(CDialect):
    """What CUDA C++ and HIP C++ share: ``extern "C" __global__`` kernels with
    ``__launch_bounds__``, ``__restrict__``, ``__shared__`` memory (an NVIDIA SM's shared
    memory, an AMD CU's LDS) and ``__syncthreads()``, ``blockIdx``/``threadIdx`` as
    hardware indices, ``__device__`` helpers, ``float4``-style vector copies and the half
    precision function names (``__float2half_rn``, ``hexp``...). Subclasses give the
    headers, the bfloat16 spellings, ``trap`` and their fast math."""

    kernel_prefix = 'extern "C" __global__'
    launch_bounds = "__launch_bounds__({threads})"
    restrict = "__restrict__"
    shared_prefix = "__shared__"
    shared_align = "__align__(16)"
    dynamic_shared_decl = "extern __shared__ __align__(16) unsigned char {name}[];"
    barrier = "__syncthreads();"
    vector_copies = True
    device_inline = "__device__ __forceinline__"
    # CUDA's and HIP's integer intrinsics; __clz(0) is 32, __clzll(0) 64, as LLVM's ctlz
    int_bit_fns: ClassVar[dict] = {("popcount", 32): "__popc", ("popcount", 64): "__popcll",
                                   ("clz", 32): "__clz", ("clz", 64): "__clzll"}
    index_names: ClassVar[dict] = {f"{k}.{a}": f"{k}.{a}" for k in ("blockIdx", "threadIdx")
                                   for a in "xyz"}
    type_map: ClassVar[dict] = {**CDialect.type_map, "float16": "half"}
    half_from_float = "__float2half_rn"
    half_to_float = "__half2float"
    half_from_double = "__double2half"
    half_from_int64 = "__ll2half_rn"
    half_from_uint64 = "__ull2half_rn"
    half_from_bits = "__ushort_as_half"
    float_from_bits = "__int_as_float"
    double_from_bits = "__longlong_as_double"
    math: ClassVar[dict] = {name: ({**fns, "float16": HALF_MATH[name]} if name in HALF_MATH
                                   else fns) for name, fns in CDialect.math.items()}
