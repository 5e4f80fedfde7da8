"""A host emulation of the CUDA driver, to run the CUDA runtime's code path without a GPU.

:class:`EmulatedDriver` implements the few ``cuda.bindings.driver`` calls polytile makes,
with their return conventions (``(CUresult, values...)``): device memory is host memory,
events read the host clock, and a "cubin" is the CUDA C source itself, compiled for the host
by ``g++`` with a shim that maps the CUDA spellings onto C++ (``__syncthreads()`` is a
``std::barrier``; each block runs its threads as OS threads, blocks one after another, so
``__shared__`` arrays become function statics). ``cuLaunchKernel`` hands the kernel's
``void**`` parameter array to a generated launcher, exactly as the driver would.

It checks what a GPU test checks except the GPU itself: argument packing, launch shapes,
workspaces, the numerics of the generated C (integer wrap-around, floor division, math
functions, half and bfloat16 conversions), and the host logic of the runtime. ``half`` is GCC's
``_Float16``, which may keep intermediate results in float (tolerances cover it).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import re
import shutil
import subprocess
import tempfile
import time
import types

_SHIM = r"""
#include <barrier>
#include <functional>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct pt_uint3 { unsigned x, y, z; };
// the vector types of vectorized copies (targets/c_vector.py)
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
static thread_local pt_uint3 blockIdx, threadIdx;
static std::barrier<>* pt_block_barrier;
static inline void __syncthreads() { pt_block_barrier->arrive_and_wait(); }
// 32-bit atomics (int4 stores: passes/int4.py); the block's threads are OS threads
static inline unsigned atomicAnd(unsigned* p, unsigned v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
// warp shuffles (loop IR WarpShuffle, reached by the whole block): a slot per thread and
// two block barriers; the partner is the thread whose linear id is this one's XOR lane_xor
static thread_local unsigned pt_lin;
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int lane_xor) {
  static T slots[1024];
  slots[pt_lin] = v;
  pt_block_barrier->arrive_and_wait();
  T r = slots[pt_lin ^ (unsigned)lane_xor];
  pt_block_barrier->arrive_and_wait();
  return r;
}
alignas(16) unsigned char pt_dynamic_shared[1 << 20];
typedef _Float16 half;
template <typename T, typename F> static inline T pt_bits(F f) { T t; memcpy(&t, &f, sizeof t); return t; }
static inline float __int_as_float(int x) { return pt_bits<float>(x); }
static inline double __longlong_as_double(long long x) { return pt_bits<double>(x); }
static inline half __ushort_as_half(unsigned short x) { return pt_bits<half>(x); }
static inline half __float2half_rn(float x) { return (half)x; }
static inline half __double2half(double x) { return (half)x; }
static inline half __ll2half_rn(long long x) { return (half)(double)x; }
static inline half __ull2half_rn(unsigned long long x) { return (half)(double)x; }
static inline float __half2float(half x) { return (float)x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
#define PT_HALF1(name, f) static inline half name(half x) { return (half)f((float)x); }
PT_HALF1(hexp, expf) PT_HALF1(hexp2, exp2f) PT_HALF1(hlog, logf) PT_HALF1(hlog2, log2f)
PT_HALF1(hlog10, log10f) PT_HALF1(hsqrt, sqrtf) PT_HALF1(hrsqrt, rsqrtf) PT_HALF1(hsin, sinf)
PT_HALF1(hcos, cosf) PT_HALF1(hfloor, floorf) PT_HALF1(hceil, ceilf) PT_HALF1(hrint, rintf)
PT_HALF1(htrunc, truncf) PT_HALF1(__habs, fabsf)
static inline bool __hisnan(half x) { return isnan((float)x); }
// half2 (the printer's ``half2`` pragma): two lanes; an FMA rounds once (the exact product
// of two halves fits a double, and so does its sum with a third but for huge ranges)
struct half2 { half x, y; };
static inline half2 __halves2half2(half a, half b) { return {a, b}; }
static inline half2 __half2half2(half a) { return {a, a}; }
static inline half2 __floats2half2_rn(float a, float b) { return {(half)a, (half)b}; }
static inline half __low2half(half2 v) { return v.x; }
static inline half __high2half(half2 v) { return v.y; }
static inline half2 __hadd2(half2 a, half2 b) { return {(half)(a.x + b.x), (half)(a.y + b.y)}; }
static inline half2 __hsub2(half2 a, half2 b) { return {(half)(a.x - b.x), (half)(a.y - b.y)}; }
static inline half2 __hmul2(half2 a, half2 b) { return {(half)(a.x * b.x), (half)(a.y * b.y)}; }
static inline half2 __hfma2(half2 a, half2 b, half2 c) {
  return {(half)((double)a.x * (double)b.x + (double)c.x),
          (half)((double)a.y * (double)b.y + (double)c.y)};
}
// bfloat16 (cuda_bf16.h): 16-bit storage; the printer converts it to and from float only
struct __nv_bfloat16 { unsigned short x; };
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }
static inline float __bfloat162float(__nv_bfloat16 b) {
  return pt_bits<float>((unsigned)b.x << 16);
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = pt_bits<unsigned>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40u)};
  return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// CUDA's integer intrinsics, with their results at 0 (__clz(0) is 32, __clzll(0) 64)
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __powf powf
// a failed run-time check: the GPU's context dies with the kernel, the emulating process too
static inline void __trap() { abort(); }

