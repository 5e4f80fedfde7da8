"""AMD MFMA intrinsics: the lane layouts against entries of AMD's register-layout tables
(CDNA3 ISA guide section 7.1 / AMD Matrix Instruction Calculator), the C index expressions
against the same layout functions, MFMA GEMMs on the reference interpreter (which runs
each call through the lanes' registers) against numpy, the ``v_mfma`` instructions in
the code compiled for gfx90a, gfx942 and gfx950 (where hipcc exists), and refusals."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import BuildError, ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.pipeline import lower
from polytile.targets.hip import compile as hc
from polytile.targets.hip import mfma
from polytile.targets.hip.gemm import mfma_gemm
from polytile.te import dtype as dt

from helpers import rand

needs_hipcc = pytest.mark.skipif(hc.hipcc_path() is None,
                                 reason="needs hipcc (apt-get install hipcc libamdhip64-dev "
                                        "rocm-device-libs)")


# ------------------------------------------------------------------ layouts
# (instruction, matrix, row, col) -> (lane, register element), read off the calculator's
# `--register-layout` tables (e.g. v_mfma_f32_32x32x8f16 --A-matrix: A[5][6] = v1{37}.[15:0],
# the low half of VGPR 1, i.e. element 2 of the lane's four f16 values)
GUIDE = [
    ("v_mfma_f32_32x32x8f16", "a", 5, 6, 37, 2),
    ("v_mfma_f32_32x32x8f16", "a", 31, 3, 31, 3),
    ("v_mfma_f32_32x32x8f16", "b", 6, 5, 37, 2),
    ("v_mfma_f32_32x32x8f16", "c", 9, 3, 3, 5),       # D[9][3] = v5{3}
    ("v_mfma_f32_32x32x8f16", "c", 13, 3, 35, 5),     # D[13][3] = v5{35}
    ("v_mfma_f32_32x32x8f16", "c", 31, 31, 63, 15),   # D[31][31] = v15{63}
    ("v_mfma_f32_32x32x8f16", "c", 4, 0, 32, 0),      # D[4][0] = v0{32}
    ("v_mfma_f32_16x16x16f16", "a", 13, 9, 45, 1),    # A[13][9] = v0{45}.[31:16]
    ("v_mfma_f32_16x16x16f16", "b", 15, 2, 50, 3),
    ("v_mfma_f32_16x16x16f16", "c", 13, 7, 55, 1),    # D[13][7] = v1{55}
    ("v_mfma_i32_16x16x32_i8", "a", 3, 20, 35, 4),    # A[3][20] = v1{35}.[7:0]
    ("v_mfma_i32_16x16x32_i8", "b", 31, 15, 63, 7),
    ("v_mfma_i32_16x16x16i8", "a", 3, 7, 19, 3),      # A[3][7] = v0{19}.[31:24]
]


@pytest.mark.parametrize("name, which, row, col, lane, r", GUIDE)
def test_layouts_match_the_guide_tables(name, which, row, col, lane, r):
    lay = getattr(mfma.instruction(name), which)
    assert lay.at(lane, r) == (row, col)
    assert lay.table()[row, col] == lane * lay.per_lane + r


@pytest.mark.parametrize("name", list(mfma.INSTRUCTIONS))
def test_every_layout_holds_each_element_once_and_prints_the_same_index(name):
    ins = mfma.instruction(name)
    for lay, rows, cols in ((ins.a, ins.m, ins.k), (ins.b, ins.k, ins.n),
                            (ins.c, ins.m, ins.n)):
        assert (lay.rows, lay.cols) == (rows, cols)
        assert lay.per_lane * 64 == rows * cols
        assert sorted(lay.table().ravel()) == list(range(rows * cols))
        text = lay.c_index("l", "r", "ld").replace("/", "//")
        for lane in range(64):
            for r in range(lay.per_lane):
                i, j = lay.at(lane, r)
                assert eval(text, {"l": lane, "r": r, "ld": 1000}) == i * 1000 + j


def test_a_broken_layout_is_refused_and_poisons_the_emulation():
    bad = mfma.Layout(4, 4, 1, lambda lane, r: (lane % 4, 0))
    with pytest.raises(ValueError, match="held twice"):
        bad.table()
    # the interpreter's model reads each tile through the layouts: the right ones give
    # the product, a layout that loses elements leaves poison in the result
    ins = mfma.instruction("v_mfma_f32_16x16x16f16")
    a, b = rand((16, 16), "float16"), rand((16, 16), "float16", seed=1)
    c = np.zeros((16, 16), "float32")
    mfma._emulator(ins)("update", [a, b, c])
    np.testing.assert_allclose(c, a.astype("float64") @ b.astype("float64"), rtol=1e-5)
    holes = mfma.Layout(16, 16, 4, lambda lane, r: (lane % 16, (lane // 16) * 4 + r % 2))
    c = np.zeros((16, 16), "float32")
    mfma._emulator(ins, (holes, ins.b, ins.c))("update", [a, b, c])
    assert np.isnan(c).all()


# ------------------------------------------------------------------ GEMMs on the interpreter
def _inputs(M, N, K, dtype, seed=0):
    a, b = rand((M, K), dtype, seed=seed), rand((K, N), dtype, seed=seed + 1)
    if dtype == "bfloat16":
        return a, b, dt.bfloat16_values(a), dt.bfloat16_values(b)
    return a, b, a, b


CASES = [  # (instruction, M, N, K, block, wave): odd tile counts, K not a power of two
    ("v_mfma_f32_32x32x8f16", 96, 64, 40, (32, 64, 8), (32, 32)),
    ("v_mfma_f32_16x16x16f16", 48, 80, 48, (16, 16, 16), (16, 16)),
    ("v_mfma_f32_32x32x8bf16_1k", 32, 96, 24, (32, 32, 8), (32, 32)),
    ("v_mfma_f32_16x16x16bf16_1k", 48, 16, 80, (48, 16, 16), (16, 16)),
    ("v_mfma_i32_16x16x16i8", 16, 48, 48, (16, 48, 16), (16, 16)),
    ("v_mfma_i32_16x16x32_i8", 48, 16, 96, (16, 16, 32), (16, 16)),
]


def _arch(name):
    return mfma.instruction(name).archs[-1]


@pytest.mark.parametrize("name, M, N, K, block, wave", CASES)
def test_mfma_gemm_on_the_interpreter_matches_numpy(name, M, N, K, block, wave):
    ins = mfma.instruction(name)
    s, args = mfma_gemm(M, N, K, instr=name, block=block, wave=wave)
    f = lower(s, args, target=f"hip -mcpu={_arch(name)}", stop_after=None)
    text = str(f)
    assert f"tensorize mfma_{name[7:]}.update" in text
    assert f"tensorize mfma_store_{ins.m}x{ins.n}_{ins.acc}.body" in text
    a, b, av, bv = _inputs(M, N, K, ins.dtype)
    c = np.full((M, N), np.nan if ins.acc == "float32" else np.iinfo("int32").min, ins.acc)
    run(f, a, b, c)
    ref = av.astype("float64") @ bv.astype("float64")
    if ins.acc == "int32":
        np.testing.assert_array_equal(c, ref.astype("int64"))
    else:
        err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
        assert err < 1e-6, err


# ------------------------------------------------------------------ compiled code
@needs_hipcc
@pytest.mark.hip
@pytest.mark.parametrize("name, M, N, K, block, wave", CASES)
def test_mfma_gemm_compiles_with_v_mfma(name, M, N, K, block, wave):
    ins = mfma.instruction(name)
    s, args = mfma_gemm(M, N, K, instr=name, block=block, wave=wave)
    calls = (M // ins.m) * (N // ins.n) * (K // ins.k) // ((M // block[0]) * (N // block[1]))
    for mcpu in ins.archs:
        m = polytile.build(s, args, target=f"hip -mcpu={mcpu}")
        assert ins.builtin in m.get_source()
        assert "uninitialized" not in m.code_object.log, m.code_object.log
        found = m.mfma_instructions()
        # gfx942/gfx950 spell the f16/bf16 forms with an underscore before the type
        spelled = {name, name.replace("x8f16", "x8_f16").replace("x16f16", "x16_f16")
                   .replace("x8bf16_1k", "x8_bf16").replace("x16bf16_1k", "x16_bf16")}
        assert found and set(found) <= spelled, (mcpu, found)
        # one instruction per call of one wavefront (the code unrolls the k steps it can)
        assert len(found) <= calls


# ------------------------------------------------------------------ refusals
def test_sizes_the_tiles_do_not_divide_are_refused():
    s, args = mfma_gemm(40, 64, 32)
    with pytest.raises(ScheduleError, match="tensorize"):
        lower(s, args, target="hip -mcpu=gfx942", stop_after=None)


def test_an_instruction_the_mcpu_lacks_is_refused():
    s, args = mfma_gemm(16, 16, 16, instr="v_mfma_i32_16x16x16i8", block=(16, 16, 16),
                        wave=(16, 16))
    with pytest.raises(BuildError, match=r"(?s)tensorize: intrinsic 'mfma_i32_16x16x16i8' "
                                         r"of function 'main' uses v_mfma_i32_16x16x16i8, "
                                         r"which is not an instruction of gfx942.*hint: "
                                         r"v_mfma_i32_16x16x16i8 exists on gfx90a"):
        polytile.build(s, args, target="hip -mcpu=gfx942")


def test_mfma_tiles_bound_to_threadidx_x_are_refused():
    ins = mfma.instruction("v_mfma_f32_32x32x8f16")
    A = te.placeholder((64, 16), name="A", dtype="float16")
    B = te.placeholder((16, 32), name="B", dtype="float16")
    C = mfma._matmul(A, B, "float32", "C")
    s = te.create_schedule(C.op)
    CF = s.cache_write(C, ins.scope)
    wi, ti = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(wi, te.thread_axis("threadIdx.x"))
    s[C].tensorize(ti, mfma.mfma_store(32, 32))
    s[CF].compute_at(s[C], wi)
    ko, ki = s[CF].split(CF.op.reduce_axis[0], factor=8)
    s[CF].reorder(ko, *CF.op.axis, ki)
    s[CF].tensorize(CF.op.axis[0], mfma.mfma_mma())
    with pytest.raises(ScheduleError, match=r"bind: stage '.*' calls a warp-collective "
                                            r"tensor intrinsic inside loop 'i.outer' of stage "
                                            r"'C', which is bound to 'threadIdx.x'"):
        lower(s, [A, B, C], target="hip -mcpu=gfx942", stop_after=None)


def test_fewer_lanes_than_a_wavefront_are_refused(monkeypatch):
    from polytile.targets.hip import gemm

    monkeypatch.setattr(gemm, "WAVEFRONT", 32)   # LDS copies on 32 threadIdx.x lanes
    s, args = gemm.mfma_gemm(64, 64, 16, block=(64, 64, 8), wave=(32, 32), vector=2)
    with pytest.raises(ScheduleError, match=r"bind: the kernel of stage 'C' has threadIdx.x "
                                            r"extent 32, but stage '.*' calls a tensor "
                                            r"intrinsic that the 64 lanes of a wavefront run "
                                            r"together; a threadIdx.x extent that is a "
                                            r"multiple of 64"):
        lower(s, args, target="hip -mcpu=gfx942", stop_after=None)
    # the same schedule on CUDA's 32-lane warps passes this check
