"""Benchmark: the instruction-throughput ceiling of ``mma.sync.aligned.m16n8k16`` (fp16
inputs, fp32 accumulation) on this GPU, beside cuBLAS fp16 measured in the same run.

Why: issue 10 asks the mma.sync GEMM path for 0.6x of cuBLAS. On Hopper cuBLAS runs on
``wgmma`` (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"), and
the warp-level ``mma.sync`` of Ampere issues at a lower rate on the same tensor cores.
This script measures that rate with no memory traffic at all: every warp runs a long chain
of independent ``mma.sync`` on register operands (``CHAINS`` accumulators per warp, so the
MMA latency is hidden), on enough blocks to fill every SM, timed with CUDA events. A GEMM
built from ``mma.sync`` cannot exceed the figure printed here.

Run (needs nvcc and an sm_80+ GPU; torch for the cuBLAS anchor):
``python benchmarks/mma_peak.py [TEXT ...]`` (only the lines containing one of the TEXTs).
Prints one line per configuration: TFLOP/s and the ratio to cuBLAS fp16 4096^3. The last
two lines run a GEMM's 64x64 warp tile without its global copies and barriers: random
operands in 4 A and 4 B fragments per k step (the chains above reuse one operand pair of
constant bits), then with the ``ldmatrix.x4`` of every next step from shared memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

SOURCE = r"""
#include <cstdio>
#include <cuda_runtime.h>

template <int CHAINS>
__global__ void mma_loop(float *out, int iters) {
  unsigned a[4], b[2];
  float c[CHAINS][4];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * (i + 1));
  for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x * (i + 7));
  for (int j = 0; j < CHAINS; ++j)
    for (int i = 0; i < 4; ++i) c[j][i] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < CHAINS; ++j)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
          "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float s = 0.f;
  for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;   // keeps the MMAs alive
}

template <int CHAINS>
static void run(int sms, int warps, int blocks_per_sm) {
  const int iters = 4096, threads = 32 * warps, blocks = sms * blocks_per_sm;
  float *out;
  cudaMalloc(&out, sizeof(float) * blocks * threads);
  mma_loop<CHAINS><<<blocks, threads>>>(out, 16);   // warm-up
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0); cudaEventCreate(&t1);
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(t0);
    mma_loop<CHAINS><<<blocks, threads>>>(out, iters);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms; cudaEventElapsedTime(&ms, t0, t1);
    if (ms < best) best = ms;
  }
  double flops = 2.0 * 16 * 8 * 16 * (double)CHAINS * iters * blocks * warps;
  printf("chains %d warps/block %d blocks/SM %d: %.1f TFLOP/s\n", CHAINS, warps,
         blocks_per_sm, flops / (best * 1e-3) / 1e12);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
  cudaFree(out);
}

// The inner step of a GEMM warp tile of 64x64 (4 m16 x 8 n8 MMAs per k16 step: 32
// accumulators of 4 floats, 4 A fragments and 4 B fragments of 16x16): every MMA reads
// other operand registers (not one reused pair as above), the operands hold random bits
// (the tensor cores' power depends on the data), and with LOADS each step loads the
// fragments of the next step into the other register set by ldmatrix.x4 from shared
// memory (8 per step, conflict-free: 512 contiguous bytes each), as the GEMM does, but
// with no global copies and no barrier.
__device__ __forceinline__ unsigned hash32(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return (x & 0xbfffbfffu) | 0x20002000u;   // finite halves, no NaN/Inf
}

