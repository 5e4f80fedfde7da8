"""Loop-IR features: fixed length, finite, and they see what the schedule did."""

from __future__ import annotations

import math

import pytest

from polytile.autotune import get_template
from polytile.autotune.features import KINDS, N_FEATURES, N_GLOBAL, PER_LEVEL, extract_features
from polytile.schedule.pipeline import finalize, lower

from test_templates import SMALL


def _features(name, args, knobs=None):
    t = get_template(name)
    sp = t.space(args)
    cfg = sp.default() if knobs is None else sp.from_json(knobs)
    s, tensors = t.instantiate(cfg, args)
    return extract_features(finalize(lower(s, tensors)))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_fixed_length_and_finite(name):
    f = _features(name, SMALL[name])
    assert len(f) == N_FEATURES and all(math.isfinite(x) for x in f)


def test_matmul_features_follow_the_schedule():
    args = (64, 64, 64)
    base = dict(get_template("matmul").space(args).default().knob_values(),
                tile_i=[-1, 8, 8], pack_a=False, pack_b=False, order="ij")
    f = _features("matmul", args, base)
    # innermost level: the vectorized j2 loop of 32 lanes
    assert f[1 + KINDS.index("vectorized")] == 1.0
    assert f[0] == pytest.approx(math.log2(33))
    g = N_FEATURES - N_GLOBAL
    assert f[g + 2] == pytest.approx(math.log2(9))  # 8 unrolled rows: 8 stores in the nest
    rolled = dict(base, unroll=["none", "none"])
    f2 = _features("matmul", args, rolled)
    assert f2[g + 2] == pytest.approx(1.0)  # one store
    assert f2[PER_LEVEL] != f[PER_LEVEL]  # level 1 is now the i2 loop, not k1


def _gpu_memory(knobs=None, target="cuda"):
    from polytile.autotune.features import GPU_OFFSET

    t = get_template("matmul")
    args = (256, 256, 256)
    sp = t.space(args, "float32", target)
    cfg = sp.default() if knobs is None else sp.from_json(knobs)
    s, tensors = t.instantiate(cfg, args, "float32", target)
    f = extract_features(lower(s, tensors, target=target, stop_after="storage_flattening"))
    g = N_FEATURES - N_GLOBAL + GPU_OFFSET + 6
    return f[g:g + 6]


def test_gpu_bytes_per_level_and_bank_conflicts_of_the_tutorial_gemm():
    """The contiguous GPU matmul (128x128 block tile, 16x16 threads, 8x8 per thread, k tile
    16, float4 copies): global bytes = A and B tiles copied once per block and k step plus
    C stored once; its inner product reads A.shared[128 * ty] (2 rows of lanes on one
    bank: 2-way) and B.shared[8 * tx] (stride 8 words: 4-way)."""
    # the contiguous 8x8 tiles without a pipeline (the default config before the layout,
    # stages and group knobs; a record without them loads as this config)
    glob, shared, local, bank_mean, bank_max, sectors = _gpu_memory(
        {"tile": [128, 128, 16, 8, 8], "vec": 4, "unroll_k": True})
    blocks, threads = 4, 256
    a_b = 2 * (128 * 16) * 16 * blocks * 4      # A and B tiles: 16 k steps, 4 blocks
    c = 256 * 256 * 4
    assert glob == pytest.approx(math.log2(1 + a_b + c))
    assert shared > glob and local > glob
    assert bank_max == pytest.approx(2.0)        # log2 of the 4-way B access
    assert 1.0 < bank_mean < 2.0                 # between the 2-way and 4-way reads
    assert sectors == pytest.approx(0.0)         # float4 rows: coalesced
    small = _gpu_memory({"tile": [32, 32, 8, 2, 2], "vec": 1, "unroll_k": False, "layout": "contiguous", "stages": 1, "group": 1})
    assert small[3] == small[4] == 0.0           # conflict-free
    assert _gpu_memory(None, "llvm") == [0.0] * 6


