"""The tensor-core GEMM space of the ``cuda`` ``matmul`` template (float16 and bfloat16).

``matmul`` on ``cuda`` with ``dtype`` float16 or bfloat16 computes ``C[M, N] = A[M, K] @
B[K, N]`` with float32 accumulation and a float32 ``C`` (the compute of
:func:`polytile.targets.cuda.tensor_core.wmma_gemm`: ``te.sum(A[i, k].astype("float32") *
B[k, j].astype("float32"))``), scheduled by that same function, the hand schedule of
``tutorials/05_tensor_core_gemm.py`` and ``benchmarks/gpu_gemm.py``. Knobs:

==========  =================================================================================
``isa``     ``"mma"``: ``ldmatrix`` + ``mma.sync.aligned.m16n8k16`` (sm_80+); ``"wmma"``:
            ``nvcuda::wmma`` 16x16x16 fragments
``tile``    ``[BM, BN, BK, WM, WN]``: block tile (``blockIdx``), its k tile in shared
            memory, the warp tile (``threadIdx.z/y``, ``WM/16 x WN/16`` accumulator tiles)
``stages``  software-pipeline depth of the k-tile loop (``cp.async``; 1: none)
``frags``   ``"step"`` (fragments per 16-wide k step), ``"tile"`` (a whole k tile's
            fragments before its MMAs), ``"prefetch"`` (the next tile's first fragments
            loaded across the barrier; ``pipeline(..., fragment_prefetch=True)``)
``group``   blocks launched ``group`` tile rows at a time (L2 reuse)
``pad``     shared rows padded by ``pad`` elements (``storage_align``; 8: 16 bytes, the
            8 rows an ``ldmatrix`` reads in distinct banks; 0: unpadded); ``"swizzle"``
            (mma.sync): tiles of 32 to 1024-byte rows XOR-swizzled instead, whole
            128-byte lines per 16-byte ``cp.async`` (``wmma_gemm(..., swizzle=True)``),
            the others padded by 8
``copy``    ``cuda -arch=sm_90a`` only, for wgmma: the shared tiles filled by the threads'
            ``cp.async`` or by TMA (``"tma"``: one bulk tensor copy per 64-column box,
            completing on an mbarrier per slot; ``pipeline(..., tma=True)``), where ``B``
            is read MN-major and the k loop is pipelined; records from before the knob
            load as ``"cp.async"``
``store``   ``cuda -arch=sm_90a`` only, for wgmma: the float32 ``C`` stored one float4 per
            thread and 8 columns (``"16B"``) or the same with streaming stores
            (``"16B_stream"``, ``st.global.cs``: ``C`` does not displace the operand
            panels in L2); :func:`~polytile.targets.cuda.wgmma_intrin.wgmma_store`;
            records from before the knob load as ``"16B"``
==========  =================================================================================

The ``tile`` list holds only tiles that divide the shape (a partial 16x16 tile cannot be
one MMA) and fit the device (:mod:`.gpu_limits`): threads, registers (an estimate, see
:func:`tc_registers`) and shared memory, the opt-in dynamic shared memory of pipelined
kernels included (:func:`tc_shared_bytes`). Knob values a config cannot use are mapped to
the nearest valid ones (:func:`effective`: a pipeline too deep for the shared memory is the
deepest that fits, a fragment prefetch without a pipeline loads per step, a group that does
not divide the tile rows the largest that does), and :func:`tc_preferred` keeps the tuners
to the configs that are their own effective values. The default config is the fastest hand
schedule measured (:data:`polytile.targets.cuda.tensor_core.MMA_BEST`, 0.561x cuBLAS at
4096^3 on an H200: 128x256x64 blocks, 4 stages, both shared tiles swizzled) where its
tiles divide the shape.

Figures (H200, 4096^3 float16, one run of ``benchmarks/tune_gpu.py --dtypes float16
--target "cuda -arch=sm_90a" --trials 24 --triton``, 2026-12-02): the best config is the
sm_90a default (wgmma, 128x256x64, 4 stages): 543 TFLOP/s in the runner, 0.72x cuBLAS
(756) and 0.80x Triton (677) measured after the run, above the mma.sync hand schedule
(371, the sm_90 default) but below the tensorize wgmma schedule of ``C = A @ Bt^T`` (601):
the transpose kernel of B cost about 24 us (64 MiB at 2.8 TB/s). wgmma blocks of a multiple
of 64 columns now read ``B`` MN-major in the MMA (``wgmma_mma(..., b_major="mn")``), one
kernel, with the blocks in groups of tile rows (the ``group`` knob) and the 16-byte
epilogue: the default config measured 639.1 TFLOP/s (0.834x cuBLAS 766.4, 0.93x Triton
689.4) in ``benchmarks/gpu_gemm.py --isa tensorize --tsweep`` (H200, 2026-12-02; ungrouped
with float2 stores 583.0), and the tuning run of ``benchmarks/tune_gpu.py --dtypes float16
--target "cuda -arch=sm_90a" --trials 12 --triton`` (12 trials in 32 s) kept it as the
best: 625.2 TFLOP/s in the runner (was 543), 0.83x cuBLAS (755.4) and 0.91x Triton (684.0)
measured after the run. Groups of 4, 8 and 16 tile rows measured alike (626.4, 626.8,
627.8 beside cuBLAS 733.7). Copying the tiles by TMA (the ``copy`` knob, now the sm_90a
default) raised the default config to 698.3 TFLOP/s beside cuBLAS 761.9 and Triton 685.0
(1.019x Triton; cp.async 635.4 in the same run of ``benchmarks/gpu_gemm.py --isa
tensorize --tma``; a second run: 691.6 beside cuBLAS 748.6 and Triton 669.5, cp.async
624.9), and ``benchmarks/tune_gpu.py --dtypes float16 --target "cuda -arch=sm_90a"
--trials 12 --budget 40 --triton`` (9 trials in 50 s) kept it as the best: 682.8 TFLOP/s in
the runner, 1.015x Triton (672.6) and 0.912x cuBLAS (748.9) measured after the run.
Those runner figures (L2-cold, the default timed first on clocks still rising) and the
anchors' (timed after, in another process) were no comparison: ``benchmarks/gemm_final.py``
times the configs, cuBLAS and Triton interleaved in one process. On an H200 whose cuBLAS
ran at 659.7 TFLOP/s (2026-12-02 12:23, rotated buffers) the default made 607.3 (0.921x
cuBLAS, 1.031x Triton 589.1), bfloat16 640.9 (0.931x cuBLAS 688.2, 1.038x Triton 617.7);
streaming stores 601.8, 256x128 blocks 606.3, 128x128 in 3 stages 517.6; the tuning run's
pick (groups of 16) 610.2 beside the default's 611.9. With the final re-measure warmed up
and its 1 % margin (2026-12-02 13:00, ``benchmarks/tune_gpu.py --trials 8 --triton``) the
tuner kept the default: 610.3 TFLOP/s, 0.921x cuBLAS (662.6), 1.030x Triton (592.4);
bfloat16 637.0, 0.923x cuBLAS (690.4), 1.032x Triton (617.2).

Shapes whose sides are not multiples of 16 keep the CUDA-core schedule of
:mod:`.templates_gpu` (same compute: float32 accumulation and output).

Sources: PTX ISA 9.7.13 (``mma``, ``ldmatrix``), 9.7.9.25 (``cp.async``); CUTLASS's
multistage GEMM (block/warp tiles, stages) and Triton's ``GROUP_M`` block order.
"""

