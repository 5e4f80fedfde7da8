"""Hopper warpgroup MMA (``wgmma.mma_async``, sm_90a): descriptors, layouts, a GEMM kernel.

First step of issue 10's Hopper path. What is here:

* :func:`make_descriptor`: the 64-bit shared-memory matrix descriptor of ``wgmma``
  (PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory Layout: Matrix
  Descriptor"): bits 0-13 start address >> 4, bits 16-29 leading-dimension byte offset
  (LBO) >> 4, bits 32-45 stride-dimension byte offset (SBO) >> 4, bits 49-51 base offset
  (0 for the layouts used here), bits 62-63 swizzle mode (0 none, 1 128B, 2 64B, 3 32B).
* The no-swizzle canonical layouts (PTX ISA, "Shared Memory Matrix Layout"): an operand is
  a grid of *core matrices* of 8 rows x 16 bytes (8x8 float16/bfloat16), each core matrix
  128 contiguous bytes. LBO is the byte distance between two core matrices adjacent in K,
  SBO between two adjacent in M (for A) or N (for B). :func:`a_offset` and :func:`b_offset`
  are the element offsets of the layout transform applied to the shared tiles: A ``[BM,
  BK]`` K-major (rows of a core matrix are 8 consecutive k of one m), B ``[BK, BN]``
  MN-major (rows of a core matrix are 8 consecutive n of one k, read with ``imm-trans-b =
  1``), so that both are filled by 16-byte ``cp.async`` copies of row-major global rows.
* The accumulator fragment of ``m64nNk16`` with float32 D (PTX ISA, "Register Fragments:
  wgmma .m64nNk16"): :func:`d_fragment` maps (thread of the warpgroup, register) to (row,
  column).
* The 128-byte swizzle (``swizzle="128B"``, PTX ISA "Shared Memory Matrix Layout",
  swizzling modes): 128-byte rows, 16-byte chunk ``j`` of row ``r`` stored at chunk ``j ^
  (r % 8)``, 8-row atoms of 1024 bytes (:func:`a_offset_128b`, :func:`b_offset_128b`,
  :func:`operand_offsets_128b`); its copies read whole global rows (coalesced).
* The tile order (:func:`tile_coords`): a 1-D grid, groups of ``group_m`` tile rows for
  L2 reuse; ``WgmmaGemm(persistent=True)`` launches one block per SM looping over tiles.
* :func:`gemm_source`: a CUDA C GEMM kernel (C[M, N] = A[M, K] @ B[K, N], row-major,
  float16/bfloat16 in, float32 out): blocks of ``BM x BN``, one warpgroup (4 consecutive
  warps, 128 threads) per 64 rows, ``stages``-deep ``cp.async`` pipeline over k tiles of
  ``BK``, ``BK / 16`` ``wgmma.mma_async.m64nBNk16`` per k tile between ``wgmma.fence`` and
  ``wgmma.commit_group`` / ``wgmma.wait_group``; ``fence.proxy.async.shared::cta`` after
  each thread's ``cp.async.wait_group`` and before the barrier that precedes the MMAs (the
  tensor cores read shared memory through the async proxy). One helper per instruction.

* Main loops: ``"sync"`` (above: every warp copies and multiplies between
  ``__syncthreads``); ``warp_specialized=True``: a producer warpgroup (``setmaxnreg.dec``)
  fills the slots and ``BM / 64`` consumer warpgroups (``setmaxnreg.inc``) multiply, on a
  full and an empty mbarrier per slot (PTX ISA, "Parallel Synchronization and
  Communication Instructions: mbarrier": ``mbarrier.init``, ``arrive``,
  ``arrive.expect_tx``, ``try_wait.parity``), the producer running ahead across tiles
  (:func:`_ws_kernel`; its protocol is run on the CPU by :func:`_ws_run`); with
  ``tma=True`` the producer is one thread issuing ``cp.async.bulk.tensor.2d`` boxes through
  ``__grid_constant__`` tensor maps (:func:`tensor_map_args`, 128B swizzle) that complete
  on the full barrier by bytes.
* Epilogues: ``"8B"`` (float2 stores of the fragment) or ``"16B"`` (float4 stores after
  a lane-pair shuffle, :func:`d_store_16b`).

The schedule-language path (``tensorize`` with ``wgmma_mma(n, swizzle="128B",
asynchronous=True)``, ``Stage.swizzle`` and ``pipeline(..., mma_wait=1)``;
:func:`polytile.targets.cuda.tensor_core.wgmma_gemm_schedule`) is in
:mod:`polytile.targets.cuda.wgmma_intrin`, built from this module's swizzle function,
descriptor and instruction helpers, and copies tiles by TMA with ``pipeline(...,
tma=True)`` (the helpers and tensor maps of :mod:`.tma`, shared with this kernel); this
generated kernel keeps warp specialization and the persistent grid.
Not yet here: clusters with TMA multicast, a shared-memory-staged (TMA store) epilogue,
two consumer warpgroups ping-ponging over tiles.
"""

from __future__ import annotations

from polytile.errors import BuildError, ScheduleError, format_error

from .tma import MBARRIER_C, TMA_C, encode_tensor_map

#: swizzle-mode field values (bits 62-63)
SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
CORE_BYTES = 128           # one core matrix: 8 rows x 16 bytes
WGMMA_N = tuple(range(8, 257, 8))
DTYPES = {"float16": ("f16", "half"), "bfloat16": ("bf16", "__nv_bfloat16")}


def make_descriptor(addr: int, lbo: int, sbo: int, swizzle: str = "none",
                    base_offset: int = 0) -> int:
    """The 64-bit wgmma matrix descriptor of an operand at shared byte address ``addr``
    with leading/stride byte offsets ``lbo``/``sbo`` (PTX ISA, "Matrix Descriptor").

    Raises
    ------
    BuildError
        An address or offset not a multiple of 16 bytes or past the 14-bit fields (256 KiB).
    """
    for what, v in (("start address", addr), ("leading byte offset", lbo),
                    ("stride byte offset", sbo)):
        if v % 16 or not 0 <= v >> 4 < (1 << 14):
            raise BuildError(format_error(
                "wgmma descriptor", f"{what} {v} bytes",
                "expected a multiple of 16 below 256 KiB (a 14-bit field of 16-byte units)"))
    if swizzle not in SWIZZLE:
        raise BuildError(format_error("wgmma descriptor", f"swizzle {swizzle!r}",
                                      f"expected one of {sorted(SWIZZLE)}"))
    return ((addr >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)
            | ((base_offset & 7) << 49) | (SWIZZLE[swizzle] << 62))