def test_warp_cost_model():
    from polytile.autotune.features import _warp_cost

    lanes = range(32)
    assert _warp_cost([i for i in lanes], 4, 1, "shared") == 1.0
    assert _warp_cost([32 * i for i in lanes], 4, 1, "shared") == 32.0
    assert _warp_cost([2 * i for i in lanes], 4, 1, "shared") == 2.0
    assert _warp_cost([0] * 32, 4, 1, "shared") == 1.0              # broadcast
    assert _warp_cost([33 * i for i in lanes], 4, 1, "shared") == 1.0  # padded rows
    assert _warp_cost([4 * i for i in lanes], 4, 4, "shared") == 1.0  # float4: 4 phases
    assert _warp_cost([i for i in lanes], 4, 1, "global") == 1.0
    assert _warp_cost([8 * i for i in lanes], 4, 1, "global") == 8.0
    assert _warp_cost([i for i in lanes], 2, 1, "global") == 1.0


def test_let_values_are_evaluated_once_per_valuation():
    """Strides and lane addresses read the function's lets lazily, each once per
    valuation (memoized in the valuation's env, shared by every index): a GPU GEMM's
    1000+ unrolled indices through the same let chains took 18-31 s of a candidate's
    build when every let was evaluated again for each index. A let that reads memory
    makes only the indices that read it unknown."""
    from polytile.autotune.features import _UNKNOWN, _lane_addresses, _stride
    from polytile.schedule.loop_ir import Load
    from polytile.te.expr import Binary, Const, Var

    i32 = "int32"

    def b(op, x, y):
        return Binary(i32, op, x, Const(i32, y) if isinstance(y, int) else y)

    tx, k = Var(i32, "tx"), Var(i32, "k")
    a, c, m = Var(i32, "a"), Var(i32, "c"), Var(i32, "m")
    mem = Load(i32, None, (Const(i32, 0),))
    lets = {a: b("mul", tx, 2), c: b("add", b("mul", k, 16), a), m: b("add", mem, 1)}
    memo: dict = {}
    assert _stride(b("mul", c, 4), k, lets, memo) == 64
    assert _stride(b("mul", c, 4), tx, lets, memo) == 8
    assert memo[k][c] == 16 and memo[None][c] == 0    # memoized per valuation
    assert _stride(b("add", m, k), k, lets, memo) is None
    assert memo[k][m] is _UNKNOWN
    assert _stride(b("add", c, 3), k, lets, memo) == 16  # an unknown let elsewhere: no harm
    envs = [{tx: lane} for lane in range(4)]
    assert _lane_addresses(b("floordiv", c, 4), envs, lets) == [0, 0, 1, 1]
    assert [e[a] for e in envs] == [0, 2, 4, 6]
    assert _lane_addresses(m, envs, lets) is None


def test_tensor_core_gemm_main_nest_is_its_mma():
    """A tensorized GEMM computes in tensor intrinsic calls (no Store of its own): the
    main nest is the loop of its mma.sync calls, whose work is the GEMM's multiply-adds
    per warp (2 M N K over the block's 4 warps), not a shared-memory copy loop of 0
    flops (the H200 fp16 GEMM pool's loop-IR model ranked configs with a Spearman rho of
    0.36-0.69 from 8-32 of them before, 0.39-0.72 after)."""
    from polytile.autotune.features import GPU_OFFSET, _intrin_flops, _Walk

    M, N, K = 128, 128, 64
    target = "cuda -arch=sm_80"
    t = get_template("matmul")
    sp = t.space((M, N, K), "float16", target)
    s, tensors = t.instantiate(sp.default(), (M, N, K), "float16", target)
    func = lower(s, tensors, target=target, stop_after="storage_flattening")
    f = extract_features(func)
    g = N_FEATURES - N_GLOBAL
    warps = (2 ** f[g + GPU_OFFSET] - 1) / 32
    assert warps == pytest.approx(4)
    assert 2 ** f[g] - 1 == pytest.approx(2 * M * N * K / warps, rel=0.01)
    w = _Walk()
    w.visit(func.body)
    flops = {c.intrin.name: _intrin_flops(c) for c, _ in w.calls}
    assert flops["mma_m16n8k16_float16_float32"] == 2 * 16 * 16 * 16   # two m16n8k16
    assert flops["mma_load_a"] == 0 and flops["mma_store_float32"] == 0   # copies
