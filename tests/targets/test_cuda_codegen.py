"""CUDA backend without a GPU: the C printer, the CUDA table, NVRTC/nvcc compilation, the
cubin cache and ``build(target="cuda")``.

Every source printed here is compiled with this machine's ``nvcc -arch=sm_90 -cubin
-Werror all-warnings`` (skipped when nvcc is absent): a warning such as "variable is used
before its value is set" fails the test. :func:`compile_with_nvcc` (defined in
``tests/helpers.py``, importable from here too) is what other GPU tests call.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import compile_with_nvcc  # one copy for every GPU test; offered here too
from cuda_ir_helpers import (TX, Case, all_cases, buf, c64, case_big_shared, case_half,
                             case_intdiv, case_math, case_ops, case_row_sum, case_transpose,
                             case_two_kernels, case_vadd, const, launch, ld, lt, st)

import polytile
from polytile.errors import (BuildError, DeviceNotFoundError, InternalError, LoweringError,
                             TargetError)
from polytile.schedule.loop_ir import (Allocate, For, IfThenElse, KernelLaunch, LetStmt,
                                       PrimFunc, Store, Sync, seq)
from polytile.targets import Target
from polytile.targets.c_printer import print_c_module
from polytile.targets.cuda import CUDADialect, CUDAModule, compile_cuda
from polytile.targets.cuda import compile as cc
from polytile.targets.cuda.runtime import device_count
from polytile.te.expr import Binary, Call, Cast, Const, Var

CASES = all_cases()


def src(case_or_func, fast: bool = False) -> str:
    f = case_or_func.func if isinstance(case_or_func, Case) else case_or_func
    return print_c_module(f, CUDADialect(), fast_math=fast).source


def body_of(source: str) -> str:
    """The source after the preamble (from the first kernel on)."""
    return source[source.index('extern "C"'):]


# ----------------------------------------------------------------------------- every case
@pytest.mark.parametrize("name", sorted(CASES))
def test_case_prints_deterministically_and_compiles_with_nvcc(name):
    s1 = src(CASES[name])
    # a structurally identical function built again prints the same text (names do not
    # depend on object identities)
    s2 = src(all_cases()[name])
    assert s1 == s2 == src(CASES[name])
    assert s1.startswith(f"// polytile: cuda source of function '{CASES[name].func.name}'")
    assert '#ifdef __CUDACC_RTC__\ntypedef signed char int8_t;' in s1
    assert 'extern "C" __global__ void __launch_bounds__(' in s1
    compile_with_nvcc(s1)


def test_vadd_source():
    s = src(case_vadd())
    assert "__launch_bounds__(256) vadd_kernel0(" in s
    assert "const float* __restrict__ A" in s and "float* __restrict__ C" in s
    assert "const float* __restrict__ C" not in s
    assert "const int64_t blockIdx_x = (int64_t)blockIdx.x;" in s
    assert "const int64_t threadIdx_x = (int64_t)threadIdx.x;" in s
    assert "const int64_t i = (blockIdx_x * 256LL) + threadIdx_x;" in s
    assert "  if (i < 1000LL) {\n    C[i] = A[i] + B[i];\n  }" in s
    assert "cuda_fp16" not in s and "pt_min" not in s  # only what is used
    m = print_c_module(case_vadd().func, CUDADialect())
    (k,) = m.kernels
    assert (k.name, k.grid, k.block, k.threads, k.dynamic_shared_bytes) == \
        ("vadd_kernel0", (4, 1, 1), (256, 1, 1), 256, 0)
    assert [p.name for p in k.params] == ["A", "B", "C"] and m.workspace == ()


def test_transpose_uses_shared_memory_and_a_barrier():
    s = body_of(src(case_transpose()))
    assert "__shared__ __align__(16) float tile[272];" in s
    assert s.count("__syncthreads();") == 1
    assert s.index("tile[(threadIdx_y * 17LL) + threadIdx_x] = ") < s.index("__syncthreads")
    # two distinct variables named x: the second is renamed, not redeclared
    assert "const int64_t x = " in s and "const int64_t x_1 = " in s
    assert "__launch_bounds__(256)" in s


def test_row_sum_local_accumulator_and_tree_reduction():
    s = body_of(src(case_row_sum()))
    assert "__shared__ __align__(16) float red[128];" in s
    assert "  float acc[1];\n  acc[0LL] = 0.0f;" in s
    assert "for (int64_t j = threadIdx_x; j < threadIdx_x + (1000LL - threadIdx_x); " \
           "j += 128) {" in s
    assert "#pragma unroll\n  for (int64_t k = 0LL; k < 7LL; ++k) {" in s
    assert "const int64_t s = 64LL >> k;" in s
    assert s.count("__syncthreads();") == 2


def test_float16_types_constants_and_conversions():
    s = src(case_half())
    assert "#include <cuda_fp16.h>" in s
    assert "const half* __restrict__ A" in s and "half* __restrict__ H" in s
    assert "H[i] = (A[i] * A[i]) + (A[i] * __float2half_rn(1.5f));" in s
    assert "F[i] = __half2float(A[i]) * 2.0f;" in s


def test_floordiv_goes_through_the_shared_helper():
    s = body_of(src(case_intdiv(dtype="int32")))
    assert "//" not in s.replace("// ", "")  # no floor division operator left
    # a constant positive divisor: q - (r < 0); negative: select on r > 0
    assert "(I32" not in s
    assert "(A[i] / 4) - ((int32_t)((A[i] % 4) < 0))" in s
    assert "((A[i] % (-3)) > 0) ? ((A[i] % (-3)) + (-3)) : (A[i] % (-3))" in s
    assert "fmodf(Af[i], Bf[i])" in s
    s64 = body_of(src(case_intdiv(dtype="int64")))
    assert "(A[i] / 4LL) - ((int64_t)((A[i] % 4LL) < 0LL))" in s64


@pytest.mark.parametrize("dtype,expected", [
    ("float32", ["expf(", "exp2f(", "logf(", "log2f(", "log10f(", "sqrtf(", "rsqrtf(",
                 "tanhf(", "erff(", "sinf(", "cosf(", "floorf(", "ceilf(", "rintf(",
                 "truncf(", "fabsf(", "powf(", "fmodf(", "isnan(",
                 "= 1.0f / (1.0f + expf(-(S[i])));"]),
    ("float64", ["exp(", "exp2(", "log(", "log10(", "sqrt(", "rsqrt(", "tanh(", "erf(",
                 "rint(", "fabs(", "pow(", "fmod(", "= 1.0 / (1.0 + exp(-(S[i])));"]),
    ("float16", ["hexp(", "hexp2(", "hlog(", "hsqrt(", "hrsqrt(", "hrint(", "__habs(",
                 "__hisnan(", "__float2half_rn(tanhf(__half2float(S[i])))",
                 "__float2half_rn(erff(__half2float(S[i])))",
                 "__float2half_rn(powf(__half2float(P[i]), __half2float(S[i])))",
                 "__float2half_rn(1.0f / (1.0f + expf(-(__half2float(S[i])))))"]),
])
def test_math_intrinsics_per_dtype(dtype, expected):
    s = body_of(src(case_math(dtype=dtype)))
    for e in expected:
        assert e in s, e
    assert "__expf" not in s


def test_fast_math_uses_the_fast_intrinsics_and_compiles():
    case = case_math(dtype="float32")
    s = body_of(src(case, fast=True))
    for e in ("__expf(", "__logf(", "__log2f(", "__log10f(", "__sinf(", "__cosf(",
              "__powf(", "= 1.0f / (1.0f + __expf(-(S[i])));"):
        assert e in s, e
    assert "sqrtf(" in s and "tanhf(" in s  # no fast variant: unchanged
    compile_with_nvcc(src(case, fast=True))


def test_ops_wraparound_helpers_bools_and_lazy_select():
    s = src(case_ops())
    assert "template <typename T> __device__ __forceinline__ T pt_min(T a, T b) " \
           "{ return a < b ? a : b; }" in s
    b = body_of(s)
    assert "W8[i] = (int8_t)(X8[i] + Y8[i]);" in b
    assert "M16[i] = (uint16_t)((uint32_t)U16[i] * (uint32_t)U16[i]);" in b
    assert "pt_min<int32_t>(I32[i], 7)" in b and "pt_max<int32_t>(I32[i], -7)" in b
    assert "pt_abs<int32_t>(I32[i])" in b
    assert "SEL[i] = ((i + 1LL) < 77LL) ? F[i + 1LL] : (-1.0f);" in b  # lazy ternary
    assert "const uint8_t* __restrict__ Bo" in b and "uint8_t* __restrict__ BOUT" in b
    assert "BOUT[i] = (uint8_t)((F[i] > 0.0f) && (!(Bo[i] != 0)));" in b
    assert "H[i] = __ll2half_rn((long long)(I32[i]));" in b
    assert "(int32_t)(F[i] * 3.0f)" in b


def test_two_kernels_share_a_workspace_buffer():
    m = print_c_module(case_two_kernels().func, CUDADialect())
    assert [k.name for k in m.kernels] == ["scale_kernel0", "shift_kernel1"]
    (T,) = m.workspace
    assert T.name == "T" and T.scope == "global"
    assert [p.name for p in m.kernels[0].params] == ["A", "T"]
    assert [p.name for p in m.kernels[1].params] == ["B", "T"]
    assert "float* __restrict__ T" in m.source and "const float* __restrict__ T" in m.source
    assert m.source.index("scale_kernel0") < m.source.index("shift_kernel1")


def test_large_shared_buffers_use_dynamic_shared_memory():
    m = print_c_module(case_big_shared().func, CUDADialect())
    assert m.kernels[0].dynamic_shared_bytes == 20000 * 4
    assert "extern __shared__ __align__(16) unsigned char pt_dynamic_shared[];" in m.source
    assert "float* stage = reinterpret_cast<float*>(pt_dynamic_shared + 0);" in m.source
    assert "__shared__ __align__(16) float stage" not in m.source


# ----------------------------------------------------------------------------- printer
def _one_kernel(body, params, grid=(1,), block=(32,), name="f"):
    return PrimFunc(name, tuple(params), launch(f"{name}_kernel0", grid, block, body))


def test_names_are_sanitised_and_unique():
    A = buf("int", 4)  # a C keyword
    v1, v2 = Var("int64", "i.outer"), Var("int64", "i.outer")
    w = Var("int64", "__x")
    body = seq(For(v1, c64(0), c64(2), "serial", st(A, v1, const("float32", 1.0))),
               For(v2, c64(2), c64(2), "serial",
                   LetStmt(w, v2, st(A, w, const("float32", 2.0)))))
    s = body_of(src(_one_kernel(body, [A])))
    assert "float* __restrict__ int_1" in s
    assert "for (int64_t i_outer = 0LL; i_outer < 2LL; ++i_outer)" in s
    assert "for (int64_t i_outer_1 = 2LL; i_outer_1 < 2LL + 2LL; ++i_outer_1)" in s
    assert "const int64_t v__x = i_outer_1;" in s
    compile_with_nvcc(src(_one_kernel(body, [A])))


def test_let_rebinding_in_one_scope_opens_a_block():
    A = buf("A", 4)
    x = Var("int64", "x")
    body = seq(LetStmt(x, c64(1), st(A, x, const("float32", 1.0))),
               LetStmt(x, c64(2), st(A, x, const("float32", 2.0))))
    s = body_of(src(_one_kernel(body, [A])))
    assert "  const int64_t x = 1LL;\n  A[x] = 1.0f;\n  {\n    const int64_t x = 2LL;" in s
    compile_with_nvcc(src(_one_kernel(body, [A])))


@pytest.mark.parametrize("dtype,value,text", [
    ("int32", -(2**31), "-2147483647 - 1"), ("int64", -(2**63),
                                               "-9223372036854775807LL - 1LL"),
    ("int64", 5, "5LL"), ("uint32", 7, "7U"), ("uint64", 2**64 - 1, "18446744073709551615ULL"),
    ("int8", -3, "(int8_t)(-3)"), ("bool", True, "true"), ("float32", 0.1, "0.1f"),
    ("float64", 0.1, "0.1"), ("float32", 1e20, "1e+20f"), ("float32", 3.0, "3.0f"),
    ("float16", 0.1, "__float2half_rn(0.099975586f)"),
    ("float32", float("inf"), "__int_as_float(0x7f800000)"),
    ("float32", float("-inf"), "-__int_as_float(0x7f800000)"),
    ("float32", float("nan"), "__int_as_float(0x7fc00000)"),
    ("float64", float("inf"), "__longlong_as_double(0x7ff0000000000000LL)"),
    ("float16", float("-inf"), "-__ushort_as_half((unsigned short)0x7c00)"),
])
def test_constants(dtype, value, text):
    B = buf("B", 1, dtype)
    s = src(_one_kernel(st(B, 0, Const(dtype, value)), [B]))
    assert f"B[0LL] = {text};" in s or f"B[0LL] = (uint8_t)({text});" in s, s
    compile_with_nvcc(s)


def test_scalar_parameters_and_casts():
    n, a, h, flag = (Var("int64", "n"), Var("float32", "a"), Var("float16", "h"),
                     Var("bool", "flag"))
    A, B = buf("A", (n,)), buf("B", (n,), "bool")
    body = IfThenElse(lt(TX, n), seq(
        st(A, TX, Binary("float32", "mul", a, Cast("float32", h))),
        st(B, TX, Cast("bool", Binary("float32", "sub", ld(A, TX), a))),
        IfThenElse(flag, st(A, TX, Cast("float32", Cast("int8", ld(A, TX)))))))
    s = src(_one_kernel(body, [A, B, a, h, flag, n]))
    assert "    float* __restrict__ A,\n    uint8_t* __restrict__ B,\n    float a,\n" \
           "    half h,\n    bool flag,\n    int64_t n) {" in s
    assert "A[threadIdx_x] = a * __half2float(h);" in s
    assert "B[threadIdx_x] = (uint8_t)((A[threadIdx_x] - a) != 0.0f);" in s
    assert "A[threadIdx_x] = (float)((int8_t)A[threadIdx_x]);" in s
    compile_with_nvcc(s)


def test_kernel_parameters_follow_function_order_and_only_used_ones():
    A, B, C = buf("A", 4), buf("B", 4), buf("C", 4)
    n = Var("int64", "n")
    f = PrimFunc("f", (A, B, C, n), seq(
        launch("k0", (1,), (4,), st(C, TX, ld(A, TX))),
        launch("k1", (1,), (4,), IfThenElse(lt(TX, n), st(B, TX, ld(C, TX))))))
    m = print_c_module(f, CUDADialect())
    assert [[p.name for p in k.params] for k in m.kernels] == [["A", "C"], ["B", "C", "n"]]
    assert [sorted(b.name for b in k.stored) for k in m.kernels] == [["C"], ["B"]]


def test_unrolled_and_vectorized_loops_get_pragma_unroll():
    A = buf("A", 8)
    i, j = Var("int64", "i"), Var("int64", "j")
    body = seq(For(i, c64(0), c64(4), "unrolled", st(A, i, const("float32", 0.0))),
               For(j, c64(4), c64(4), "vectorized", st(A, j, const("float32", 1.0)),
                   pragmas=("x",)))
    s = body_of(src(_one_kernel(body, [A])))
    assert s.count("#pragma unroll") == 2 and "// pragma x" in s


# ----------------------------------------------------------------------------- errors
def test_statement_outside_kernels_raises_lowering_error():
    A = buf("A", 4)
    x = Var("int64", "x")
    k = launch("k0", (1,), (4,), st(A, TX, const("float32", 0.0)))
    f = PrimFunc("f", (A,), LetStmt(x, c64(1), k))
    with pytest.raises(LoweringError, match=r"codegen_cuda: statement LetStmt 'x = 1' of "
                       r"function 'f' lies outside every kernel; expected only KernelLaunch"):
        print_c_module(f, CUDADialect())
    f = PrimFunc("f", (A,), seq(k, Store(A, (c64(0),), const("float32", 1.0))))
    with pytest.raises(LoweringError, match=r"(?s)statement Store 'A\[0\] = 1.0f'.*hint: "
                       "bind the loops"):
        print_c_module(f, CUDADialect())
    shared = buf("S", 4, scope="shared")
    with pytest.raises(LoweringError, match="statement Allocate 'S = alloc"):
        print_c_module(PrimFunc("f", (A,), Allocate(shared, k)), CUDADialect())
    with pytest.raises(LoweringError, match="kernel 'k0' is launched inside kernel 'outer'"):
        print_c_module(PrimFunc("f", (A,), KernelLaunch("outer", (1, 1, 1), (1, 1, 1), (), k)),
                       CUDADialect())


def test_printer_errors_name_the_problem():
    A = buf("A", 4)
    ghost = Var("int64", "ghost")
    with pytest.raises(BuildError, match="variable 'ghost' is used but not defined"):
        src(_one_kernel(st(A, ghost, const("float32", 0.0)), [A]))
    T = buf("T", 4)
    with pytest.raises(BuildError, match="buffer 'T' is used outside its allocation"):
        src(_one_kernel(st(A, TX, ld(T, TX)), [A]))
    with pytest.raises(BuildError, match=r"kernel 'f_kernel0' has 2048 threads per block "
                       r"\(block \[2048, 1, 1\]\); expected at most 1024"):
        src(_one_kernel(st(A, TX, const("float32", 0.0)), [A], block=(2048,)))
    with pytest.raises(BuildError, match="binds 'warp' to unknown index 'warpIdx'"):
        src(PrimFunc("f", (A,), KernelLaunch("k", (1, 1, 1), (1, 1, 1),
                                             ((Var("int64", "warp"), "warpIdx"),),
                                             st(A, 0, const("float32", 0.0)))))
    n = Var("int64", "n")
    S = buf("S", (n,), scope="local")
    with pytest.raises(BuildError, match=r"local buffer 'S' has the non-constant shape"):
        src(_one_kernel(Allocate(S, st(S, TX, const("float32", 0.0))), [A, n]))
    # a shared buffer of symbolic size lives in dynamic shared memory sized at launch
    S = buf("S", (n,), scope="shared")
    text = src(_one_kernel(Allocate(S, st(S, TX, const("float32", 0.0))), [A, n]))
    assert "extern __shared__" in text and "pt_dynamic_shared + 0" in text
    with pytest.raises(BuildError, match="unknown intrinsic 'frobnicate'"):
        src(_one_kernel(st(A, TX, Call("float32", "frobnicate", (ld(A, TX),))), [A]))
    with pytest.raises(BuildError, match="binary op 'truncmod' on float32"):
        src(_one_kernel(st(A, TX, Binary("float32", "truncmod", ld(A, TX), ld(A, TX))), [A]))
    with pytest.raises(BuildError, match="scope 'heap' is allocated inside kernel"):
        H = buf("H", 4, scope="heap")
        src(_one_kernel(Allocate(H, st(H, TX, const("float32", 0.0))), [A]))
    with pytest.raises(InternalError, match="has 2 indices; expected exactly one"):
        src(_one_kernel(Store(A, (TX, TX), const("float32", 0.0)), [A]))
    with pytest.raises(BuildError, match="parameter buffer 'P' has scope 'shared'"):
        src(_one_kernel(st(A, TX, const("float32", 0.0)), [A, buf("P", 4, scope="shared")]))
    with pytest.raises(BuildError, match=r"has grid \[1, 70000, 1\]; expected at most"):
        src(_one_kernel(st(A, TX, const("float32", 0.0)), [A], grid=(1, 70000)))


def test_sync_scope_and_unknown_statement():
    A = buf("A", 4)
    with pytest.raises(BuildError, match="sync of scope 'global'"):
        src(_one_kernel(seq(st(A, TX, const("float32", 0.0)), Sync("global")), [A]))
    s = src(_one_kernel(seq(st(A, TX, const("float32", 0.0)), Sync()), [A]))
    assert "__syncthreads();" in s


# ----------------------------------------------------------------------------- compile
def test_compile_error_carries_the_log_and_the_source_line(tmp_path):
    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    bad = 'extern "C" __global__ void k(float* a) {\n  a[0] = undefined_name;\n}\n'
    with pytest.raises(BuildError, match=r"(?s)compile_cuda: \w+ failed to compile 'bad.cu' "
                       r"for sm_90.*undefined_name.*line 2: a\[0\] = undefined_name;"):
        compile_cuda(bad, "sm_90", cache_dir=tmp_path, name="bad.cu")
    assert not list(tmp_path.iterdir())


def test_nvcc_compiler_and_cache(tmp_path, monkeypatch):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    source = src(case_vadd())
    cubin = compile_cuda(source, "sm_90", compiler="nvcc", cache_dir=tmp_path)
    assert cubin[:4] == b"\x7fELF"
    (entry,) = tmp_path.iterdir()
    assert re.fullmatch(r"[0-9a-f]{64}\.cubin", entry.name) and entry.read_bytes() == cubin

    def fail(*a, **k):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr(cc, "compile_nvcc", fail)
    assert compile_cuda(source, "sm_90", compiler="nvcc", cache_dir=tmp_path) == cubin
    with pytest.raises(AssertionError):  # another arch is another entry
        compile_cuda(source, "sm_80", compiler="nvcc", cache_dir=tmp_path)


def test_nvrtc_compiles_every_case(tmp_path):
    if cc.nvrtc_version() is None:
        pytest.skip("NVRTC (cuda-python) not available")
    for name, case in CASES.items():
        cubin = compile_cuda(src(case), "sm_90", compiler="nvrtc", cache_dir=tmp_path)
        assert cubin[:4] == b"\x7fELF", name
    with pytest.raises(TargetError, match="cannot compile for sm_1"):
        compile_cuda(src(case_vadd()), "sm_10", compiler="nvrtc", use_cache=False)


def test_compile_cuda_arguments():
    with pytest.raises(ValueError, match="unknown compiler 'clang'"):
        compile_cuda("", compiler="clang")
    if device_count() == 0:
        assert cc.default_arch() == "sm_90"


def test_unwritable_cache_only_costs_the_caching(tmp_path):
    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cubin = compile_cuda(src(case_vadd()), "sm_90", cache_dir=blocker / "sub")
    assert cubin[:4] == b"\x7fELF"


# ----------------------------------------------------------------------------- build
def test_build_for_cuda_without_running(tmp_path):
    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    f = case_vadd().func
    m = polytile.build(f, target="cuda -arch=sm_90", cache_dir=tmp_path)
    assert isinstance(m, CUDAModule) and m.arch == "sm_90"
    from polytile.schedule.passes.narrow import narrow_indices

    # build narrows index arithmetic to int32 (small buffers) before printing
    assert m.get_source() == src(narrow_indices(f)) == m.get_source("cu")
    assert "int32_t" in m.get_source() and "int64_t i" not in m.get_source()
    assert m.get_source("cubin")[:4] == b"\x7fELF"
    assert "CUDAModule('vadd', target='cuda -arch=sm_90', arch='sm_90')" == repr(m)
    with pytest.raises(ValueError, match="get_source: unknown format 'ptx'"):
        m.get_source("ptx")
    if device_count() == 0:
        a = np.zeros(1000, "float32")
        with pytest.raises(DeviceNotFoundError, match="no CUDA device was found") as info:
            m(a, a, a)
        assert isinstance(info.value, TargetError) and isinstance(info.value, RuntimeError)
    fast = polytile.targets.build(f, target="cuda -arch=sm_90 -fast-math",
                                  cache_dir=tmp_path)
    assert fast.target.fast_math


def test_build_default_arch_and_nvcc_option(tmp_path):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    m = polytile.targets.build(case_ops().func, target="cuda", compiler="nvcc",
                               cache_dir=tmp_path)
    assert m.arch == cc.default_arch()


def test_cuda_target_options():
    t = Target.parse("cuda -arch=sm_80 -fast-math")
    assert (t.kind, t.arch, t.fast_math) == ("cuda", "sm_80", True)
    assert not Target.parse("cuda").fast_math
    with pytest.raises(TargetError, match="option '-fast-math' takes no value"):
        Target.parse("cuda -fast-math=1")
    with pytest.raises(LoweringError, match="is not a CUDA target"):
        CUDAModule(case_vadd().func, Target.parse("llvm"))


def test_auto_falls_back_to_nvcc_when_nvrtc_fails(tmp_path, monkeypatch):
    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")

    def broken(*args, **kwargs):
        raise BuildError("compile_cuda: NVRTC failed (could not open cuda_fp16.h)")

    monkeypatch.setattr(cc, "_compile_nvrtc", broken)
    monkeypatch.setattr(cc, "available_compiler", lambda: "nvrtc")
    monkeypatch.setattr(cc, "_nvrtc", lambda: object())
    monkeypatch.setattr(cc, "nvrtc_version", lambda: (0, 0))
    source = src(case_half())
    assert compile_cuda(source, "sm_90", use_cache=False)[:4] == b"\x7fELF"
    with pytest.raises(BuildError, match="could not open cuda_fp16.h"):
        compile_cuda(source, "sm_90", compiler="nvrtc", use_cache=False)
