"""The register micro-kernel of a BLAS-style matmul compiles to what a hand-written one is:
broadcast FMAs on vector registers with the accumulators in registers across the k loop,
in a parallel loop as well as outside one."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.backend import Target


def _avx512() -> bool:
    return Target.parse("llvm").has_feature("avx512f")


def _gemm(M, N, K, mr, nr, kc, mc, nc, parallel):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    PA = te.compute((-(-M // mr), K, mr), lambda p, kp, r: te.if_then_else(
        p * mr + r < M, A[p * mr + r, kp], 0.0), name="PA")
    PB = te.compute((-(-N // nr), K, nr), lambda p, kp, r: te.if_then_else(
        p * nr + r < N, B[kp, p * nr + r], 0.0), name="PB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(PA[i // mr, k, i % mr] * PB[j // nr, k, j % nr],
                                               axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    i0, i = s[C].split(i, factor=mc)
    i1, i2 = s[C].split(i, factor=mr)
    j0, j = s[C].split(j, factor=nc)
    j1, j2 = s[C].split(j, factor=nr)
    k0, k1 = s[C].split(k, factor=kc)
    s[C].reorder(j0, k0, i0, j1, i1, k1, i2, j2)
    s[C].unroll(i2)
    s[C].vectorize(j2)
    if parallel:
        s[C].parallel(j0)  # the packed blocks are then computed inside the parallel body
    s[PB].compute_at(s[C], k0)
    s[PA].compute_at(s[C], i0)
    return s, [A, B, C]


def _check_gemm(f, M, N, K, seed):
    """Run the built GEMM ``f`` on random float32 data into a NaN-poisoned ``C`` and
    compare with the float64 product."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4)


def _kernel_blocks(asm: str) -> list[str]:
    """The basic blocks of ``asm`` with at least 24 vector FMAs (the micro-kernel loop)."""
    # a block: from a label to its first jump (what follows a loop's back edge is the
    # loop's exit code)
    blocks = [re.split(r"\n\s*j\w+\s", b)[0] for b in re.split(r"\n(?=\.LBB)", asm)]
    return [b for b in blocks if len(re.findall(r"vfmadd\d+ps\s[^\n]*zmm", b)) >= 24]


@pytest.mark.skipif(not _avx512(), reason="needs AVX-512")
@pytest.mark.parametrize("parallel", [False, True])
def test_micro_kernel_keeps_accumulators_in_registers(parallel):
    M, N, K = 256, 256, 256  # 256 rows: 21 panels of 12 and a ragged one
    s, args = _gemm(M, N, K, mr=12, nr=32, kc=256, mc=96, nc=128, parallel=parallel)
    f = polytile.build(s, args)
    asm = f.get_source("asm")
    kernels = _kernel_blocks(asm)
    assert kernels, "no loop with 24 zmm FMAs: the 12 x 32 micro-kernel was not formed"
    for blk in kernels:
        # no accumulator stored back (or spilled) inside the k loop: the 24 zmm stay live
        assert not re.search(r"vmov\w+\s+%zmm\d+, [^\n]*\(", blk), blk
        assert "(%rsp)" not in blk, blk
        assert len(re.findall(r"vbroadcastss|\{1to16\}", blk)) >= 12, blk
    _check_gemm(f, M, N, K, seed=0)


@pytest.mark.skipif(not _avx512(), reason="needs AVX-512")
def test_full_tiles_of_a_ragged_row_block_keep_accumulators_in_registers():
    """M = 130 = 96 + 34: the last row block (34 rows) holds two full 12-row tiles and a
    ragged one of 10. isl separates only the full row blocks; the full tiles of the ragged
    block get a constant-extent copy (``specialize_partial_unrolls``): the micro-kernel
    appears at least twice, each time with its accumulators in registers, and the ragged
    tile still computes its rows."""
    M, N, K = 130, 64, 70
    s, args = _gemm(M, N, K, mr=12, nr=32, kc=32, mc=96, nc=64, parallel=False)
    f = polytile.build(s, args)
    kernels = _kernel_blocks(f.get_source("asm"))
    assert len(kernels) >= 2, "the full tiles of the ragged row block are not unrolled"
    for blk in kernels:
        assert not re.search(r"vmov\w+\s+%zmm\d+, [^\n]*\(", blk), blk
    _check_gemm(f, M, N, K, seed=1)


@pytest.mark.skipif(not _avx512(), reason="needs AVX-512")
@pytest.mark.parametrize("unroll_k", [4, 8])
def test_micro_kernel_with_an_unrolled_k_loop_keeps_accumulators_in_registers(unroll_k):
    """The k loop of the 12 x 32 micro-kernel unrolled ``unroll_k`` times holds 24 * 2 *
    ``unroll_k`` accesses of C before LICM promotes them: past LLVM's default cap (250)
    they stayed in memory, one load and store per FMA (a quarter of the speed). K = 131 is
    prime: the unrolled k loop has a ragged last block."""
    M, N, K = 50, 64, 131
    s, args = _gemm(M, N, K, mr=12, nr=32, kc=64, mc=48, nc=64, parallel=False)
    C = args[2]
    k1 = [iv for iv in s[C].leaf_iter_vars if iv.name == "k.inner"][0]
    ko, ki = s[C].split(k1, factor=unroll_k)
    s[C].unroll(ki)
    f = polytile.build(s, args)
    # the full tiles' loops (the ragged 2-row tile runs rolled, from memory)
    kernels = [b for b in _kernel_blocks(f.get_source("asm"))
               if len(re.findall(r"vfmadd\d+ps\s[^\n]*zmm", b)) >= 24 * unroll_k]
    assert kernels, f"no loop with {24 * unroll_k} zmm FMAs"
    for blk in kernels:
        assert not re.search(r"vmov\w+\s+%zmm\d+, [^\n]*\(", blk), blk
        assert "(%rsp)" not in blk, blk
    _check_gemm(f, M, N, K, seed=2)
