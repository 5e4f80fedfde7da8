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
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.cuda import tensor_core as tc
from polytile.targets.cuda.wgmma import swizzle_elements

from helpers import compile_with_nvcc, nvcc_text


_HARNESS = r"""#include <cstdio>
#include <cstdint>
#define __device__
#define __forceinline__ inline
struct pt_f { unsigned r[4]; };
typedef unsigned short half;
static unsigned pt_lane_id, pt_seen;
alignas(4096) static char pt_smem[65536];
static unsigned pt_lane() { return pt_lane_id; }
static unsigned __cvta_generic_to_shared(const void* p) {
  return (unsigned)((const char*)p - pt_smem);
}
// the address a helper hands to its ldmatrix instruction (asm volatile -> PT_ASM)
#define PT_ASM(...) (pt_seen = a)
"""


def _case(fn: str, width: int, first_row: bool) -> str:
    ldm = width // 2
    # (the first-row helpers get the start chunk modulo 8, as wide rows pass it)
    c0 = ", (unsigned)(col0 * 2 / 16 % 8)" if first_row else ""
    step = 8 if width <= 128 else 40    # (wide rows: every chunk position modulo 8)
    return (f"  for (int row0 = 0; row0 < 24; ++row0)\n"
            f"    for (int col0 = 0; col0 + 16 <= {ldm}; col0 += {step}) {{\n"
            f"      if ({int(first_row)} && row0 % 8) continue;\n"
            f"      for (unsigned l = 0; l < 32; ++l) {{\n"
            f"        pt_f f; pt_lane_id = l;\n"
            f"        {fn}(f, (const half*)pt_smem + row0 * {ldm} + col0, {ldm}{c0});\n"
            f"        printf(\"{fn} {width} %d %d %u %u\\n\", row0, col0, l, pt_seen);\n"
            f"      }}\n    }}\n")


#: row bytes of the swizzled ldmatrix helpers -> the Stage.swizzle mode
MODES = {32: "32B", 64: "64B", 128: "128B", 256: "128B/256", 512: "128B/512",
         1024: "128B/1024"}
WIDTHS = tuple(MODES)