template <bool LOADS>
__global__ void __launch_bounds__(256, 1) warp_tile(float *out, int iters) {
  __shared__ __align__(128) unsigned smem[8][8][128];   // per warp and fragment: 512 B
  const unsigned lane = threadIdx.x % 32, w = threadIdx.x / 32;
  for (int i = threadIdx.x; i < 8 * 8 * 128; i += blockDim.x)
    (&smem[0][0][0])[i] = hash32(i * 2654435761u + blockIdx.x);
  __syncthreads();
  unsigned f[2][8][4];      // set, fragment (0-3 A, 4-7 B), register
  float c[32][4];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) f[s][j][r] = hash32((s * 32 + j * 4 + r) * 977u + threadIdx.x);
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) c[j][r] = 0.f;
  unsigned base = (unsigned)__cvta_generic_to_shared(&smem[w][0][0]);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      if (LOADS) {
        // lane l reads row l ^ x (16 bytes) of each 512-byte fragment: conflict-free, and
        // x changes every step, so ptxas cannot merge the loads of two steps
        unsigned at = base + ((lane ^ ((2 * it + step) & 7)) << 4);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                       : "=r"(f[1 - step][j][0]), "=r"(f[1 - step][j][1]),
                         "=r"(f[1 - step][j][2]), "=r"(f[1 - step][j][3])
                       : "r"(at + j * 512));
      }
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int n = 0; n < 8; ++n)
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
              "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
              : "+f"(c[m * 8 + n][0]), "+f"(c[m * 8 + n][1]), "+f"(c[m * 8 + n][2]),
                "+f"(c[m * 8 + n][3])
              : "r"(f[step][m][0]), "r"(f[step][m][1]), "r"(f[step][m][2]),
                "r"(f[step][m][3]), "r"(f[step][4 + n / 2][2 * (n % 2)]),
                "r"(f[step][4 + n / 2][2 * (n % 2) + 1]));
    }
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 32; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <bool LOADS>
static void run_tile(int sms) {
  const int iters = 2048, threads = 256;
  float *out;
  cudaMalloc(&out, sizeof(float) * sms * threads);
  warp_tile<LOADS><<<sms, threads>>>(out, 16);   // warm-up
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0); cudaEventCreate(&t1);
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(t0);
    warp_tile<LOADS><<<sms, threads>>>(out, iters);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms; cudaEventElapsedTime(&ms, t0, t1);
    if (ms < best) best = ms;
  }
  double flops = 2.0 * 16 * 8 * 16 * 32 * 2 * (double)iters * sms * 8;
  printf("64x64 warp tiles, 8 warps/SM, random operands%s: %.1f TFLOP/s\n",
         LOADS ? ", ldmatrix of the next step" : "", flops / (best * 1e-3) / 1e12);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) printf("error %s\n", cudaGetErrorString(e));
  cudaFree(out);
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run<4>(sms, 4, 1);
  run<4>(sms, 8, 1);
  run<8>(sms, 4, 1);
  run<8>(sms, 8, 1);
  run<8>(sms, 8, 2);
  run<16>(sms, 8, 1);
  run<16>(sms, 4, 2);
  run_tile<false>(sms);
  run_tile<true>(sms);
  return 0;
}
"""


def _cublas_fp16(n: int = 4096) -> float:
    """cuBLAS fp16 GEMM (fp32 accumulation inside cuBLAS) at n^3 through torch, TFLOP/s."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        a @ b
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        t0.record()
        a @ b
        t1.record()
        t1.synchronize()
        times.append(t0.elapsed_time(t1) * 1e-3)
    return 2.0 * n**3 / sorted(times)[len(times) // 2] / 1e12


def main(only=()) -> None:
    """Build the microkernel with nvcc, run it, print the ceiling beside cuBLAS (the lines
    containing one of the strings ``only`` when given)."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, exe = os.path.join(tmp, "mma_peak.cu"), os.path.join(tmp, "mma_peak")
        with open(cu, "w") as f:
            f.write(SOURCE)
        subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-o", exe, cu], check=True)
        lines = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    try:
        cublas = _cublas_fp16()
    except Exception as exc:  # no torch or no GPU: print the ceiling alone
        print(f"cuBLAS anchor not measured: {exc}", file=sys.stderr)
        cublas = None
    if cublas:
        print(f"cuBLAS fp16 4096^3: {cublas:.1f} TFLOP/s")
    if only:
        lines = "\n".join(ln for ln in lines.splitlines() if any(o in ln for o in only))
    for line in lines.splitlines():
        tflops = float(line.split(":")[1].split()[0]) if "TFLOP" in line else None
        ratio = f"  {tflops / cublas:.3f}x cuBLAS" if tflops and cublas else ""
        print(f"mma.sync m16n8k16 ceiling, {line}{ratio}")


if __name__ == "__main__":
    main(sys.argv[1:])