from __future__ import annotations

from polytile import te
from polytile.errors import TuneError, format_error
from polytile.targets.gpu_tiling import group_rows

from . import gpu_limits

#: block sides, warp sides and k tiles the space draws from
TC_BLOCKS = (16, 32, 64, 128, 256)
TC_WARPS = (16, 32, 64)
TC_KTILES = (16, 32, 64)
TC_STAGES = (1, 2, 3, 4)
TC_FRAGS = ("step", "tile", "prefetch")
TC_GROUPS = (1, 4, 8, 16)
TC_PADS = (8, 0, "swizzle")
#: how the wgmma shared tiles are filled (``pipeline(..., tma=...)``)
TC_COPIES = ("cp.async", "tma")
#: the stores of the wgmma accumulators (``wgmma_store(..., epilogue=...)``)
TC_STORES = ("16B", "16B_stream")
#: wgmma (sm_90a) blocks: ``BM`` rows (one warpgroup per 64) x ``BN`` columns (one
#: ``m64nBNk16`` per warpgroup and k step), k tiles of 64 (128-byte swizzled rows)
WG_BLOCKS_M = (64, 128, 256)
WG_BLOCKS_N = (16, 32, 64, 128, 256)
WG_BK = 64
#: the columns of one MN-major atom of B (a 128-byte swizzled row of float16): blocks whose
#: ``BN`` is a multiple read ``B`` MN-major, without a transpose kernel
WG_MN_ATOM = 64
#: Every side of a tensor-core GEMM must be a multiple of this (one MMA tile).
TC_ALIGN = 16
#: The k of one MMA step (``m16n8k16``, WMMA 16x16x16 for float16/bfloat16): fragments
#: are loaded per ``TC_K_STEP`` of k (``tensor_core.k_tile``)
TC_K_STEP = 16
#: the sides from which the search keeps the regions measured fast (as ``templates_gpu``)
LARGE = 1024