def a_offset(m: int, k: int, BK: int) -> int:
    """Element offset of ``A[m, k]`` in a ``[BM, BK]`` shared tile laid out K-major in
    no-swizzle core matrices: core matrix ``(m // 8, k // 8)`` at ``((m // 8) * (BK // 8)
    + k // 8) * 64``, row ``m % 8`` of 8 consecutive k. LBO = 128 bytes, SBO = BK * 16."""
    return ((m // 8) * (BK // 8) + k // 8) * 64 + (m % 8) * 8 + k % 8


def b_offset(k: int, n: int, BK: int) -> int:
    """Element offset of ``B[k, n]`` in a ``[BK, BN]`` shared tile laid out MN-major in
    no-swizzle core matrices: core matrix ``(k // 8, n // 8)`` at ``((n // 8) * (BK // 8)
    + k // 8) * 64``, row ``k % 8`` of 8 consecutive n. LBO (K-adjacent) = 128 bytes,
    SBO (N-adjacent) = BK * 16."""
    return ((n // 8) * (BK // 8) + k // 8) * 64 + (k % 8) * 8 + n % 8


def a_chunk(c: int, BK: int) -> tuple:
    """(m, k) of the first element of 16-byte copy ``c`` of the A tile in the kernel: the
    chunk lands at element ``8 c`` of the shared tile, i.e. ``a_offset(m, k) == 8 c``."""
    core = c // 8
    return (core // (BK // 8)) * 8 + c % 8, (core % (BK // 8)) * 8


def b_chunk(c: int, BK: int) -> tuple:
    """(k, n) of the first element of 16-byte copy ``c`` of the B tile: ``b_offset(k, n)
    == 8 c``."""
    core = c // 8
    return (core % (BK // 8)) * 8 + c % 8, (core // (BK // 8)) * 8


def operand_offsets(BK: int) -> tuple:
    """(LBO, SBO) in bytes of both shared tiles above (the same for A and B)."""
    return CORE_BYTES, BK // 8 * CORE_BYTES


def a_offset_128b(m: int, k: int, BM: int, BK: int) -> int:
    """Element offset of ``A[m, k]`` in a ``[BM, BK]`` shared tile laid out K-major with the
    128-byte swizzle (PTX ISA, "Shared Memory Matrix Layout", swizzling modes; the
    canonical K-major 128B layout ``((8, m), (T, 2k)) : ((8T, SBO), (1, T))`` in 16-byte
    units T): the tile is ``BK / 64`` K-atoms of ``BM`` rows x 128 bytes (64 elements),
    row ``m`` at ``m * 128`` bytes of its atom, its 16-byte chunk ``j`` stored at chunk
    ``j ^ (m % 8)``. 8 rows (1024 bytes) repeat the pattern: SBO = 1024, LBO unused.
    The tensor cores apply the XOR to shared address bits 4-6 from bits 7-9, so the tile
    must start on a 1024-byte boundary."""
    kc = k % 64
    return (k // 64) * BM * 64 + m * 64 + ((kc // 8) ^ (m % 8)) * 8 + k % 8


def b_offset_128b(k: int, n: int, BK: int) -> int:
    """Element offset of ``B[k, n]`` in a ``[BK, BN]`` shared tile laid out MN-major with
    the 128-byte swizzle (canonical MN-major 128B layout ``((T, 8, m), (8, k)) : ((1, T,
    LBO), (8T, SBO))``): N-atoms of 64 columns (128 bytes) x ``BK`` rows, atom ``n // 64``
    at ``BK * 128`` bytes (LBO), row ``k`` at ``k * 128`` bytes of its atom (8 rows:
    SBO = 1024), 16-byte chunk ``j`` of the row stored at chunk ``j ^ (k % 8)``."""
    nc = n % 64
    return (n // 64) * BK * 64 + k * 64 + ((nc // 8) ^ (k % 8)) * 8 + n % 8


def a_chunk_128b(c: int, BK: int) -> tuple:
    """(m, k) of 16-byte copy ``c`` of the swizzled A tile: consecutive copies walk one
    global row (``BK / 8`` chunks, whole 32-byte sectors), landing at
    :func:`a_offset_128b`."""
    return c // (BK // 8), (c % (BK // 8)) * 8


def b_chunk_128b(c: int, BN: int) -> tuple:
    """(k, n) of 16-byte copy ``c`` of the swizzled B tile: consecutive copies walk one
    global row of ``BN`` elements, landing at :func:`b_offset_128b`."""
    return c // (BN // 8), (c % (BN // 8)) * 8


def operand_offsets_128b(BK: int) -> tuple:
    """((LBO, SBO) of A, (LBO, SBO) of B) in bytes for the 128B-swizzled tiles: A K-major
    LBO unused (16, i.e. the field's 1), SBO 1024; B MN-major LBO = ``BK * 128`` (between
    64-column N-atoms), SBO 1024 (between 8-row K groups)."""
    return (16, 1024), (BK * 128, 1024)


#: row width in bytes of each swizzle mode (PTX ISA, "Shared Memory Matrix Layout")
SWIZZLE_BYTES = {"128B": 128, "64B": 64, "32B": 32}

#: row width in bytes of every ``Stage.swizzle`` mode: the tensor cores' modes above, and
#: ``"128B/R"``: the 128B pattern over rows of ``R`` bytes (a power of two above 128), the
#: 16-byte chunk ``j`` of row ``r`` stored at chunk ``j ^ r % 8`` (``ldmatrix`` tiles
#: wider than 128 bytes: 16-byte ``cp.async`` stores of whole 128-byte lines, no padding,
#: and conflict-free columns; no wgmma descriptor mode)
SWIZZLE_ROW_BYTES = {**SWIZZLE_BYTES, "128B/256": 256, "128B/512": 512, "128B/1024": 1024}


def swizzle_elements(offset, mode: str, nbytes: int = 1):
    """The physical position of logical element ``offset`` (elements of ``nbytes`` bytes,
    a power of two up to 16) under swizzle ``mode`` (PTX ISA, "Shared Memory Matrix
    Layout", swizzling modes): byte address bits 4.. (the 16-byte chunk) XOR bits 7..
    (the 128-byte line), 3 bits for 128B, 2 for 64B, 1 for 32B; the pattern repeats
    every ``8 * SWIZZLE_BYTES[mode]`` bytes (where the buffer must start); the wide
    modes ``"128B/R"`` (:data:`SWIZZLE_ROW_BYTES`) XOR bits 4-6 with the row's, bits
    ``log2 R``.., every ``8 * R`` bytes. Works on ints,
    numpy integer arrays and integer expressions (``^ >> & <<``): one definition for the
    CPU models, the interpreter and the C printer."""
    width = SWIZZLE_ROW_BYTES[mode]
    mask = min(width, 128) // 16 - 1
    # log2 of elements per 128 bytes (per row for the wide "128B/R" modes)
    row = (max(width, 128) // nbytes).bit_length() - 1
    chunk = (16 // nbytes).bit_length() - 1     # log2 of elements per 16 bytes
    return offset ^ (((offset >> row) & mask) << chunk)


def swizzle_128b(byte):
    """The physical shared byte address of logical ``byte`` under the 128B swizzle: bits
    4-6 XOR bits 7-9 (the 16-byte chunk within a 128-byte row XOR the row within 8)."""
    return swizzle_elements(byte, "128B")


def tile_coords(t: int, tiles_m: int, tiles_n: int, group_m: int = 1) -> tuple:
    """(tile row, tile column) of linear tile ``t`` in the kernel's order: groups of
    ``group_m`` tile rows covering all ``tiles_n`` columns, the row fastest within a group
    (blocks running together then share A rows and B columns in L2); ``group_m = 1`` is
    row-major."""
    per = group_m * tiles_n
    first = (t // per) * group_m
    size = min(tiles_m - first, group_m)
    r = t % per
    return first + r % size, r // size


def d_fragment(thread: int, reg: int) -> tuple:
    """(row, column) of float32 accumulator register ``reg`` of warpgroup thread ``thread``
    (0-127) in an ``m64nN`` D tile: warp ``w`` owns rows ``16w .. 16w + 15``; register
    ``4j + r`` lies in the 8-column chunk ``j``, rows ``l // 4`` (+8 for r >= 2), columns
    ``2 (l % 4)`` (+1 for odd r), ``l`` the lane (PTX ISA, "wgmma .m64nNk16 register
    fragments", D matrix)."""
    w, lane = divmod(thread, 32)
    j, r = divmod(reg, 4)
    return 16 * w + lane // 4 + 8 * (r // 2), 8 * j + 2 * (lane % 4) + r % 2


def check_tiles(M: int, N: int, K: int, block: tuple, stages: int, dtype: str,
                swizzle: str = "none", warp_specialized: bool = False,
                tma: bool = False) -> None:
    """Refuse what :func:`gemm_source` cannot compute, naming the axis and the primitive.

    Raises
    ------
    ScheduleError
        A size the tiles do not divide, a tile wgmma has no shape for, a dtype it lacks,
        or shared memory past the 227 KiB of sm_90; a swizzle other than ``"none"`` and
        ``"128B"``, or a 128B-swizzled block whose BK or BN is not a multiple of 64; a
        warp-specialized kernel with one stage (the producer would wait for the slot the
        consumers are waiting on); ``tma`` without ``warp_specialized`` and the 128B
        swizzle, or with a BM past 256 (a TMA box has at most 256 rows).
    """
    BM, BN, BK = block
    if swizzle not in ("none", "128B"):
        raise ScheduleError(format_error("wgmma_gemm", f"swizzle {swizzle!r}",
                                         "expected 'none' or '128B'"))
    if swizzle == "128B" and (BK % 64 or BN % 64):
        raise ScheduleError(format_error(
            "wgmma_gemm", f"block {block} with the 128B swizzle",
            "expected BK and BN multiples of 64 (128-byte rows of the swizzle atoms)"))
    if dtype not in DTYPES:
        raise ScheduleError(format_error("wgmma_gemm", f"dtype {dtype!r}",
                                         f"expected one of {sorted(DTYPES)}"))
    if BM % 64 or BN not in WGMMA_N or BK % 16:
        raise ScheduleError(format_error(
            "wgmma_gemm", f"block {block}",
            "expected BM a multiple of 64 (one warpgroup per 64 rows), BN in 8..256 step 8 "
            "(wgmma m64nNk16) and BK a multiple of 16"))
    for axis, size, tile in (("i", M, BM), ("j", N, BN), ("k", K, BK)):
        if size % tile:
            raise ScheduleError(format_error(
                "wgmma_gemm", f"stage 'C' axis {axis!r} of extent {size} is not a multiple "
                f"of the tile {tile} (split for tensorize with the wgmma intrinsic)",
                "expected sizes divisible by the block tile (no partial wgmma tiles yet)"))
    # the warp-specialized producer runs ahead across tiles: any depth serves it
    if (K // BK < stages - 1 and not warp_specialized) or stages < 1:
        raise ScheduleError(format_error(
            "wgmma_gemm", f"pipeline stages={stages} over {K // BK} k tiles",
            "expected 1 <= stages <= k tiles + 1"))
    if tma and not (warp_specialized and swizzle == "128B" and BM <= 256):
        raise ScheduleError(format_error(
            "wgmma_gemm", f"tma with warp_specialized={warp_specialized}, swizzle "
            f"{swizzle!r}, block {block}",
            "expected warp_specialized=True, swizzle='128B' (the TMA boxes are 64-column "
            "128B-swizzled atoms) and BM <= 256 (box rows)"))
    if warp_specialized and stages < 2:
        raise ScheduleError(format_error(
            "wgmma_gemm", f"warp_specialized with stages={stages}",
            "expected stages >= 2 (a slot is released only after the next slot's MMAs are "
            "issued)"))
    nbytes = smem_bytes(block, stages, swizzle, warp_specialized)
    if nbytes > 227 * 1024:
        raise ScheduleError(format_error(
            "wgmma_gemm", f"{nbytes} bytes of shared memory",
            "expected at most 227 KiB (sm_90)", hint="fewer stages or a smaller block"))


def smem_bytes(block: tuple, stages: int, swizzle: str = "none",
               warp_specialized: bool = False) -> int:
    """Dynamic shared memory of :func:`gemm_source`: ``stages`` A and B tiles, 2 bytes each
    (+ 1024 bytes with the 128B swizzle, to start the tiles on a 1024-byte boundary; + two
    8-byte mbarriers per stage when warp-specialized)."""
    BM, BN, BK = block
    return (stages * (BM * BK + BK * BN) * 2 + (1024 if swizzle == "128B" else 0)
            + (16 * stages if warp_specialized else 0))


def decode_descriptor(desc: int) -> dict:
    """The fields of a descriptor built by :func:`make_descriptor` (byte units)."""
    return {"addr": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4,
            "sbo": ((desc >> 32) & 0x3FFF) << 4, "base_offset": (desc >> 49) & 7,
            "swizzle": (desc >> 62) & 3}


def descriptor_read(smem, desc: int, rows: int, cols: int, major: str):
    """The ``rows x cols`` operand the tensor cores read through ``desc`` from ``smem`` (a
    1-D numpy array of 2-byte elements, byte address = 2 x index), by the no-swizzle
    canonical layouts: ``major="K"`` (A ``[M, K]``, B ``[N, K]``): element (r, k) at
    ``start + (r // 8) SBO + (k // 8) LBO + (r % 8) 16 + (k % 8) 2`` bytes;
    ``major="MN"`` (B ``[K, N]`` with imm-trans-b): element (k, n) at ``start + (n // 8)
    SBO + (k // 8) LBO + (k % 8) 16 + (n % 8) 2``. With the 128B swizzle (``k`` within
    one 128-byte row): K-major (r, k) at ``start + (r // 8) SBO + (r % 8) 128 + 2 k``,
    MN-major (k, n) at ``start + (n // 64) LBO + (k // 8) SBO + (k % 8) 128 + 2 (n %
    64)``, then :func:`swizzle_128b` of that address. The model the CPU tests check the
    kernel's layouts against.
    """
    import numpy as np

    f = decode_descriptor(desc)
    if f["base_offset"] or f["swizzle"] not in (0, SWIZZLE["128B"]):
        raise NotImplementedError("descriptor_read: base offset, 32B/64B swizzles")
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    if f["swizzle"]:
        if major == "K":
            assert cols * 2 + f["addr"] % 128 <= 128, "one 128-byte row per wgmma K"
            byte = f["addr"] + (r // 8) * f["sbo"] + (r % 8) * 128 + c * 2
        else:
            byte = (f["addr"] + (c // 64) * f["lbo"] + (r // 8) * f["sbo"] + (r % 8) * 128
                    + (c % 64) * 2)
        return smem[swizzle_128b(byte) // 2]
    if major == "K":
        byte = f["addr"] + (r // 8) * f["sbo"] + (c // 8) * f["lbo"] + (r % 8) * 16 + (c % 8) * 2
    else:
        byte = f["addr"] + (c // 8) * f["sbo"] + (r // 8) * f["lbo"] + (r % 8) * 16 + (c % 8) * 2
    return smem[byte // 2]


def emulate_gemm(A, B, block=(128, 128, 64), stages: int = 4, swizzle: str = "none",
                 group_m: int = 1, warp_specialized: bool = False, seed: int = 0,
                 tma: bool = False, epilogue: str = "8B"):
    """Run :func:`gemm_source`'s kernel on the CPU in float64, block by block: the same
    ``cp.async`` chunks (:func:`a_chunk`, :func:`b_chunk`), one flat shared array
    per block and stage slot, operands read back through the descriptors the kernel builds
    (:func:`descriptor_read`), D written through :func:`d_fragment`. Refuses what the
    kernel refuses (:func:`check_tiles`). ``swizzle="128B"``: the swizzled copies
    (:func:`a_chunk_128b`, :func:`b_chunk_128b`) and descriptors; tiles in the order of
    :func:`tile_coords` with ``group_m``. ``warp_specialized``: the producer and consumer
    warpgroups of the kernel run as interleaved agents (order drawn from ``seed``) over
    a model of its mbarriers (:func:`_ws_run`); a wrong protocol deadlocks (RuntimeError)
    or overwrites a slot under the MMAs (AssertionError). ``tma``: the copies are TMA
    boxes (:func:`tensor_map_args`), written as the hardware's 128B swizzle of a dense
    row-major box (:func:`swizzle_128b` of the byte address), one arrival on *full*.
    ``epilogue="16B"``: D stored by :func:`d_store_16b` (float4 at 16-byte columns)."""
    import numpy as np

    M, K = A.shape
    N = B.shape[1]
    check_tiles(M, N, K, block, stages, "float16", swizzle, warp_specialized, tma)
    if epilogue not in EPILOGUES:
        raise ScheduleError(format_error("wgmma_gemm", f"epilogue {epilogue!r}",
                                         f"expected one of {EPILOGUES}"))
    BM, BN, BK = block
    sw = swizzle == "128B"
    lbo, sbo = operand_offsets(BK)
    (a_lbo, a_sbo), (b_lbo, b_sbo) = operand_offsets_128b(BK) if sw else ((lbo, sbo),) * 2
    C = np.full((M, N), np.nan)
    t, reg = np.meshgrid(np.arange(128), np.arange(BN // 2), indexing="ij")
    rows, cols = d_fragment(t, reg)
    a_base = 0
    b_base = stages * BM * BK * 2           # bytes: B tiles after the A tiles
    tiles_m, tiles_n = M // BM, N // BN
    order = [tile_coords(tile, tiles_m, tiles_n, group_m) for tile in range(tiles_m * tiles_n)]
    assert len(set(order)) == tiles_m * tiles_n, "tile order is not a permutation"

    def copy(smem, s, tm, tn, kt):
        # the kernel's copies of k tile kt of tile (tm, tn) into slot s
        bm, bn = tm * BM, tn * BN
        sa = smem[a_base // 2 + s * BM * BK:][:BM * BK]
        sb = smem[b_base // 2 + s * BK * BN:][:BK * BN]
        for c in range(BM * BK // 8):
            m, k = a_chunk_128b(c, BK) if sw else a_chunk(c, BK)
            e = a_offset_128b(m, k, BM, BK) if sw else 8 * c
            sa[e:e + 8] = A[bm + m, kt * BK + k:kt * BK + k + 8]
        for c in range(BK * BN // 8):
            k, n = b_chunk_128b(c, BN) if sw else b_chunk(c, BK)
            e = b_offset_128b(k, n, BK) if sw else 8 * c
            sb[e:e + 8] = B[kt * BK + k, bn + n:bn + n + 8]

    def tma_copy(smem, s, tm, tn, kt):
        # the kernel's boxes: A (k, m) = (kt BK + 64 a, bm) into A's slot + a BM 64; B (n, k)
        # = (bn + 64 j, kt BK) into B's slot + j BK 64; a box is row-major 128-byte rows,
        # stored at swizzle_128b of each byte address (the slots are 1024-aligned)
        bm, bn = tm * BM, tn * BN
        boxes = [(a_base + (s * BM * BK + a * BM * 64) * 2,
                  A[bm:bm + BM, kt * BK + 64 * a:kt * BK + 64 * a + 64]) for a in range(BK // 64)]
        boxes += [(b_base + (s * BK * BN + j * BK * 64) * 2,
                   B[kt * BK:kt * BK + BK, bn + 64 * j:bn + 64 * j + 64]) for j in range(BN // 64)]
        for base, box in boxes:
            assert base % 1024 == 0
            r, c = np.meshgrid(np.arange(box.shape[0]), np.arange(64), indexing="ij")
            smem[swizzle_128b(base + (r * 64 + c) * 2) // 2] = box

    def mma(smem, s, wg):
        # warpgroup wg's BK / 16 wgmma of slot s: its D fragment increment
        d = 0
        for k16 in range(BK // 16):
            if sw:
                ea = wg * 64 * 64 + (k16 * 16 // 64) * BM * 64 + k16 * 16 % 64
                eb = k16 * 16 * 64
            else:
                ea, eb = wg * 64 * BK + k16 * 128, k16 * 128
            da = make_descriptor(a_base + (s * BM * BK + ea) * 2, a_lbo, a_sbo, swizzle)
            db = make_descriptor(b_base + (s * BK * BN + eb) * 2, b_lbo, b_sbo, swizzle)
            a = descriptor_read(smem, da, 64, 16, "K")
            b = descriptor_read(smem, db, 16, BN, "MN")
            d = d + (a @ b)[rows, cols]
        return d

    def store(tm, tn, wg, d):
        if epilogue == "16B":
            for th in range(128):
                for j in range(BN // 8):
                    (r, c), src = d_store_16b(th, j)
                    assert c % 4 == 0, "a float4 store off 16 bytes"
                    C[tm * BM + wg * 64 + r, tn * BN + c:tn * BN + c + 4] = [d[x] for x in src]
            return
        C[tm * BM + wg * 64 + rows, tn * BN + cols] = d

    if warp_specialized:
        _ws_run(order, K // BK, stages, BM // 64, tma_copy if tma else copy, mma, store,
                np.zeros(stages * (BM * BK + BK * BN)), seed, 1 if tma else 128)
        return C
    for tm, tn in order:                        # the kernel's tile order
        smem = np.zeros(stages * (BM * BK + BK * BN))
        d = np.zeros((BM // 64, 128, BN // 2))
        for kt in range(K // BK):
            copy(smem, kt % stages, tm, tn, kt)
            for wg in range(BM // 64):
                d[wg] += mma(smem, kt % stages, wg)
        for wg in range(BM // 64):
            store(tm, tn, wg, d[wg])
    return C


class _MBarrier:
    """An mbarrier as the PTX ISA describes it: a pending count reset to ``count`` when a
    phase completes; ``try_wait_parity(p)`` is true once the phase of parity ``p`` has
    completed, i.e. while the current (incomplete) phase's parity differs from ``p``."""

    def __init__(self, count: int):
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self, n: int = 1) -> None:
        assert n <= self.pending, "more arrivals than the phase expects"
        self.pending -= n
        if self.pending == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def try_wait_parity(self, parity: int) -> bool:
        return (self.phase & 1) != parity


def _ws_run(order, ktiles, stages, consumers, copy, mma, store, smem, seed,
            full_count: int = 128) -> None:
    """The warp-specialized kernel's protocol (:func:`_ws_kernel`) on :class:`_MBarrier`
    models, one block over all tiles of ``order`` (a persistent block), the agents
    interleaved at random (``seed``): the producer warpgroup; each consumer warpgroup;
    in-flight copies, which land (write ``smem`` and arrive on *full* ``full_count``
    times: 128 producer threads' cp.async, or TMA's one expect_tx arrival whose bytes
    complete with the copy) at a random later time. An MMA reads its slot when issued and again
    when its ``wgmma.wait_group`` retires it: both reads must agree (no overwrite while in
    flight). No agent able to move is a deadlock (RuntimeError)."""
    import random

    import numpy as np

    rng = random.Random(seed)
    full = [_MBarrier(full_count) for _ in range(stages)]
    empty = [_MBarrier(consumers * 128) for _ in range(stages)]
    landing = []                     # copies issued, not landed: (slot, tile, kt)

    def producer():
        it = 0
        for tm, tn in order:
            for kt in range(ktiles):
                s = it % stages
                while not empty[s].try_wait_parity(((it // stages) & 1) ^ 1):
                    yield False
                landing.append((s, tm, tn, kt))
                it += 1
                yield True

    def consumer(wg):
        it = 0
        for tm, tn in order:
            d = 0
            inflight = []            # (step, slot, operands read at issue)
            for kt in range(ktiles):
                s = it % stages
                while not full[s].try_wait_parity((it // stages) & 1):
                    yield False
                inflight.append((it, s, mma(smem, s, wg)))
                # wgmma.wait_group 1: all but the newest group retire
                for _, s0, got in inflight[:-1]:
                    again = mma(smem, s0, wg)
                    assert np.array_equal(got, again), "slot overwritten under the MMAs"
                    d = d + got
                inflight = inflight[-1:]
                if kt > 0:
                    empty[(it - 1) % stages].arrive(128)
                it += 1
                yield True
            for _, s0, got in inflight:      # wgmma.wait_group 0
                assert np.array_equal(got, mma(smem, s0, wg)), "slot overwritten"
                d = d + got
            empty[(it - 1) % stages].arrive(128)
            store(tm, tn, wg, d)
            yield True

    agents = [producer()] + [consumer(w) for w in range(consumers)]
    live = list(agents)
    stuck = 0
    while live or landing:
        if landing and (not live or rng.random() < 0.3):
            s, tm, tn, kt = landing.pop(rng.randrange(len(landing)) if rng.random() < 0.1
                                        else 0)
            copy(smem, s, tm, tn, kt)
            full[s].arrive(full_count)
            stuck = 0
            continue
        a = rng.choice(live)
        try:
            moved = next(a)
        except StopIteration:
            live.remove(a)
            moved = True
        stuck = 0 if moved else stuck + 1
        if stuck > 50 * (len(live) + 1) and not landing:
            raise RuntimeError("warp-specialized protocol deadlock: no agent can move")


# ------------------------------------------------------------------ C helpers (PTX asm)
def mma_helper_name(n: int, ptx_type: str, trans_b: int = 1) -> str:
    """The C name of :func:`_mma_helper`'s function."""
    return f"wgmma_mma_async_m64n{n}k16_{ptx_type}" + ("" if trans_b else "_kk")


def _mma_helper(n: int, ptx_type: str, trans_b: int = 1) -> str:
    """``wgmma.mma_async.m64nNk16`` from two descriptors into ``float d[n / 2]``: A K-major;
    B MN-major (``trans_b=1``, this module's kernels) or K-major (``trans_b=0``, the
    tensorize path of :mod:`.wgmma_intrin`)."""
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    dlist = ", ".join(f"%{i}" for i in range(regs))
    major = "MN-major (imm-trans-b 1)" if trans_b else "K-major (imm-trans-b 0)"
    return (
        f"__device__ __forceinline__ void {mma_helper_name(n, ptx_type, trans_b)}("
        f"float* d, unsigned long long da, unsigned long long db, int scale_d) {{\n"
        f"  // A K-major (imm-trans-a 0), B {major}; D += A B when scale_d\n"
        "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + str(regs + 2) + ", 0;\\n\"\n"
        f"    \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "
        f"{{{dlist}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, {1 if trans_b else 0};\\n}}\\n\"\n"
        f"    : {outs}\n"
        "    : \"l\"(da), \"l\"(db), \"r\"(scale_d));\n}")


#: the warpgroup instructions and the descriptor, shared with :mod:`.wgmma_intrin`
WGMMA_CORE = r"""__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ unsigned long long wgmma_descriptor(const void* p, unsigned lbo,
                                                               unsigned sbo,
                                                               unsigned swizzle = 0) {
  // PTX ISA "Matrix Descriptor": start >> 4 (bits 0-13), LBO >> 4 (16-29), SBO >> 4
  // (32-45), base offset 0 (swizzled tiles start on their pattern's period), swizzle
  // mode (62-63: 0 none, 1 128B, 2 64B, 3 32B)
  unsigned long long a = (unsigned)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
         | ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)swizzle << 62);
}"""

COMMON = WGMMA_CORE + "\n" + r"""__device__ __forceinline__ void cp_async_cg_shared_global(void* dst, const void* src) {
  unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
// the arrive-on operation fires when all of this thread's prior cp.async have landed;
// .noinc: the arrival counts against the count given at init (one per producer thread)
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned long long* bar) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(a) : "memory");
}
""" + MBARRIER_C + "\n" + TMA_C + "\n" + r"""// PTX ISA "setmaxnreg": every warp of the warpgroup executes it (.sync.aligned)
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}"""


def gemm_source(M: int, N: int, K: int, block=(128, 128, 64), stages: int = 4,
                dtype: str = "float16", name: str = "wgmma_gemm", swap_b: bool = False,
                swizzle: str = "none", group_m: int = 1,
                warp_specialized: bool = False, tma: bool = False,
                epilogue: str = "8B") -> str:
    """CUDA C of the wgmma GEMM kernel ``name(const T* A, const T* B, float* C)`` for
    row-major ``A[M, K]``, ``B[K, N]``, ``C[M, N]`` (see the module docstring). Launch
    with ``BM / 64 * 128`` threads and :func:`smem_bytes`
    dynamic shared memory (after raising the function's dynamic limit); sm_90a.
    ``swap_b`` exchanges LBO and SBO in B's descriptor: a probe of the MN-major reading
    of the PTX ISA on a GPU (the kernel is then wrong when the reading is right).
    The kernel loops over tiles ``t = blockIdx.x, blockIdx.x + gridDim.x, ...`` in the
    order of :func:`tile_coords` (``group_m`` tile rows per group): launch a 1-D grid of
    all ``M / BM * N / BN`` tiles, or fewer blocks (persistent, e.g. one per SM).
    ``swizzle="128B"``: the 128-byte-swizzled tiles (:func:`a_offset_128b`,
    :func:`b_offset_128b`), filled by copies that walk whole global rows (coalesced, whole
    32-byte sectors); ``"none"``: the core-matrix layouts.
    ``warp_specialized``: one more warpgroup (the producer, the last one; launch
    :func:`block_threads` threads) issues every copy and the ``BM / 64`` consumer
    warpgroups only wait and run the MMAs (:func:`_ws_kernel`). ``tma`` (with
    ``warp_specialized`` and ``swizzle="128B"``): one producer thread loads the tiles with
    ``cp.async.bulk.tensor.2d``; the kernel is then ``name(const __grid_constant__
    PtTensorMap tmA, const __grid_constant__ PtTensorMap tmB, float* C)``, the maps of
    :func:`tensor_map_args`. ``epilogue``: ``"8B"`` float2 stores of the D fragment,
    ``"16B"`` float4 stores after a lane-pair shuffle (:func:`d_store_16b`).

    Raises
    ------
    ScheduleError
        Via :func:`check_tiles`.
    """
    check_tiles(M, N, K, block, stages, dtype, swizzle, warp_specialized, tma)
    if epilogue not in EPILOGUES:
        raise ScheduleError(format_error("wgmma_gemm", f"epilogue {epilogue!r}",
                                         f"expected one of {EPILOGUES}"))
    if not isinstance(group_m, int) or group_m < 1:
        raise ScheduleError(format_error("wgmma_gemm", f"group_m={group_m!r}",
                                         "expected a positive int (tile rows per L2 group)"))
    sw = swizzle == "128B"
    tiles_m, tiles_n = M // block[0], N // block[1]
    BM, BN, BK = block
    ptx, ctype = DTYPES[dtype]
    lbo, sbo = operand_offsets(BK)
    b_lbo, b_sbo = (sbo, lbo) if swap_b else (lbo, sbo)
    threads = BM // 64 * 128
    copy_threads = 128 if warp_specialized else threads
    a_chunks = BM * BK // 8
    b_chunks = BK * BN // 8
    ktiles = K // BK
    # stages >= 3: the MMAs of tile kt stay in flight (wgmma.wait_group 1) while tile kt + 1
    # is awaited, so a refill may only reuse the slot of tile kt - 2: stages - 2 tiles
    # ahead. Fewer stages: every tile's MMAs finish before the next barrier.
    overlap = stages >= 3
    ahead = stages - 2 if overlap else stages - 1
    cp_wait = stages - 3 if overlap else max(stages - 2, 0)
    if sw:
        (a_lbo, a_sbo), (b_lbo, b_sbo) = operand_offsets_128b(BK)
        if swap_b:   # the probe of the MN-major 128B reading (LBO between N-atoms)
            b_lbo, b_sbo = b_sbo, b_lbo
        # consecutive threads copy consecutive 16-byte chunks of one global row (whole
        # sectors), chunk j of row r into chunk j ^ (r % 8) of its 128-byte shared row
        copies = f"""#pragma unroll
    for (int c = tid; c < {a_chunks}; c += {copy_threads}) {{
      int m = c / {BK // 8}, q = c % {BK // 8};   // == a_chunk_128b(c)
      cp_async_cg_shared_global(as + (q / 8) * {BM * 64} + m * 64 + (((q % 8) ^ (m % 8)) * 8),
                                A + (size_t)(bm + m) * {K} + kt * {BK} + q * 8);
    }}
#pragma unroll
    for (int c = tid; c < {b_chunks}; c += {copy_threads}) {{
      int k = c / {BN // 8}, q = c % {BN // 8};   // == b_chunk_128b(c)
      cp_async_cg_shared_global(bs + (q / 8) * {BK * 64} + k * 64 + (((q % 8) ^ (k % 8)) * 8),
                                B + (size_t)(kt * {BK} + k) * {N} + bn + q * 8);
    }}
"""
        # k16 step kk: A's start moves 32 bytes along its 128-byte rows (next K-atom every
        # 4 steps), B's 16 rows of 128 bytes; the hardware swizzles the absolute address
        mma = (f"wgmma_mma_async_m64n{BN}k16_{ptx}(d, wgmma_descriptor(as + (kk / 4) * "
               f"{BM * 64} + (kk % 4) * 16, {a_lbo}, {a_sbo}, 1), wgmma_descriptor(bs + kk * "
               f"{16 * 64}, {b_lbo}, {b_sbo}, 1), 1);")
    else:
        copies = f"""#pragma unroll
    for (int c = tid; c < {a_chunks}; c += {copy_threads}) {{
      int core = c / 8, m = (core / {BK // 8}) * 8 + c % 8, kc = core % {BK // 8};
      cp_async_cg_shared_global(as + c * 8,   // == a_offset(m, 8 kc)
                                A + (size_t)(bm + m) * {K} + kt * {BK} + kc * 8);
    }}
#pragma unroll
    for (int c = tid; c < {b_chunks}; c += {copy_threads}) {{
      int core = c / 8, k = (core % {BK // 8}) * 8 + c % 8, nc = core / {BK // 8};
      cp_async_cg_shared_global(bs + c * 8,   // == b_offset(k, 8 nc)
                                B + (size_t)(kt * {BK} + k) * {N} + bn + nc * 8);
    }}
"""
        mma = (f"wgmma_mma_async_m64n{BN}k16_{ptx}(d, wgmma_descriptor(as + kk * 128, {lbo}, "
               f"{sbo}), wgmma_descriptor(bs + kk * 128, {b_lbo}, {b_sbo}), 1);")
    align = ("((1024u - ((unsigned)__cvta_generic_to_shared(pt_smem_raw) & 1023u)) & 1023u)"
             if sw else "0")
    include = "#include <cuda_fp16.h>" if dtype == "float16" else "#include <cuda_bf16.h>"
    if warp_specialized:
        return _ws_kernel(N, K, block, stages, ctype, include, name, align, copies, mma,
                          sw, tiles_m, tiles_n, group_m, tma, epilogue)
    return f"""{include}
{COMMON}
{_mma_helper(BN, ptx)}

extern "C" __global__ void __launch_bounds__({threads}, 1)
{name}(const {ctype}* __restrict__ A, const {ctype}* __restrict__ B, float* __restrict__ C) {{
  extern __shared__ __align__(1024) unsigned char pt_smem_raw[];
  // the 128B swizzle XORs shared address bits 4-6 with 7-9: tiles start 1024-aligned
  unsigned char* pt_smem = pt_smem_raw + {align};
  {ctype}* As = reinterpret_cast<{ctype}*>(pt_smem);              // [stages][BM*BK]
  {ctype}* Bs = As + {stages} * {BM * BK};                          // [stages][BK*BN]
  const int tid = threadIdx.x, wg = tid / 128;
  int bm = 0, bn = 0;
  float d[{BN // 2}];

  // one k tile into slot s, 16-byte chunks of row-major global rows; no swizzle: 8
  // consecutive threads fill the 8 rows of one core matrix (128 contiguous bytes, 8 global
  // rows); 128B swizzle: consecutive threads copy one global row (whole sectors)
  auto load = [&](int kt, int s) {{
    {ctype}* as = As + s * {BM * BK};
    {ctype}* bs = Bs + s * {BK * BN};
{copies}  }};

  // tiles t = blockIdx.x, + gridDim.x, ...: one per block with a grid of all tiles, a
  // persistent grid (fewer blocks) loops; groups of {group_m} tile rows, m fastest within
  // a group (== tile_coords), so that concurrent blocks share A rows and B columns in L2
  for (int t = blockIdx.x; t < {tiles_m * tiles_n}; t += gridDim.x) {{
  {{
    const int per = {group_m * tiles_n}, first = (t / per) * {group_m};
    const int size = min({tiles_m} - first, {group_m}), r = t % per;
    bm = (first + r % size) * {BM};
    bn = (r / size) * {BN};
  }}
#pragma unroll
  for (int i = 0; i < {BN // 2}; ++i) d[i] = 0.f;
#pragma unroll
  for (int s = 0; s < {ahead}; ++s) {{
    if (s < {ktiles}) load(s, s);
    cp_async_commit_group();
  }}
  for (int kt = 0; kt < {ktiles}; ++kt) {{
    if ({stages} == 1) {{ load(kt, 0); cp_async_commit_group(); }}   // no pipeline
    // tile kt landed (this thread's copies), visible to the async proxy, then to all
    cp_async_wait_group<{cp_wait}>();
    fence_proxy_async_shared_cta();
    __syncthreads();
    // refill the slot of tile kt - {2 if overlap else 1}, whose MMAs all warpgroups finished
    // before this barrier (wgmma.wait_group {1 if overlap else 0} below)
    if ({stages} > 1) {{
      int nk = kt + {ahead};
      if (nk < {ktiles}) load(nk, nk % {stages});
      cp_async_commit_group();
    }}
    const {ctype}* as = As + (kt % {stages}) * {BM * BK} + wg * 64 * {64 if sw else BK};
    const {ctype}* bs = Bs + (kt % {stages}) * {BK * BN};
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < {BK // 16}; ++kk)
      {mma}
    wgmma_commit_group();
    wgmma_wait_group<{1 if overlap else 0}>();
    if ({stages} == 1) __syncthreads();
  }}
  wgmma_wait_group<0>();
  // every warpgroup's MMAs done before the next tile's copies refill the slots
  __syncthreads();
{_epilogue(N, BN, epilogue)}  }}
}}
"""


EPILOGUES = ("8B", "16B")


def d_store_16b(thread: int, j: int) -> tuple:
    """The 16-byte epilogue of 8-column chunk ``j``: ``((row, column), sources)`` that
    warpgroup thread ``thread`` stores as one float4, ``sources`` the four (thread,
    register) pairs of :func:`d_fragment` it holds after one ``__shfl_xor_sync(.., 1)``:
    lanes ``l`` and ``l ^ 1`` trade halves, the even lane keeping row ``r`` (its columns
    ``c, c + 1`` and the odd lane's ``c + 2, c + 3``), the odd lane row ``r + 8`` (the
    even lane's ``c - 2, c - 1`` and its own), so each float4 starts at a multiple of 4
    columns (16 bytes)."""
    partner = thread ^ 1
    if thread % 2 == 0:
        src = [(thread, 4 * j), (thread, 4 * j + 1), (partner, 4 * j), (partner, 4 * j + 1)]
    else:
        src = [(partner, 4 * j + 2), (partner, 4 * j + 3), (thread, 4 * j + 2),
               (thread, 4 * j + 3)]
    return d_fragment(*src[0]), src


def _epilogue(N: int, BN: int, mode: str) -> str:
    """The D store of one warpgroup's 64 x BN fragment at (bm + 64 wg, bn): ``"8B"`` two
    float2 per 8-column chunk (rows r and r + 8); ``"16B"`` one float4 after a lane-pair
    shuffle (:func:`d_store_16b`): half the store instructions, each 16 bytes."""
    head = """      // D fragment: warp w rows 16w + lane/4 (+8), columns 8j + 2 (lane % 4) (+1)
      const int w = (tid % 128) / 32, lane = tid % 32;
      const int row = bm + wg * 64 + 16 * w + lane / 4;
"""
    if mode == "8B":
        return head + f"""#pragma unroll
      for (int j = 0; j < {BN // 8}; ++j) {{
        int col = bn + 8 * j + 2 * (lane % 4);
        *reinterpret_cast<float2*>(C + (size_t)row * {N} + col) =
            make_float2(d[4 * j], d[4 * j + 1]);
        *reinterpret_cast<float2*>(C + (size_t)(row + 8) * {N} + col) =
            make_float2(d[4 * j + 2], d[4 * j + 3]);
      }}
"""
    return head + """      const bool odd = lane & 1;
      // even lanes: row r, columns c .. c + 3; odd lanes: row r + 8, columns c - 2 .. c + 1
""" + d_store_16b_c("C", str(N), "bn + 2 * (lane % 4)", "d", str(BN // 8),
                    ["*reinterpret_cast<float4*>(out + 8 * j) = v;"], "      ", "(size_t)")


def d_store_16b_c(base: str, ld: str, col: str, d: str, chunks: str, store: list,
                  indent: str, cast: str = "") -> str:
    """C of the 16-byte epilogue (:func:`d_store_16b`), the one text of the generated
    kernel's (:func:`_epilogue`) and of the schedule language's ``wgmma.store16`` helper
    (``wgmma_intrin``). With ``row`` (the lane's fragment row r) and ``odd`` (``lane &
    1``) in scope: ``out``, the lane's first float4 (row r, or r + 8 two columns left, of
    a row-major ``base`` with ``ld`` elements per row, ``cast`` applied to the row; ``col``
    the lane's column ``c`` of chunk 0), then the loop over ``chunks`` 8-column chunks
    that trades halves with the partner lane (``__shfl_xor_sync`` 1) of the registers
    ``d[4 j + r]`` and runs the ``store`` lines (which store ``float4 v`` at ``out + 8 *
    j``); ``indent``: the indentation of the first level."""
    i, b = indent, indent + "  "
    body = "".join(f"{b}{line}\n" for line in store)
    return (f"{i}float* out = {base} + {cast}(row + (odd ? 8 : 0)) * {ld} + {col} - "
            f"(odd ? 2 : 0);\n"
            f"#pragma unroll\n"
            f"{i}for (int j = 0; j < {chunks}; ++j) {{\n"
            f"{b}float s0 = odd ? {d}[4 * j] : {d}[4 * j + 2], "
            f"s1 = odd ? {d}[4 * j + 1] : {d}[4 * j + 3];\n"
            f"{b}float x0 = __shfl_xor_sync(0xffffffffu, s0, 1), "
            f"x1 = __shfl_xor_sync(0xffffffffu, s1, 1);\n"
            f"{b}float4 v = odd ? make_float4(x0, x1, {d}[4 * j + 2], {d}[4 * j + 3])\n"
            f"{b}               : make_float4({d}[4 * j], {d}[4 * j + 1], x0, x1);\n"
            f"{body}{i}}}\n")


def block_threads(block: tuple, warp_specialized: bool = False) -> int:
    """Threads per block of :func:`gemm_source`: 128 per 64 rows of ``BM`` (+ 128 for the
    producer warpgroup when warp-specialized)."""
    return (block[0] // 64 + bool(warp_specialized)) * 128


def launch_registers(threads: int) -> int:
    """Registers per thread ptxas gives a kernel of ``__launch_bounds__(threads, 1)``
    (observed with nvcc 13 on the warp-specialized kernels: the 64K file over the threads,
    rounded down to a multiple of 8, at most 255): the block's register pool at launch."""
    return min(255, 65536 // threads // 8 * 8)


def ws_registers(consumers: int, producer: int = 72) -> tuple:
    """(producer, consumer) ``setmaxnreg`` register counts of the warp-specialized kernel
    with ``consumers`` consumer warpgroups: the producer drops to ``producer`` (72: its
    unrolled ``cp.async`` address math spills below that with the 128B swizzle, nvcc 13;
    40 with TMA), the consumers take what that frees of the block's pool at launch
    (:func:`launch_registers`), rounded down to a multiple of 8 and at most 240. The
    pool is all there is (PTX ISA "setmaxnreg": ``.inc`` blocks until the CTA's pool
    has the registers), so asking for more would hang the consumers;
    :class:`WgmmaGemm` checks the pool of the loaded kernel."""
    pool = (consumers + 1) * 128 * launch_registers((consumers + 1) * 128)
    consumer = min(240, (pool - producer * 128) // (consumers * 128) // 8 * 8)
    return producer, consumer


def _ws_kernel(N, K, block, stages, ctype, include, name, align, copies, mma, sw, tiles_m,
               tiles_n, group_m, tma=False, epilogue="8B") -> str:
    """The warp-specialized kernel of :func:`gemm_source`. Synchronization (PTX ISA,
    "Parallel Synchronization and Communication Instructions: mbarrier"): per stage slot
    ``s`` a *full* barrier (count 128: every producer thread's
    ``cp.async.mbarrier.arrive.noinc`` fires when that thread's copies into the slot have
    landed) and an *empty* barrier (count ``BM / 64 * 128``: each consumer thread arrives
    once its MMAs reading the slot are done, i.e. after the next ``wgmma.wait_group 1``).
    Both sides walk the same sequence of (tile, k tile) steps ``it = 0, 1, ...``: slot
    ``it % stages``, pass ``it / stages``; the consumers wait on full with parity ``pass &
    1``, the producer on empty with parity ``(pass & 1) ^ 1`` (the first pass over a fresh
    barrier does not wait). The producer runs up to ``stages`` steps ahead, across tile
    boundaries, so the next tile's copies overlap this tile's last MMAs and stores.
    ``tma``: the producer's first thread alone announces the slot's bytes
    (``mbarrier.arrive.expect_tx``, full's count is 1) and issues ``BK / 64`` A boxes
    ``[BM, 64]`` and ``BN / 64`` B boxes ``[BK, 64]`` (:func:`tensor_map_args`), which
    complete the phase by their bytes; the async-proxy writes need no proxy fence."""
    BM, BN, BK = block
    consumers = BM // 64
    ktiles = K // BK
    preg, creg = ws_registers(consumers, 40 if tma else 72)
    launch = launch_registers((consumers + 1) * 128)
    # an increase to the count already held (or a decrease to it) is no change: leave it out
    dec = f"setmaxnreg_dec<{preg}>();" if preg < launch else "// (no setmaxnreg.dec)"
    inc = f"setmaxnreg_inc<{creg}>();" if creg > launch else "// (no setmaxnreg.inc)"
    if tma:
        params = ("const __grid_constant__ PtTensorMap tmA, "
                  "const __grid_constant__ PtTensorMap tmB, float* __restrict__ C")
        full_count = 1
        producer = f"""    if (threadIdx.x % 128 == 0) {{   // one thread issues every box
      unsigned it = 0;
      for (int t = blockIdx.x; t < {tiles_m * tiles_n}; t += gridDim.x) {{
        const int per = {group_m * tiles_n}, first = (t / per) * {group_m};
        const int size = min({tiles_m} - first, {group_m}), r = t % per;
        const int bm = (first + r % size) * {BM}, bn = (r / size) * {BN};
        for (int kt = 0; kt < {ktiles}; ++kt, ++it) {{
          const int s = it % {stages};
          mbarrier_wait_parity(empty + s, ((it / {stages}) & 1) ^ 1);
          mbarrier_arrive_expect_tx(full + s, {(BM * BK + BK * BN) * 2});
#pragma unroll
          for (int a = 0; a < {BK // 64}; ++a)   // coordinates innermost first: (k, m)
            tma_load_2d(As + s * {BM * BK} + a * {BM * 64}, &tmA, kt * {BK} + a * 64, bm,
                        full + s);
#pragma unroll
          for (int j = 0; j < {BN // 64}; ++j)   // (n, k)
            tma_load_2d(Bs + s * {BK * BN} + j * {BK * 64}, &tmB, bn + j * 64, kt * {BK},
                        full + s);
        }}
      }}
    }}
"""
        consumer_fence = ""
    else:
        params = (f"const {ctype}* __restrict__ A, const {ctype}* __restrict__ B, "
                  "float* __restrict__ C")
        full_count = 128
        producer = f"""    const int tid = threadIdx.x - {consumers * 128};
    unsigned it = 0;
    for (int t = blockIdx.x; t < {tiles_m * tiles_n}; t += gridDim.x) {{
      const int per = {group_m * tiles_n}, first = (t / per) * {group_m};
      const int size = min({tiles_m} - first, {group_m}), r = t % per;
      const int bm = (first + r % size) * {BM}, bn = (r / size) * {BN};
      for (int kt = 0; kt < {ktiles}; ++kt, ++it) {{
        const int s = it % {stages};
        // the consumers released this slot's previous contents (pass it / stages - 1)
        mbarrier_wait_parity(empty + s, ((it / {stages}) & 1) ^ 1);
        {ctype}* as = As + s * {BM * BK};
        {ctype}* bs = Bs + s * {BK * BN};
{copies}        cp_async_mbarrier_arrive_noinc(full + s);
      }}
    }}
    // this thread's cp.async (never committed to a group) all landed before it exits
    asm volatile("cp.async.wait_all;" ::: "memory");
"""
        consumer_fence = (
            "        // the cp.async writes (generic proxy), acquired through the barrier, made\n"
            "        // visible to this thread's async-proxy reads (wgmma operands)\n"
            "        fence_proxy_async_shared_cta();\n")
    return f"""{include}
{COMMON}
{_mma_helper(BN, ptx_of(ctype))}

extern "C" __global__ void __launch_bounds__({(consumers + 1) * 128}, 1)
{name}({params}) {{
  extern __shared__ __align__(1024) unsigned char pt_smem_raw[];
  // the 128B swizzle XORs shared address bits 4-6 with 7-9: tiles start 1024-aligned
  unsigned char* pt_smem = pt_smem_raw + {align};
  {ctype}* As = reinterpret_cast<{ctype}*>(pt_smem);              // [stages][BM*BK]
  {ctype}* Bs = As + {stages} * {BM * BK};                          // [stages][BK*BN]
  unsigned long long* full = reinterpret_cast<unsigned long long*>(Bs + {stages} * {BK * BN});
  unsigned long long* empty = full + {stages};
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {{
    for (int s = 0; s < {stages}; ++s) {{
      mbarrier_init(full + s, {full_count});
      mbarrier_init(empty + s, {consumers * 128});
    }}
    // the initialized barriers visible to the async proxy (TMA's complete_tx)
    fence_mbarrier_init();
  }}
  __syncthreads();
  if (wg == {consumers}) {{
    // producer warpgroup: copies only
    {dec}
{producer}  }} else {{
    {inc}
    const int tid = threadIdx.x;
    float d[{BN // 2}];
    unsigned it = 0;
    for (int t = blockIdx.x; t < {tiles_m * tiles_n}; t += gridDim.x) {{
      const int per = {group_m * tiles_n}, first = (t / per) * {group_m};
      const int size = min({tiles_m} - first, {group_m}), r = t % per;
      const int bm = (first + r % size) * {BM}, bn = (r / size) * {BN};
#pragma unroll
      for (int i = 0; i < {BN // 2}; ++i) d[i] = 0.f;
      for (int kt = 0; kt < {ktiles}; ++kt, ++it) {{
        const int s = it % {stages};
        mbarrier_wait_parity(full + s, (it / {stages}) & 1);
{consumer_fence}        const {ctype}* as = As + s * {BM * BK} + wg * 64 * {64 if sw else BK};
        const {ctype}* bs = Bs + s * {BK * BN};
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < {BK // 16}; ++kk)
          {mma}
        wgmma_commit_group();
        // the MMAs of step it - 1 are done: release their slot
        wgmma_wait_group<1>();
        if (kt > 0) mbarrier_arrive(empty + (it - 1) % {stages});
      }}
      wgmma_wait_group<0>();
      mbarrier_arrive(empty + (it - 1) % {stages});
{_epilogue(N, BN, epilogue)}    }}
  }}
}}
"""


def tensor_map_args(drv, a_ptr: int, b_ptr: int, M: int, N: int, K: int, block: tuple,
                    dtype: str) -> tuple:
    """The two ``CUtensorMap`` of the TMA kernel (``cuTensorMapEncodeTiled`` of cuda-python's
    driver module ``drv``; CUDA driver API, "Tensor Map Object Management"): row-major
    ``A[M, K]`` as dimensions ``(K, M)`` (innermost first), row stride ``2 K`` bytes, boxes
    ``(64, BM)``; ``B[K, N]`` as ``(N, K)``, stride ``2 N``, boxes ``(64, BK)``; 128-byte
    swizzle (a box row is one 128-byte row: the layouts of :func:`a_offset_128b` and
    :func:`b_offset_128b` for each 64-column atom); :func:`.tma.encode_tensor_map`.

    Raises
    ------
    DeviceError
        When the driver refuses an encoding (via ``driver.check``).
    """
    BM, BN, BK = block
    return tuple(encode_tensor_map(drv, ptr, dtype, rows, cols, box_rows, 64, "128B",
                                   "wgmma_gemm")
                 for ptr, rows, cols, box_rows in ((a_ptr, M, K, BM), (b_ptr, K, N, BK)))


def ptx_of(ctype: str) -> str:
    """The PTX type name of a C element type of :data:`DTYPES`."""
    return {c: p for p, c in DTYPES.values()}[ctype]


def compile_gemm(M: int, N: int, K: int, block=(128, 128, 64), stages: int = 4,
                 dtype: str = "float16", arch: str = "sm_90a", compiler: str = "nvcc",
                 swap_b: bool = False, swizzle: str = "none", group_m: int = 1,
                 warp_specialized: bool = False, tma: bool = False,
                 epilogue: str = "8B") -> bytes:
    """The cubin of :func:`gemm_source` for ``arch``, which must be ``sm_90a`` (wgmma is an
    architecture-specific feature: plain sm_90 has no such instruction).

    Raises
    ------
    BuildError
        Another architecture (named in the message), or a compile error.
    """
    if arch != "sm_90a":
        raise BuildError(format_error(
            "wgmma_gemm", f"target architecture {arch!r}",
            "expected 'sm_90a': wgmma.mma_async is an sm_90a feature",
            hint="target='cuda -arch=sm_90a'"))
    from .compile import compile_cuda

    return compile_cuda(gemm_source(M, N, K, block, stages, dtype, swap_b=swap_b,
                                    swizzle=swizzle, group_m=group_m,
                                    warp_specialized=warp_specialized, tma=tma,
                                    epilogue=epilogue), arch,
                        compiler=compiler, name="wgmma_gemm.cu")


class WgmmaGemm:
    """The wgmma GEMM compiled for sm_90a, launchable on device pointers (the GPU's
    primary context, legacy default stream: torch's tensors and stream work as is).

    ``f(a_ptr, b_ptr, c_ptr)`` runs ``C = A @ B``; :meth:`time` gives seconds per run.
    ``persistent``: a grid of one block per SM looping over the tiles (else one block per
    tile); ``group_m``: tile rows per L2 group of the tile order (:func:`tile_coords`);
    ``warp_specialized``: a producer warpgroup and mbarriers (:func:`gemm_source`);
    ``tma``: its copies by TMA, the tensor maps built (:func:`tensor_map_args`) for each
    new pair of ``a_ptr``, ``b_ptr``; ``epilogue``: ``"8B"`` or ``"16B"`` stores.
    Compiling needs no GPU; loading does (``DeviceNotFoundError`` without one).
    """

    def __init__(self, M: int, N: int, K: int, block=(128, 128, 64), stages: int = 4,
                 dtype: str = "float16", compiler: str = "nvcc", swap_b: bool = False,
                 swizzle: str = "none", group_m: int = 1, persistent: bool = False,
                 warp_specialized: bool = False, tma: bool = False, epilogue: str = "8B"):
        self.M, self.N, self.K, self.block, self.stages = M, N, K, tuple(block), stages
        self.dtype, self.tma, self._maps = dtype, tma, {}
        self.swizzle, self.group_m, self.persistent = swizzle, group_m, persistent
        self.warp_specialized = warp_specialized
        self.smem = smem_bytes(self.block, stages, swizzle, warp_specialized)
        self.threads = block_threads(self.block, warp_specialized)
        self.source = gemm_source(M, N, K, block, stages, dtype, swap_b=swap_b,
                                  swizzle=swizzle, group_m=group_m,
                                  warp_specialized=warp_specialized, tma=tma,
                                  epilogue=epilogue)
        self.cubin = compile_gemm(M, N, K, block, stages, dtype, compiler=compiler,
                                  swap_b=swap_b, swizzle=swizzle, group_m=group_m,
                                  warp_specialized=warp_specialized, tma=tma,
                                  epilogue=epilogue)
        self._fn = None

    def _load(self):
        from .driver import check, context

        st = context()
        drv = st["driver"]
        mod = check(drv.cuModuleLoadData(self.cubin), "cuModuleLoadData")
        fn = check(drv.cuModuleGetFunction(mod, b"wgmma_gemm"), "cuModuleGetFunction")
        check(drv.cuFuncSetAttribute(
            fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            self.smem), "cuFuncSetAttribute")
        self._mod, self._fn, self._st = mod, fn, st
        if self.warp_specialized:
            # setmaxnreg.inc waits for registers of the block's pool: more than the pool
            # would hang the consumers, so refuse it here
            regs = check(drv.cuFuncGetAttribute(
                drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, fn),
                "cuFuncGetAttribute(num_regs)")
            consumers = self.block[0] // 64
            preg, creg = ws_registers(consumers, 40 if self.tma else 72)
            if preg * 128 + creg * consumers * 128 > int(regs) * self.threads:
                raise BuildError(format_error(
                    "wgmma_gemm", f"setmaxnreg {preg}/{creg} over a pool of {int(regs)} "
                    f"registers x {self.threads} threads",
                    "expected the producer's and consumers' registers within the pool "
                    "(launch_registers assumed more than ptxas gave)"))
        tiles = (self.M // self.block[0]) * (self.N // self.block[1])
        if self.persistent:   # one block per SM (1 block of this smem fits an SM)
            sms = check(drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, st["device"]),
                "cuDeviceGetAttribute(multi_processor_count)")
            tiles = min(tiles, int(sms))
        self.grid = tiles

    def __call__(self, a_ptr: int, b_ptr: int, c_ptr: int) -> None:
        import ctypes

        from .driver import check

        if self._fn is None:
            self._load()
        drv = self._st["driver"]
        # the kernel's parameters as the driver takes them: an array of addresses of
        # the values (as targets/gpu/module.py passes them)
        if self.tma:   # the two 128-byte tensor maps by address, then C's pointer value
            key = (int(a_ptr), int(b_ptr))
            if key not in self._maps:
                self._maps = {key: tensor_map_args(drv, a_ptr, b_ptr, self.M, self.N, self.K,
                                                   self.block, self.dtype)}
            ma, mb = self._maps[key]
            cval = ctypes.c_uint64(int(c_ptr))
            addrs = [ma.getPtr(), mb.getPtr(), ctypes.addressof(cval)]
        else:
            objs = [ctypes.c_uint64(int(p)) for p in (a_ptr, b_ptr, c_ptr)]
            addrs = [ctypes.addressof(o) for o in objs]
        ptrs = (ctypes.c_void_p * 3)(*addrs)
        check(drv.cuLaunchKernel(self._fn, self.grid, 1, 1, self.threads, 1, 1, self.smem,
                                 self._st["stream"],
                                 ctypes.addressof(ptrs), 0), "cuLaunchKernel", "wgmma_gemm")

    def synchronize(self) -> None:
        from .driver import check

        drv = self._st["driver"]
        check(drv.cuStreamSynchronize(self._st["stream"]), "running wgmma_gemm")

    def time(self, a_ptr: int, b_ptr: int, c_ptr: int, reps: int = 20) -> float:
        """Mean seconds of one run over ``reps`` back-to-back launches (after
        3 warm-up runs), timed with CUDA events."""
        from .driver import check

        for _ in range(3):
            self(a_ptr, b_ptr, c_ptr)
        drv = self._st["driver"]
        start = check(drv.cuEventCreate(0), "cuEventCreate")
        end = check(drv.cuEventCreate(0), "cuEventCreate")
        check(drv.cuEventRecord(start, self._st["stream"]), "cuEventRecord")
        for _ in range(reps):
            self(a_ptr, b_ptr, c_ptr)
        check(drv.cuEventRecord(end, self._st["stream"]), "cuEventRecord")
        check(drv.cuEventSynchronize(end), "running wgmma_gemm")
        ms = check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        drv.cuEventDestroy(start)
        drv.cuEventDestroy(end)
        return float(ms) / 1e3 / reps
