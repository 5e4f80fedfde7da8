"""Swizzled shared tiles on the mma.sync path (``wmma_gemm(..., isa="mma", swizzle=True)``):
``Stage.swizzle`` of the wgmma path on the ``cp.async`` tiles, read by ``ldmatrix`` helpers
that swizzle each lane's address. Checked: the helpers' address arithmetic (their C text
evaluated lane by lane) against :func:`polytile.targets.cuda.wgmma.swizzle_elements`, the
lowering on the interpreter (which stores and reads swizzled buffers where the swizzle puts
the elements) against float64, the source through nvcc, and a GPU run (marked ``gpu``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polytile
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import tensor_core as tc
from polytile.targets.cuda.wgmma import swizzle_elements

from helpers import compile_with_nvcc, nvcc_text


def _lane_addresses(text: str, base: int, ldm: int) -> list:
    """The shared byte address each of the 32 lanes gives ``ldmatrix`` in helper ``text``
    (float16 elements from byte ``base``, rows ``ldm`` elements apart): its C
    expressions evaluated in Python (unsigned integer arithmetic)."""
    lane = re.search(r"__cvta_generic_to_shared\(\s*src \+ (.*?)\);", text, re.S).group(1)
    xor = re.search(r"\n  a \^= (.*?);", text)
    out = []
    for l in range(32):
        env = {"l": l, "ldm": ldm}
        a = base + 2 * eval(lane.replace("/", "//"), {}, env)
        if xor is not None:
            env["a"] = a
            a ^= eval(re.sub(r"(\w)u\b", r"\1", xor.group(1)).replace("/", "//"), {}, env)
        out.append(a)
    return out


@pytest.mark.parametrize("call", ["mma.ldmatrix_x4", "mma.ldmatrix_x4_trans"])
@pytest.mark.parametrize("width", [32, 64, 128])
def test_ldmatrix_helpers_address_the_swizzled_elements(call, width):
    # every lane of every 16x16 region of a buffer of width-byte rows (region rows from 0
    # to 23, columns at every 8 elements): the general helper reads where the swizzle
    # put the element; the first-row helper too where the region starts on the pattern's
    # first row (the only regions tensorize gives it)
    ldm = width // 2
    plain = tc.C_HELPERS[call][1]
    mode = f"{width}B"
    for row0 in range(24):
        for col0 in range(0, ldm - 16 + 1, 8):
            base = 2 * (row0 * ldm + col0)
            logical = _lane_addresses(plain, base, ldm)
            want = [int(swizzle_elements(a, mode, 1)) for a in logical]
            assert _lane_addresses(tc.C_HELPERS[f"{call}_sw{width}"][1], base, ldm) == want
            if row0 % 8 == 0:
                got = _lane_addresses(tc.C_HELPERS[f"{call}_sw{width}r"][1], base, ldm)
                assert got == want, (row0, col0)
    # the swizzle changes some address (a helper that ignored it would pass above only if
    # the swizzle were the identity)
    assert _lane_addresses(tc.C_HELPERS[f"{call}_sw{width}"][1], 0, ldm) != \
        _lane_addresses(plain, 0, ldm)


@pytest.mark.parametrize("M, N, K, block, warp, stages, frags", [
    # A rows of 64 bytes (64B swizzle), B rows of 64 bytes too; 3 k tiles in 2 stages with
    # fragment prefetch; A rows of 32 bytes (32B), B padded (rows of 96 bytes), no pipeline
    (32, 32, 96, (32, 32, 32), (16, 16), 2, "prefetch"),
    (16, 48, 32, (16, 48, 16), (16, 16), 1, "step")])
def test_swizzled_mma_gemm_on_the_interpreter(M, N, K, block, warp, stages, frags):
    s, args = tc.wmma_gemm(M, N, K, isa="mma", block=block, warp=warp, stages=stages,
                           frags=frags, swizzle=True)
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    assert f"swizzle='{block[2] * 2}B'" in text.split("A.shared = alloc(")[1].split("\n")[0]
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N)).astype("float16")
    c = np.full((M, N), np.nan, "float32")
    run(f, a, b, c)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-6


def test_swizzle_needs_the_mma_path():
    with pytest.raises(ValueError, match="swizzle needs isa 'mma'"):
        tc.wmma_gemm(64, 64, 64, swizzle=True)


def test_swizzled_mma_gemm_compiles_with_first_row_ldmatrix():
    # MMA_BEST's tiles: A [128, 32] float16 in 64B-swizzled rows (no padding), B padded
    s, args = tc.wmma_gemm(128, 256, 64, **{**tc.MMA_BEST, "swizzle": True})
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert "ldmatrix_x4_sw64r(A_shared_wmma_matrix_a" in src
    assert "ldmatrix_x4_trans(B_shared_wmma_matrix_b" in src
    assert "// 20480 elements" not in src and "// 16384 elements" in src   # A: 4 x 128 x 32
    compile_with_nvcc(src, "sm_90")
    sass = nvcc_text(src, "sass")
    if sass is not None:
        assert sass.count("LDSM") >= 16 and "LDGSTS" in sass and "HMMA" in sass


@pytest.mark.gpu
@pytest.mark.parametrize("size, block, stages", [((384, 640, 320), (128, 256, 32), 4),
                                                 ((384, 640, 320), (128, 128, 64), 3),
                                                 ((4096, 4096, 4096), (128, 256, 32), 4)])
def test_swizzled_mma_gemm_on_the_gpu(size, block, stages):
    M, N, K = size
    s, args = tc.wmma_gemm(M, N, K, isa="mma", block=block, warp=(64, 64), stages=stages,
                           frags="prefetch", group=8, swizzle=True)
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N)).astype("float16")
    c = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(c.numpy() - ref) / np.linalg.norm(ref) < 1e-5