static void pt_run_grid(const unsigned* g, const unsigned* b, const std::function<void()>& k) {
  unsigned threads = b[0] * b[1] * b[2];
  for (unsigned bz = 0; bz < g[2]; ++bz) for (unsigned by = 0; by < g[1]; ++by)
  for (unsigned bx = 0; bx < g[0]; ++bx) {
    std::barrier<> bar(threads);
    pt_block_barrier = &bar;
    std::vector<std::thread> ts;
    for (unsigned tz = 0; tz < b[2]; ++tz) for (unsigned ty = 0; ty < b[1]; ++ty)
    for (unsigned tx = 0; tx < b[0]; ++tx)
      ts.emplace_back([=, &k] { blockIdx = {bx, by, bz}; threadIdx = {tx, ty, tz};
                                    pt_lin = tx + b[0] * (ty + b[1] * tz); k(); });
    for (auto& t : ts) t.join();
  }
}
"""

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+(?:, \d+)?\) )?(\w+)\(([^)]*)\)')
SUCCESS, INVALID_VALUE, NOT_FOUND = 0, 1, 500
_NAMES = {SUCCESS: "CUDA_SUCCESS", INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
          NOT_FOUND: "CUDA_ERROR_NOT_FOUND"}
MAX_DYNAMIC_SHARED = 227 * 1024
TOTAL_MEMORY = 80 * 2**30


def available() -> bool:
    return shutil.which("g++") is not None


def _launcher(name: str, params: str) -> str:
    args = []
    for k, p in enumerate(x.strip() for x in params.split(",") if x.strip()):
        ctype = p.rsplit(" ", 1)[0].replace("__restrict__", "").strip()
        args.append(f"*({ctype}*)params[{k}]")
    return (f'extern "C" void pt_launch_{name}(const unsigned* g, const unsigned* b, '
            f"void** params) {{\n  pt_run_grid(g, b, [&] {{ {name}({', '.join(args)}); }});\n}}\n")


class _Module:
    def __init__(self, source: str, workdir: str):
        src = source.replace("#include <cuda_fp16.h>", "").replace(
            "#include <cuda_bf16.h>", "").replace("extern __shared__", "extern")
        kernels = _KERNEL.findall(source)
        text = _SHIM + src + "\n" + "".join(_launcher(n, p) for n, p in kernels)
        fd, path = tempfile.mkstemp(suffix=".cpp", dir=workdir)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        lib = path[:-4] + ".so"
        res = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
                              "-w", "-o", lib, path], capture_output=True, text=True,
                             check=False)
        if res.returncode != 0:
            raise RuntimeError(f"emulator: g++ failed:\n{res.stderr}\n{text}")
        self.lib = ctypes.CDLL(lib)
        self.kernels = {n for n, _ in kernels}


class EmulatedDriver:
    """The subset of ``cuda.bindings.driver`` used by polytile, on the host."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.allocs: dict = {}  # address -> ctypes buffer
        self.calls: list = []
        self.launches: list = []
        self.CUstream = lambda v=0: ("stream", int(v))
        attr = types.SimpleNamespace
        self.CUdevice_attribute = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                                       CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
                                       CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK="threads",
                                       CU_DEVICE_ATTRIBUTE_WARP_SIZE="warp",
                                       CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms",
                                       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK="smem")
        self.CUpointer_attribute = attr(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL="ordinal")
        self.CUfunction_attribute = attr(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic_shared")

    def __getattr__(self, name):
        raise AttributeError(f"the emulated driver has no {name}")

    # context
    def cuInit(self, flags):
        return (SUCCESS,)

    def cuDeviceGetCount(self):
        return (SUCCESS, 1)

    def cuDeviceGet(self, ordinal):
        return (SUCCESS, ("device", ordinal))

    def cuDevicePrimaryCtxRetain(self, dev):
        return (SUCCESS, ("context", 0))

    def cuCtxSetCurrent(self, ctx):
        return (SUCCESS,)

    def cuDeviceGetAttribute(self, attr, dev):
        return (SUCCESS, {"major": 9, "minor": 0, "threads": 1024, "warp": 32, "sms": 132,
                          "smem": 48 * 1024}[attr])

    def cuDeviceGetName(self, n, dev):
        return (SUCCESS, b"Emulated H100".ljust(n, b"\0"))

    def cuDeviceTotalMem(self, dev):
        return (SUCCESS, TOTAL_MEMORY)

    def cuMemGetInfo(self):
        used = sum(n for _, n in self.allocs.values())
        return (SUCCESS, TOTAL_MEMORY - used, TOTAL_MEMORY)

    def cuGetErrorName(self, err):
        return (SUCCESS, _NAMES[int(err)].encode())

    def cuGetErrorString(self, err):
        return (SUCCESS, b"emulated error")

    # memory
    def cuMemAlloc(self, n):
        b = ctypes.create_string_buffer(int(n) + 64)
        addr = (ctypes.addressof(b) + 63) // 64 * 64
        self.allocs[addr] = (b, int(n))
        return (SUCCESS, addr)

    def cuMemFree(self, ptr):
        return (SUCCESS,) if self.allocs.pop(int(ptr), None) is not None else (INVALID_VALUE,)

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), int(n))
        return (SUCCESS,)

    def cuMemcpyDtoD(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), int(n))
        return (SUCCESS,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), int(n))
        return (SUCCESS,)

    def cuPointerGetAttribute(self, attr, ptr):
        for a, (_, n) in self.allocs.items():
            if a <= int(ptr) < a + max(n, 1):
                return (SUCCESS, 0)
        return (INVALID_VALUE, None)

    # modules and launches
    def cuModuleLoadData(self, image):
        if not image.startswith(b"EMU:"):
            return (INVALID_VALUE, None)
        return (SUCCESS, _Module(image[4:].decode(), self.workdir))

    def cuModuleUnload(self, mod):
        self.unloaded = getattr(self, "unloaded", 0) + 1
        return (SUCCESS,)

    def cuModuleGetFunction(self, mod, name):
        name = name.decode()
        if name not in mod.kernels:
            return (NOT_FOUND, None)
        return (SUCCESS, (mod, name))

    def cuFuncSetAttribute(self, fn, attr, value):
        ok = attr == "max_dynamic_shared" and value <= MAX_DYNAMIC_SHARED
        return (SUCCESS if ok else INVALID_VALUE,)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        mod, name = fn
        assert stream == ("stream", 0) and extra == 0 and isinstance(params, int)
        g = (ctypes.c_uint * 3)(gx, gy, gz)
        b = (ctypes.c_uint * 3)(bx, by, bz)
        getattr(mod.lib, f"pt_launch_{name}")(g, b, ctypes.c_void_p(params))
        self.launches.append((name, (gx, gy, gz), (bx, by, bz), smem))
        return (SUCCESS,)

    def cuStreamSynchronize(self, stream):
        return (SUCCESS,)

    # events
    def cuEventCreate(self, flags):
        return (SUCCESS, [0.0])

    def cuEventRecord(self, ev, stream):
        ev[0] = time.perf_counter()
        return (SUCCESS,)

    def cuEventSynchronize(self, ev):
        return (SUCCESS,)

    def cuEventElapsedTime(self, start, end):
        return (SUCCESS, (end[0] - start[0]) * 1e3)

    def cuEventDestroy(self, ev):
        return (SUCCESS,)


def emulated_compile(source, arch=None, options=(), **kwargs) -> bytes:
    """Stands in for ``compile_cuda``: the "cubin" is the source."""
    return b"EMU:" + source.encode()


@contextlib.contextmanager
def installed(tmp_path, monkeypatch):
    """polytile's CUDA runtime on the emulated driver for the duration of a test (skips the
    test without g++); yields the :class:`EmulatedDriver` (its ``launches`` record). The
    runtime's own state comes back afterwards, after the emulated arrays are freed while
    the emulated driver is still installed. Tests use it through the fixtures of
    ``tests/conftest.py`` (``emulated_cuda``, ``cuda_device``, ``cuda_build``)."""
    import pytest

    from polytile.targets.cuda import runtime

    if not available():
        pytest.skip("g++ not found (needed by the emulated driver)")
    saved = dict(runtime._state)
    runtime._state.clear()
    runtime._state["driver"] = drv = EmulatedDriver(str(tmp_path))
    monkeypatch.setattr(runtime, "compile_cuda", emulated_compile)
    monkeypatch.setattr(runtime, "default_arch", lambda: "sm_90")
    try:
        yield drv
    finally:
        gc.collect()
        runtime._state.clear()
        runtime._state.update(saved)