@pytest.fixture(scope="module")
def lane_addresses(tmp_path_factory):
    """{(helper, width): {(row0, col0, lane): shared byte address}}: every ``ldmatrix``
    helper (plain, swizzled, swizzled first-row) compiled for the host by g++ with the
    instruction replaced by a capture of its address operand, over 16x16 regions of a
    float16 buffer of ``width``-byte rows at rows 0-23 (first-row helpers: 0, 8, 16) and
    every 8th column."""
    import shutil
    import subprocess

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not found")
    helpers, cases = [], []
    for call in ("mma.ldmatrix_x4", "mma.ldmatrix_x4_trans"):
        helpers.append(tc.C_HELPERS[call][1])
        for w in WIDTHS:
            cases.append(_case(tc.C_HELPERS[call][0], w, False))
            for first in (False, True):
                key = f"{call}_sw{w}" + ("r" if first else "")
                helpers.append(tc.C_HELPERS[key][1])
                cases.append(_case(tc.C_HELPERS[key][0], w, first))
    tmp = tmp_path_factory.mktemp("ldmatrix")
    src = tmp / "h.cpp"
    text = "\n".join(helpers).replace("asm volatile(", "PT_ASM(")
    src.write_text(_HARNESS + text + "\nint main() {\n" + "".join(cases)
                   + "  return 0;\n}\n")
    subprocess.run([cxx, "-O0", "-o", str(tmp / "h"), str(src)], check=True)
    out: dict = {}
    for line in subprocess.run([str(tmp / "h")], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        fn, w, row0, col0, lane, addr = line.split()
        out.setdefault((fn, int(w)), {})[(int(row0), int(col0), int(lane))] = int(addr)
    return out


@pytest.mark.parametrize("call", ["ldmatrix_x4", "ldmatrix_x4_trans"])
@pytest.mark.parametrize("width", WIDTHS)
def test_ldmatrix_helpers_address_the_swizzled_elements(lane_addresses, call, width):
    # every lane of every region: the swizzled helpers address where the swizzle put the
    # element the plain helper addresses in an unswizzled buffer (swizzle_elements of it)
    plain = lane_addresses[(call, width)]
    general = lane_addresses[(f"{call}_sw{width}", width)]
    first = lane_addresses[(f"{call}_sw{width}r", width)]
    mode = MODES[width]
    assert len(general) == len(plain) > 32 and len(first) > 32
    for key, a in plain.items():
        want = int(swizzle_elements(a, mode, 1))
        assert general[key] == want, key
        if key in first:
            assert first[key] == want, key
    # the swizzle moves some lanes (a helper ignoring it could not pass)
    assert any(general[k] != a for k, a in plain.items())


def test_first_row_chunk_of_region_offsets():
    # the first-row helper only where the region provably starts on the pattern's first
    # row (64B rows of float16: 32 elements, a period of 256): the chunk of its column
    from polytile import te

    k, t = te.var("k"), te.var("t")
    chunk = tc._first_row_chunk
    assert chunk(te.const(16, "int64"), 64, 2) == 2
    assert chunk(k * 4096 + t * 512 + 8, 64, 2) == 1
    assert chunk(k * 4096 + t * 32 + 16, 64, 2) is None    # rows t: any pattern row
    assert chunk(k * 4096 + 32 * 3, 64, 2) is None         # row 3 of the pattern
    assert chunk(k * 4096 + 4, 64, 2) is None              # not 16-byte aligned
    assert chunk(k * 4096 + 24, 64, 2) is None             # past the row's end
    # wide rows (512 bytes, 256 float16) from the start index per dimension of a
    # [slots, 32, 256] buffer: rows multiples of 8, column terms whole 128-byte lines
    wide = tc._first_row_chunk_wide
    shape = (4, 32, 256)
    assert wide((k, te.const(16, "int64"), t * 64 + 48), shape, 512, 2) == 6
    assert wide((k, t * 8, te.const(200, "int64")), shape, 512, 2) == 1   # chunk 25
    assert wide((k, t * 4, te.const(0, "int64")), shape, 512, 2) is None  # rows t * 4
    assert wide((k, te.const(0, "int64"), t * 32), shape, 512, 2) is None  # half lines
    assert wide(None, shape, 512, 2) is None


@pytest.mark.parametrize("M, N, K, block, warp, stages, frags", [
    # A rows of 64 bytes (64B swizzle), B rows of 64 bytes too; 3 k tiles in 2 stages with
    # fragment prefetch; A rows of 32 bytes (32B), B padded (rows of 96 bytes), no pipeline
    (32, 32, 96, (32, 32, 32), (16, 16), 2, "prefetch"),
    (16, 48, 32, (16, 48, 16), (16, 16), 1, "step"),
    # B rows of 256 bytes: the 128B pattern over wide rows ("128B/256"), 2 stages
    (16, 128, 48, (16, 128, 16), (16, 64), 2, "step")])
def test_swizzled_mma_gemm_on_the_interpreter(M, N, K, block, warp, stages, frags):
    s, args = tc.wmma_gemm(M, N, K, isa="mma", block=block, warp=warp, stages=stages,
                           frags=frags, swizzle=True)
    f = lower(s, args, target="cuda", stop_after=None)
    text = str(f)
    assert f"swizzle='{block[2] * 2}B'" in text.split("A.shared = alloc(")[1].split("\n")[0]
    b_rows = block[1] * 2
    if b_rows >= 256:
        assert f"swizzle='128B/{b_rows}'" in text.split("B.shared = alloc(")[1].split("\n")[0]
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
    s, args = tc.wmma_gemm(128, 256, 64, isa="mma", block=(128, 256, 32), warp=(64, 64),
                           stages=4, frags="prefetch", group=8, swizzle=True)
    src = polytile.build(s, args, target="cuda").get_source("cu")
    assert re.search(r"ldmatrix_x4_sw64r\(A_shared_wmma_matrix_a.*, 32, 2U\);", src)
    # B [32, 256] in the 128B pattern over its 512-byte rows, from chunk 0 and 2 of a line
    assert re.search(r"ldmatrix_x4_trans_sw512r\(B_shared_wmma_matrix_b.*, 256, 2U\);", src)
    # no padding: A 4 x 128 x 32, B 4 x 32 x 256 elements
    assert "// 16384 elements" in src and "// 32768 elements" in src
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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_best_on_the_gpu(dtype):
    # tensor_core.MMA_BEST (four k steps per tile, their fragments alternating between the
    # two register sets: fragment_prefetch.ALTERNATE_SETS) where its 128x256 blocks do not
    # divide N, three k tiles in a 4-stage pipeline
    M, N, K = 384, 640, 192
    s, args = tc.wmma_gemm(M, N, K, **dict(tc.MMA_BEST, dtype=dtype))
    f = polytile.build(s, args, target="cuda")
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    if dtype == "bfloat16":
        import ml_dtypes

        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    else:
        a, b = a.astype(dtype), b.astype(dtype)
    c = polytile.nd.array(np.full((M, N), np.nan, "float32"), device="cuda")
    f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
    ref = a.astype("float64") @ b.astype("float64")
    assert np.linalg.norm(c.numpy() - ref) / np.linalg.norm(ref) < 1e-5


def test_split_period_keeps_the_swizzled_offsets():
    # the C printer's swizzled index: the terms that are multiples of the pattern (slots,
    # tiles) added outside the XOR, which then depends on the rest alone; the same offsets
    from itertools import product

    from polytile import te
    from polytile.targets.c_expr import split_period
    from polytile.te.algebra import _eval

    k, t, u = te.var("k"), te.var("t"), te.var("u")
    e = k * 4096 + u * 512 + t * 32 + (t % 4) * 8 + 300
    hi, lo = split_period(e, 256)
    assert hi is not None and "k" not in str(lo) and "u" not in str(lo)
    for kv, tv, uv in product(range(3), range(9), range(4)):
        env = {k: kv, t: tv, u: uv}
        for mode, nbytes in (("64B", 2), ("128B", 2), ("32B", 4)):
            period = 8 * int(mode[:-1]) // nbytes
            h, lo_ = split_period(e, period)
            got = _eval(h, env) + _eval(swizzle_elements(lo_, mode, nbytes), env)
            assert got == swizzle_elements(_eval(e, env), mode, nbytes), (mode, env)
    assert split_period(t * 32 + 8, 256)[0] is None