def tensor_core_dtype(dtype: str) -> bool:
    """Whether ``matmul`` on ``cuda`` runs ``dtype`` on tensor cores."""
    return dtype in ("float16", "bfloat16")


def tc_shape_ok(M: int, N: int, K: int) -> bool:
    """Whether every side of the GEMM is a multiple of :data:`TC_ALIGN`."""
    return all(isinstance(d, int) and d % TC_ALIGN == 0 for d in (M, N, K))


def tc_registers(warp: tuple, bk: int, frags: str) -> int:
    """Estimated 32-bit registers per thread of a warp tile ``(WM, WN)``: the float32
    accumulators (``WM * WN / 32``), the A and B fragments of one 16-wide k step (4
    registers per 16x16 tile; twice that with ``"prefetch"``, ``BK / 16`` times with
    ``"tile"``) and 40 for addresses and loop state. Above ``ptxas -v`` by 5-25% on the
    ``MMA_VARIANTS`` of ``benchmarks/gpu_gemm.py`` (sm_90, nvcc 13: 64x64 prefetch 230
    against 232; 64x64 per step 164-212 against 200; 32x64 per tile 126 against 152)."""
    wm, wn = warp
    operands = (wm // 16 + wn // 16) * 4
    times = {"step": 1, "prefetch": 2, "tile": max(1, bk // TC_K_STEP)}[frags]
    return wm * wn // 32 + operands * times + 40


def tc_shared_bytes(tile: list, stages: int, pad, itemsize: int = 2) -> int:
    """Shared memory (bytes) of ``tile = [BM, BN, BK, ...]`` in ``stages`` buffers, rows
    padded by ``pad`` elements: ``stages * (BM * (BK + pad) + BK * (BN + pad)) * itemsize``
    (``pad="swizzle"``: at most 8, the bound taken)."""
    bm, bn, bk = tile[:3]
    pad = 8 if pad == "swizzle" else pad
    return stages * (bm * (bk + pad) + bk * (bn + pad)) * itemsize


def _shared_top(limits: gpu_limits.GPULimits, stages: int) -> int:
    # above the static 48 KiB only pipelined kernels opt in (schedule.gpu.check_shared_memory)
    return limits.shared_bytes_optin if stages > 1 else limits.shared_bytes_per_block


def _fitting_stages(knob: int, k_tiles: int, nbytes, limits: gpu_limits.GPULimits) -> int:
    """The pipeline depth used for knob ``stages`` = ``knob`` over ``k_tiles`` k tiles, where
    ``nbytes(s)`` is the shared memory (bytes) of ``s`` stages: the deepest at most ``knob``
    and ``k_tiles`` that fits (1 stage within the static shared memory, more within the
    opt-in one), and 2 where one stage exceeds the static shared memory and two fit (the
    tile lists keep only tiles for which one of the two fits)."""
    st = max(1, min(knob, k_tiles))
    while st > 1 and nbytes(st) > _shared_top(limits, st):
        st -= 1
    if st == 1 and nbytes(1) > _shared_top(limits, 1) and k_tiles >= 2:
        st = 2
    return st


def tc_fits_shared(tile: list, K: int, limits: gpu_limits.GPULimits) -> bool:
    """Whether the shared tiles of ``tile`` (rows padded by the largest pad) fit in one
    stage within the static shared memory, or (two k tiles or more) in a two-stage pipeline
    within the opt-in shared memory: every config of the tile can then launch."""
    pad = max(p for p in TC_PADS if isinstance(p, int))
    return (tc_shared_bytes(tile, 1, pad) <= limits.shared_bytes_per_block
            or (K // tile[2] >= 2 and tc_shared_bytes(tile, 2, pad)
                <= limits.shared_bytes_optin))


def tc_tiles(limits: gpu_limits.GPULimits, M: int, N: int, K: int) -> list:
    """``[BM, BN, BK, WM, WN]`` lists of tensor-core tiles dividing the ``M x N x K``
    GEMM (warp tiles dividing block tiles) whose block of ``32 * (BM / WM) * (BN / WN)``
    threads fits ``limits``: threads per block, registers (:func:`tc_registers`, fragments
    per step) and shared memory (:func:`tc_fits_shared`)."""
    out = []
    for bm in TC_BLOCKS:
        for bn in TC_BLOCKS:
            for bk in TC_KTILES:
                if M % bm or N % bn or K % bk:
                    continue
                for wm in TC_WARPS:
                    for wn in TC_WARPS:
                        if bm % wm or bn % wn:
                            continue
                        threads = 32 * (bm // wm) * (bn // wn)
                        if not tc_fits_shared([bm, bn, bk], K, limits):
                            continue
                        if gpu_limits.fits(limits, threads, 0,
                                           tc_registers((wm, wn), bk, "step")):
                            out.append([bm, bn, bk, wm, wn])
    return out


def _mma_tile(tile) -> bool:
    """Whether ``tile`` has an mma.sync/WMMA warp tile (sides in :data:`TC_WARPS`)."""
    return tile[3] in TC_WARPS and tile[4] in TC_WARPS


def wgmma_target() -> bool:
    """Whether the template is instantiated for ``cuda -arch=sm_90a`` (wgmma needs the
    arch-specific features of sm_90a; :func:`.gpu_limits.current_target`)."""
    return gpu_limits.arch_of(gpu_limits.current_target()) == "sm_90a"


def wg_shared_bytes(block: list, stages: int) -> int:
    """Shared memory (bytes) of ``stages`` float16 k tiles of the wgmma ``block = [BM, BN]``
    (unpadded: 128B-swizzled rows): ``stages * (BM + BN) * 64 * 2``."""
    return stages * (block[0] + block[1]) * WG_BK * 2


def wg_stages_fit(block: list, stages: int, limits: gpu_limits.GPULimits) -> bool:
    """Whether ``stages`` k tiles of the wgmma ``block = [BM, BN]`` fit the shared memory."""
    return wg_shared_bytes(block, stages) <= _shared_top(limits, stages)


def wg_tiles(limits: gpu_limits.GPULimits, M: int, N: int, K: int) -> list:
    """wgmma tiles ``[BM, BN, 64, 64, BN]`` (block ``BM x BN``, k tiles of 64, a warpgroup
    per ``64 x BN``) dividing the GEMM (``K`` a multiple of 64) whose ``2 * BM`` threads fit
    ``limits``, with ``BN / 2`` float32 accumulators + 40 registers per thread and two
    stages of shared tiles."""
    if K % WG_BK:
        return []
    out = []
    for bm in WG_BLOCKS_M:
        for bn in WG_BLOCKS_N:
            if M % bm or N % bn:
                continue
            if gpu_limits.fits(limits, 2 * bm, 0, bn // 2 + 40) and (
                    wg_stages_fit([bm, bn], 1, limits)
                    or (K // WG_BK >= 2 and wg_stages_fit([bm, bn], 2, limits))):
                out.append([bm, bn, WG_BK, 64, bn])
    return out


def effective(v: dict, shape: tuple, limits: gpu_limits.GPULimits,
              defaults: dict | None = None, wg: frozenset = frozenset()) -> dict:
    """The knob values the schedule uses for the knob values ``v`` at ``shape = (M, N,
    K)`` (``wg``: the tuples of :func:`wg_tiles`; ``defaults``: the default config):

    - ``isa``: ``"wgmma"`` exactly for a tile of ``wg`` asked for with ``"wgmma"``, or
      that is no mma.sync/WMMA tile (its warp tile is not in :data:`TC_WARPS`);
      ``"wgmma"`` with another tile is ``"mma"``;
    - ``stages``: the deepest at most the knob (and the number of k tiles) whose shared
      tiles fit, 2 where one stage exceeds the static 48 KiB (:func:`_fitting_stages`);
    - ``frags``: ``"step"`` where ``"prefetch"`` lacks a pipeline, two k steps per tile
      or mma.sync (WMMA does not prefetch), and where ``"tile"``/``"prefetch"`` would
      exceed the registers (:func:`tc_registers`);
    - ``pad``: ``"swizzle"`` is 8 on WMMA (its fragment loads read padded rows);
    - ``group``: the largest divisor of the tile rows at most the knob
      (:func:`~polytile.targets.gpu_tiling.group_rows`), on wgmma too;
    - on wgmma, the knobs it does not read (``frags``, ``pad``) are their ``defaults``,
      and off wgmma ``store`` is its default;
    - ``copy``: ``"tma"`` only on wgmma with a pipeline (2 stages or more) and ``B`` read
      MN-major (``BN`` and ``N`` multiples of 64: the tensor maps are of the function's
      arguments, not of the transposed copy), else ``"cp.async"``."""
    defaults = defaults or {}
    tile = tuple(v["tile"])
    isa = v["isa"]
    if isa == "wgmma" and tile not in wg:
        isa = "mma"
    elif isa != "wgmma" and tile in wg and not _mma_tile(tile):
        isa = "wgmma"
    v = {**v, "isa": isa}
    M, N, K = shape
    if isa == "wgmma":
        st = _fitting_stages(v["stages"], K // WG_BK, lambda n: wg_shared_bytes(tile, n),
                             limits)
        copy = v.get("copy", "cp.async")
        if st < 2 or tile[1] % WG_MN_ATOM or N % WG_MN_ATOM:
            copy = "cp.async"
        return {**v, **{k: defaults[k] for k in ("frags", "pad") if k in defaults},
                "stages": st, "group": group_rows(v["group"], M // tile[0]),
                **({"copy": copy} if "copy" in v else {})}
    if "copy" in v:
        v = {**v, "copy": "cp.async"}
    if "store" in v:
        v = {**v, "store": defaults.get("store", TC_STORES[0])}
    bm, bn, bk, wm, wn = tile
    st = _fitting_stages(v["stages"], K // bk,
                         lambda n: tc_shared_bytes(tile, n, v["pad"]), limits)
    frags = v["frags"]
    if v["pad"] == "swizzle" and isa != "mma":
        v = {**v, "pad": 8}     # (WMMA loads fragments through nvcuda::wmma: no swizzle)
    if frags == "prefetch" and (st < 2 or bk < 2 * TC_K_STEP or isa != "mma"):
        frags = "step"
    threads = 32 * (bm // wm) * (bn // wn)
    if frags != "step" and not gpu_limits.fits(limits, threads, 0,
                                               tc_registers((wm, wn), bk, frags)):
        frags = "step"
    return {**v, "stages": st, "frags": frags, "group": group_rows(v["group"], M // bm)}


def tc_preferred(v: dict, shape: tuple, limits: gpu_limits.GPULimits,
                 defaults: dict | None = None, wg: frozenset = frozenset()) -> bool:
    """Whether the tuners search the config of knob values ``v``: only configs that are
    their own :func:`effective` values (no duplicate kernels), and on a large GEMM (``M``
    and ``N`` at least :data:`LARGE`) only the region measured fast on an H200 (4096^3,
    ``benchmarks/gpu_gemm.py --isa mma --variants``): mma.sync, padded or swizzled rows, a pipeline,
    k tiles of 32 or 64, groups of 8 or 16, warp tiles of at least 32 x 32 and blocks of at
    least 128 x 128 (4 warps or more); where wgmma blocks of at least 128 x 128 exist
    (``cuda -arch=sm_90a``), only wgmma blocks of 128 x 256 or 256 x 128 (and 128 x 128
    where 128 x 256 blocks make less than two waves of the SMs) in 3 stages or more, grouped by 8 or 16 tile rows, copied by TMA where it can, with the default
    stores: 8 configs (the mma.sync and ``cp.async`` wgmma configs measured at most 0.56x
    and 0.83x cuBLAS against 0.92x, and a short search spent most of its trials on them;
    interleaved on an H200, 4096^3 float16 beside the default's 607.3 TFLOP/s: 128 x 128
    in 3 stages (two blocks per SM) 517.6, streaming stores 601.8, 256 x 128 606.3)."""
    if effective(v, shape, limits, defaults, wg) != v:
        return False
    big_wg = any(t[0] >= 128 and t[1] >= 128 for t in wg)
    if shape[0] >= LARGE and shape[1] >= LARGE and v["isa"] != "wgmma" and big_wg:
        return False    # wgmma tiles exist: mma.sync/WMMA are no contenders
    if shape[0] >= LARGE and shape[1] >= LARGE and v["isa"] == "wgmma":
        tma = effective({**v, "copy": "tma"}, shape, limits, defaults, wg).get("copy")
        waves = shape[0] * shape[1] // (128 * 256) / max(1, limits.sm_count)
        return (v["stages"] >= 3 and v["tile"][0] >= 128 and v["tile"][1] >= 128
                and (v["tile"][0] * v["tile"][1] >= 128 * 256 or waves < 2)
                and v["group"] >= 8 and v.get("copy") == tma
                and v.get("store") == defaults.get("store"))
    if shape[0] >= LARGE and shape[1] >= LARGE:
        bm, bn, bk, wm, wn = v["tile"]
        return (v["isa"] == "mma" and v["pad"] in (8, "swizzle") and v["stages"] >= 2
                and bk >= 32
                and v["group"] >= 8 and wm >= 32 and wn >= 32 and bm * bn >= 128 * 128
                and (bm // wm) * (bn // wn) >= 4)
    return True


def _default_tile(tiles: list, best: dict) -> list:
    """The hand schedule's tile where the shape allows it, else the nearest kept one: the
    largest block (then k tile, then warp tile) not larger than the hand schedule's."""
    want = [*best["block"], *best["warp"]]
    if want in tiles:
        return want
    fit = [t for t in tiles if t[0] <= want[0] and t[1] <= want[1] and t[2] <= want[2]
           and t[3] <= want[3] and t[4] <= want[4]] or tiles
    return max(fit, key=lambda t: (t[0] * t[1], t[2], t[3] * t[4], t[1]))


def define_tc_knobs(cfg, M: int, N: int, K: int) -> dict:
    """Declare the tensor-core knobs (module docstring) at ``M x N x K``; returns the
    :func:`effective` knob values of the config.

    Raises
    ------
    TuneError
        When no tile divides the shape within the device's limits.
    """
    from polytile.targets.cuda.tensor_core import MMA_BEST, WGMMA_TENSORIZE_BEST

    limits = gpu_limits.current()
    tiles = tc_tiles(limits, M, N, K)
    if not tiles:
        raise TuneError(format_error(
            "matmul", f"no tensor-core tile divides {M}x{N}x{K} within the limits of "
            f"{limits.arch}", f"sides multiples of {TC_ALIGN} with a block tile of "
            f"{'/'.join(map(str, TC_BLOCKS))} dividing M and N",
            hint="pad the matrices to multiples of 32"))
    wg = wg_tiles(limits, M, N, K) if wgmma_target() else []
    wg_best = [*WGMMA_TENSORIZE_BEST["block"], 64, WGMMA_TENSORIZE_BEST["block"][1]]
    on_wgmma = wg_best in wg
    defaults = {"isa": "wgmma" if on_wgmma else MMA_BEST["isa"],
                "tile": wg_best if on_wgmma else _default_tile(tiles, MMA_BEST),
                "stages": WGMMA_TENSORIZE_BEST["stages"] if on_wgmma else MMA_BEST["stages"],
                "frags": MMA_BEST["frags"], "group": WGMMA_TENSORIZE_BEST["group"] if on_wgmma
                else MMA_BEST["group"],
                # (swizzle "A" or "B", one tile only, is no knob value: padded then)
                "pad": "swizzle" if MMA_BEST.get("swizzle") is True else 8}
    if wg:   # knobs of sm_90a only
        defaults["copy"] = "tma" if on_wgmma and WGMMA_TENSORIZE_BEST.get("tma") else "cp.async"
        defaults["store"] = WGMMA_TENSORIZE_BEST["epilogue"]
    cfg.define_knob("isa", ["mma", "wmma"] + ["wgmma"] * bool(wg), default=defaults["isa"])
    cfg.define_knob("tile", tiles + [t for t in wg if t not in tiles],
                    default=defaults["tile"])
    cfg.define_knob("stages", list(TC_STAGES), default=defaults["stages"])
    cfg.define_knob("frags", list(TC_FRAGS), default=defaults["frags"])
    cfg.define_knob("group", list(TC_GROUPS), default=defaults["group"])
    cfg.define_knob("pad", list(TC_PADS), default=defaults["pad"])
    if wg:
        cfg.define_knob("copy", list(TC_COPIES), default=defaults["copy"], legacy="cp.async")
        cfg.define_knob("store", list(TC_STORES), default=defaults["store"],
                        legacy="16B")
    shape = (M, N, K)
    wgset = frozenset(tuple(t) for t in wg)
    cfg.prefer(lambda v: tc_preferred(v, shape, limits, defaults, wgset))
    names = list(defaults)
    return effective({n: cfg[n].val for n in names}, shape, limits, defaults, wgset)


def matmul_tc(cfg, M: int, N: int, K: int, dtype: str):
    """The tensor-core ``matmul`` of knob config ``cfg`` (module docstring): the
    :func:`~polytile.targets.cuda.tensor_core.wmma_gemm` schedule of its effective knob
    values. Returns ``(schedule, [A, B, C])``, ``C`` float32."""
    from polytile.targets.cuda import tensor_core as tc

    v = define_tc_knobs(cfg, M, N, K)
    if v["isa"] == "wgmma":
        return _wgmma_matmul(M, N, K, dtype, v["tile"][:2], v["stages"], v["group"],
                             tma=v.get("copy") == "tma", epilogue=v.get("store"))
    bm, bn, bk, wm, wn = v["tile"]
    return tc.wmma_gemm(M, N, K, acc="float32", dtype=dtype, isa=v["isa"],
                        block=(bm, bn, bk), warp=(wm, wn),
                        pad=8 if v["pad"] == "swizzle" else v["pad"],
                        **({"swizzle": True} if v["pad"] == "swizzle" else {}),
                        stages=v["stages"], frags=v["frags"], group=v["group"])


def matmul_f32_acc(M: int, N: int, K: int, dtype: str):
    """``A``, ``B`` of ``dtype`` and ``C`` float32 accumulated in float32: the tensor-core
    compute, for the CUDA-core schedule of shapes no MMA tile divides."""
    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    r = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, r].astype("float32")
                                               * B[r, j].astype("float32"), axis=r), name="C")
    return A, B, C


def _wgmma_matmul(M: int, N: int, K: int, dtype: str, block: list, stages: int,
                  group: int = 1, tma: bool = False, epilogue: str | None = None):
    """``C = A @ B`` on wgmma (sm_90a) through ``tensorize``, 128B-swizzled shared tiles and
    asynchronous MMA groups (``mma_wait`` 1 from 3 stages), blocks in groups of ``group``
    tile rows (a divisor of ``M / BM``), the copies and the epilogue of
    ``tc.WGMMA_TENSORIZE_BEST`` (``copy_after_wait``, ``epilogue``). Where ``BN`` is a multiple of
    64 (one 128-byte row of float16), the MMA reads ``B[K, N]`` as it is, MN-major
    (``imm-trans-b``; :func:`~polytile.targets.cuda.wgmma_intrin.wgmma_nn_compute`,
    :func:`~polytile.targets.cuda.wgmma_intrin.schedule_wgmma_nn`: one kernel). Narrower
    blocks read ``B`` K-major: a first kernel writes ``Bt[N, K] = B^T``
    (:func:`schedule_transpose`), then
    :func:`~polytile.targets.cuda.wgmma_intrin.schedule_wgmma_nt` (the schedule of
    ``tc.wgmma_gemm_schedule``). ``tma`` (MN-major ``B`` and ``stages > 1`` only, see
    :func:`effective`): the tiles copied by TMA (``pipeline(..., tma=True)``).
    ``epilogue``: the stores of ``C`` (None: the hand schedule's)."""
    from polytile.targets.cuda import wgmma_intrin as wi
    from polytile.targets.cuda.tensor_core import WGMMA_TENSORIZE_BEST as best

    A = te.placeholder((M, K), name="A", dtype=dtype)
    B = te.placeholder((K, N), name="B", dtype=dtype)
    mma_wait = None if stages < 2 else min(stages - 2, 1)
    blk = (block[0], block[1], WG_BK)
    opts = dict(group=group, epilogue=epilogue or best["epilogue"],
                copy_after_wait=best["copy_after_wait"] and mma_wait is not None)
    if block[1] % WG_MN_ATOM == 0 and N % WG_MN_ATOM == 0:
        BR, C = wi.wgmma_nn_compute(A, B, "128B")
        s = te.create_schedule(C.op)
        wi.schedule_wgmma_nn(s, C, A, BR, blk, stages, "128B", mma_wait, tma=tma, **opts)
        return s, [A, B, C]
    Bt = te.compute((N, K), lambda n, k: B[k, n], name="Bt")
    C = wi.wgmma_nt_compute(A, Bt)
    s = te.create_schedule(C.op)
    wi.schedule_wgmma_nt(s, C, A, Bt, blk, stages, "128B", mma_wait, **opts)
    schedule_transpose(s, Bt)
    return s, [A, B, C]


def schedule_transpose(s, T: te.Tensor, tile: int = 64, rows: int = 4) -> None:
    """One kernel for ``T[N, K] = B[K, N]^T`` (``tile x tile`` blocks, ``tile x rows``
    threads): the block's ``B`` tile staged in shared memory by coalesced row reads
    (``threadIdx.x`` along ``n``), its rows padded by 2 elements (4 bytes) so that the
    column reads of the coalesced ``T`` writes (``threadIdx.x`` along ``k``) fall in
    distinct banks. ``tile`` shrinks to a divisor of both sides (16 at least)."""
    n, k = T.op.axis
    sides = [int(T.shape[0]), int(T.shape[1])]
    while tile > 16 and any(d % tile for d in sides):
        tile //= 2
    (B,) = T.op.input_tensors
    no, ni = s[T].split(n, factor=tile)
    ko, ki = s[T].split(k, factor=tile)
    nr, nt = s[T].split(ni, factor=rows)
    s[T].reorder(no, ko, nr, nt, ki)
    s[T].bind(no, te.thread_axis("blockIdx.y"))
    s[T].bind(ko, te.thread_axis("blockIdx.x"))
    s[T].bind(nt, te.thread_axis("threadIdx.y"))
    s[T].bind(ki, te.thread_axis("threadIdx.x"))
    S = s.cache_read(B, "shared", [T])
    s[S].compute_at(s[T], ko)
    bk, bn = S.op.axis
    s[S].storage_align(bk, 32, 2)
    br, bt = s[S].split(bk, factor=rows)
    s[S].reorder(br, bt, bn)
    s[S].bind(bt, te.thread_axis("threadIdx.y"))
    s[S].bind(bn, te.thread_axis("threadIdx.x"))
