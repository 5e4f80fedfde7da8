"""The BLAS-style matmul and batch_matmul spaces: every knob path computes the product
(numpy float64 reference, poisoned outputs, ragged and degenerate sizes), and the space
holds the tutorial's hand schedule."""

from __future__ import annotations

import importlib.util
import itertools
import pathlib
import re

import numpy as np
import pytest

import polytile
from polytile.autotune import get_template

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tutorial():
    spec = importlib.util.spec_from_file_location("cpu_matmul_tutorial",
                                                  ROOT / "tutorials" / "02_cpu_matmul.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _parallel_at_small_sizes(monkeypatch):
    """The products here are small (cheap to build and check), below the size where the
    template drops the parallel loops (``SERIAL_PRODUCT``): keep them, so that the
    parallel paths are what these tests check."""
    from polytile.autotune import templates

    monkeypatch.setattr(templates, "SERIAL_PRODUCT", 0)


def _parallel_loops(s, tensors) -> list:
    """The heads of the parallel loops of the lowered loop nest of ``s``."""
    return [ln.strip() for ln in str(polytile.lower(s, tensors)).splitlines()
            if " in parallel(" in ln]


def _config(name: str, args: tuple, **knobs):
    sp = get_template(name).space(args)
    return sp.from_json(dict(sp.default().knob_values(), **knobs))


def _check(name: str, args: tuple, cfg, seed: int = 0, threads=(None,)) -> None:
    """Build ``cfg`` once and compare it with numpy, run with each of ``threads`` (None:
    the current setting)."""
    from polytile.targets.llvm.runtime import get_num_threads, set_num_threads

    t = get_template(name)
    s, tensors = t.instantiate(cfg, args)
    f = polytile.build(s, tensors)
    old = get_num_threads()
    try:
        for n in threads:
            if n is not None:
                set_num_threads(n)
            _compare(name, args, cfg, f, tensors, seed)
    finally:
        set_num_threads(old)


def _compare(name, args, cfg, f, tensors, seed) -> None:
    rng = np.random.default_rng(seed)
    A, B, C = tensors
    a = rng.uniform(0.5, 1.5, [int(d) for d in A.shape]).astype("float32")
    b = rng.uniform(-1.0, 1.0, [int(d) for d in B.shape]).astype("float32")
    ref = np.matmul(a.astype("float64"), b.astype("float64"))
    for _ in range(2):  # twice: a stale packed buffer would show on the second call
        c = np.full([int(d) for d in C.shape], np.nan, "float32")
        f(a, b, c)
        K = A.shape[-1]
        np.testing.assert_allclose(c, ref, rtol=2e-5, atol=2e-6 * K,
                                   err_msg=f"{name}{args} {cfg.knob_values()}")


# ragged everywhere: 37 rows = 24 + 13 (12-row panels), 53 columns = 32 + 21 (16-lane
# panels), K = 70 = 2 * 32 + 6
RAGGED = dict(tile_i=[-1, 2, 12], tile_j=[-1, 2, 16], tile_k=[-1, 32])


@pytest.mark.parametrize("order,pack_a,pack_b",
                         list(itertools.product(["ij", "goto"], [False, True], [False, True])))
def test_matmul_every_packing_and_order_at_ragged_sizes(order, pack_a, pack_b):
    args = (37, 53, 70)
    # each parallel choice in turn (all of them meet every order and packing)
    pars = ["i0", "i0.j0", "j0", "none"]
    k = 4 * (order == "goto") + 2 * pack_a + pack_b
    for par in (pars[k % 4], pars[(k + 1) % 4]):
        _check("matmul", args, _config("matmul", args, order=order, pack_a=pack_a,
                                       pack_b=pack_b, parallel=par, **RAGGED))


@pytest.mark.parametrize("reorder", [[0, 1, 2], [2, 1, 0], [1, 2, 0]])
def test_matmul_goto_loop_orders_and_rolled_register_rows(reorder):
    args = (37, 53, 70)
    _check("matmul", args, _config("matmul", args, order="goto", reorder=reorder,
                                   unroll=["unroll", "none"], tile_k=[-1, 7], **{
                                       k: v for k, v in RAGGED.items() if k != "tile_k"}))


@pytest.mark.parametrize("args", [(1, 17, 5), (13, 1, 7), (7, 19, 1), (1, 1, 1), (31, 3, 97)])
@pytest.mark.parametrize("order", ["ij", "goto"])
def test_matmul_degenerate_and_prime_sizes(args, order):
    _check("matmul", args, _config("matmul", args, order=order))


def test_matmul_micro_kernel_shapes():
    """The AVX-512 register shapes: 12 x 32, 6 x 64 and 14 x 32 (28 accumulators),
    each with a ragged last panel."""
    args = (43, 130, 67)
    for ti, tj in (([-1, 2, 12], [-1, 2, 32]), ([-1, 4, 6], [-1, 1, 64]),
                   ([-1, 2, 14], [-1, 4, 32])):
        _check("matmul", args, _config("matmul", args, tile_i=ti, tile_j=tj,
                                       tile_k=[-1, 32]))


@pytest.mark.parametrize("order", ["ij", "goto"])
@pytest.mark.parametrize("pack", [False, True])
def test_batch_matmul_every_order_packing_and_parallel_loop(order, pack):
    args = (3, 37, 53, 70)
    for par in ("b", "b.i0", "none"):
        _check("batch_matmul", args, _config("batch_matmul", args, order=order,
                                             pack_a=pack, pack_b=pack, parallel=par,
                                             **RAGGED))
    # b, i0 and j0 fused: whole tiles (fusing three loops of ragged tiles takes isl
    # minutes to generate code for)
    args = (3, 48, 64, 70)
    _check("batch_matmul", args, _config("batch_matmul", args, order=order, pack_a=pack,
                                         pack_b=pack, parallel="b.i0.j0", **RAGGED))


def test_batch_matmul_size_one_batch_and_rows():
    args = (1, 1, 29, 13)
    for order in ("ij", "goto"):
        _check("batch_matmul", args, _config("batch_matmul", args, order=order))


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (256, 4096, 64), (64, 64, 64),
                                   (100, 70, 50), (60, 128, 1100), (60, 128, 2048),
                                   (400, 128, 2048)])
def test_matmul_space_holds_the_tutorial_schedule(shape):
    """``blas_like`` of the tutorial is a point of the matmul space: the same loop nest."""
    M, N, K = shape
    s, args = _tutorial().blas_like(M, N, K)
    hand = str(polytile.lower(s, args))
    big = M * N * K > 64**3  # smaller products: no packing, no threads, 12 x 32
    mr, nr = (6, 64) if big else (12, 32)
    # A blocks of 96 x kc (kc: all of K up to 1024, else 1024 where it divides K, else
    # 512; 192 rows when K < 512; 192 x 256 when small), B blocks of half the columns
    # (at most 2048)
    kc = K if big and K <= 1024 else min(512 if big else 256, K)
    if big and K > 1024 and K % 1024 == 0:
        kc = 1024
    mc0 = 192 if kc < 512 or K > kc >= 1024 else 96
    mc, nc = min(mc0, mr * -(-M // mr)), min(2048, nr * -(-N // (2 * nr)))
    order = "goto"   # (blis does not scale with threads yet)
    cfg = _config("matmul", shape, tile_i=[-1, mc // mr, mr], tile_j=[-1, nc // nr, nr],
                  tile_k=[-1, kc], pack_a=big, pack_b=big, order=order,
                  parallel="i0.j0" if big else "none", reorder=[0, 1, 2],
                  unroll=["none", "unroll"])
    s2, args2 = get_template("matmul").instantiate(cfg, shape)
    assert str(polytile.lower(s2, args2)) == hand
    # and it is the template's default config
    assert get_template("matmul").space(shape).default().knob_values() == cfg.knob_values()


@pytest.mark.parametrize("args", [(13, 67, 2048), (5, 131, 3072), (200, 67, 2048)])
def test_matmul_default_kc_blocks_of_1024(args):
    """Past K = 1024 the default takes reduction blocks of 1024 where they divide K
    (``default_kc``; 512 before) and row blocks of 192 (96 before): several blocks, A in
    k blocks of 16, ragged row and column panels, computed right at one and two
    threads."""
    from polytile.autotune.templates import default_kc

    assert default_kc(*args) == 1024
    assert default_kc(13, 67, 1100) == 512 and default_kc(13, 67, 1000) == 1000
    # row blocks of 192 with several blocks of 1024, 96 with one or with blocks of 512
    for shape, tile_i, tile_k in (((4096, 4096, 4096), 32, 1024),
                                  ((1024, 1024, 1024), 16, 1024),
                                  ((1024, 1024, 1100), 16, 512)):
        knobs = get_template("matmul").space(shape).default().knob_values()
        assert (knobs["tile_i"], knobs["tile_k"]) == ([-1, tile_i, 6], [-1, tile_k])
    cfg = get_template("matmul").space(args).default()
    assert cfg.knob_values()["tile_k"] == [-1, 1024]
    _check("matmul", args, cfg, seed=args[2], threads=(1, 2))


def test_tutorial_schedule_numerics_at_odd_sizes():
    tut = _tutorial()
    rng = np.random.default_rng(3)
    # (29, 67, 13) and (37, 53, 1): one reduction block (k0 right above k1, the init per
    # micro-tile) with ragged row and column panels
    for (M, N, K), pack in (((29, 67, 41), True), ((1, 40, 3), True), ((50, 1, 300), True),
                            ((29, 67, 41), False), ((29, 67, 13), True), ((37, 53, 1), True),
                            ((29, 67, 13), False)):
        s, args = tut.blas_like(M, N, K, kc=16, mc=24, nc=32, pack=pack, threads=True)
        f = polytile.build(s, args)
        a = rng.standard_normal((M, K)).astype("float32")
        b = rng.standard_normal((K, N)).astype("float32")
        c = np.full((M, N), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pack,parallel", [(True, "i0.j0"), (False, "none"), (True, "i0")])
def test_matmul_single_reduction_block_initialises_per_micro_tile(pack, parallel):
    """With one reduction block (``tile_k`` covering K) the goto order runs ``k0`` right
    above ``k1``: C's zero initialisation is done per micro-tile, inside the row blocks,
    not in a pass of its own over a column block before them; and it still computes the
    product at ragged and prime sizes."""
    for args in ((37, 53, 13), (61, 97, 7), (1, 5, 1)):
        tiles = dict(tile_i=[-1, 2, 12], tile_j=[-1, 2, 16]) if args[0] > 1 else {}
        cfg = _config("matmul", args, **tiles, tile_k=[-1, args[2]], order="goto",
                      pack_a=pack, pack_b=pack, parallel=parallel)
        _check("matmul", args, cfg, seed=args[0])
    s, tensors = get_template("matmul").instantiate(cfg := _config(
        "matmul", (37, 53, 13), tile_i=[-1, 2, 12], tile_j=[-1, 2, 16], tile_k=[-1, 13],
        order="goto", pack_a=pack, pack_b=pack, parallel=parallel), (37, 53, 13))
    lines = str(polytile.lower(s, tensors)).splitlines()
    # (the accumulator is the local register tile C.local: register_tile)
    init = next(n for n, ln in enumerate(lines) if re.search(r"C\.local\[.*\] = 0f", ln))
    update = next(n for n, ln in enumerate(lines)
                  if re.search(r"C\.local\[.*\] = \(C\.local\[", ln))
    tile = next(n for n, ln in enumerate(lines) if ln.strip().startswith("for i.inner.outer"))
    # the init sits at the depth of the micro-kernel's k loop: between the init and the
    # first update there is only the k loop (and the vector loops of both)
    between = [ln.strip() for ln in lines[init + 1:update] if ln.strip().startswith("for ")]
    assert all(b.startswith(("for j", "for k")) for b in between), lines[init:update + 1]
    assert tile < init, "the init is not inside the micro-tile loop"


@pytest.mark.parametrize("reorder,pack,parallel", [
    ([0, 1, 2], True, "i0.j0"), ([2, 1, 0], True, "i0"), ([1, 2, 0], False, "none"),
    ([0, 2, 1], True, "j0")])
def test_matmul_register_tile_with_one_reduction_block(reorder, pack, parallel):
    """With one reduction block in the goto order each micro-tile accumulates in a local
    ``mr x nr`` tile (``register_tile``), computed at the innermost cache-block loop
    whatever the reorder knob puts there, and C is only stored, never read: exact at
    ragged and prime sizes with 1 and 2 threads, and in a batch."""
    from polytile.autotune.templates import register_tile

    for args, tiles in (((37, 53, 13), dict(tile_i=[-1, 2, 12], tile_j=[-1, 2, 16])),
                        ((61, 97, 31), dict(tile_i=[-1, 3, 6], tile_j=[-1, 1, 48])),
                        ((1, 5, 1), {})):
        cfg = _config("matmul", args, **tiles, tile_k=[-1, args[2]], order="goto",
                      reorder=reorder, pack_a=pack, pack_b=pack, parallel=parallel)
        _check("matmul", args, cfg, seed=args[1], threads=(1, 2))
    s, tensors = get_template("matmul").instantiate(cfg := _config(
        "matmul", (61, 97, 31), tile_i=[-1, 3, 6], tile_j=[-1, 1, 48], tile_k=[-1, 31],
        order="goto", reorder=reorder, pack_a=pack, pack_b=pack, parallel=parallel),
        (61, 97, 31))
    ir = str(polytile.lower(s, tensors))
    assert "C.local = alloc(float32[6, 48]" in ir, ir
    assert not re.search(r"= \(C\[", ir), "C is still the accumulator"
    args = (3, 37, 53, 13)
    cfg = _config("batch_matmul", args, tile_i=[-1, 2, 12], tile_j=[-1, 2, 16],
                  tile_k=[-1, 13], order="goto", reorder=reorder, pack_a=pack,
                  pack_b=pack, parallel="b.i0")
    _check("batch_matmul", args, cfg, seed=4, threads=(1, 2))
    # several reduction blocks, or another order: C stays the accumulator
    for knobs in (dict(tile_k=[-1, 32]), dict(order="ij", tile_k=[-1, 70])):
        cfg = _config("matmul", (37, 53, 70), **dict(RAGGED, **knobs))
        s, tensors = get_template("matmul").instantiate(cfg, (37, 53, 70))
        assert not register_tile(cfg, tensors[2]) and "C.local" not in str(
            polytile.lower(s, tensors))


@pytest.mark.parametrize("parallel", ["b.i0", "b.i0.j0"])
def test_batch_matmul_single_reduction_block_with_fused_parallel_batch(parallel):
    """One reduction block in the goto order packs B at ``j0``; with the batch loop fused
    with ``j0`` for the parallel loop, the packing attaches at the fused loop (CI found the
    sampled config refused: 'j.outer was already fused')."""
    args = (3, 37, 53, 13)
    cfg = _config("batch_matmul", args, tile_i=[-1, 2, 12], tile_j=[-1, 2, 16],
                  tile_k=[-1, 13], order="goto", pack_a=True, pack_b=True, parallel=parallel)
    _check("batch_matmul", args, cfg, seed=3)


@pytest.mark.parametrize("order,reorder", [("goto", [2, 1, 0]), ("goto", [1, 2, 0]),
                                           ("goto", [0, 1, 2]), ("ij", [2, 1, 0])])
def test_matmul_prefetch_never_refuses_a_sampled_loop_order(order, reorder):
    # the next micro-tile of C is prefetched at i1; with i0 below i1 (goto, reorder
    # [2, 1, 0]) one iteration of i1 spans a block of C past Stage.prefetch's limit, which
    # the tuner met as build errors: the template prefetches only micro-tile-sized spans
    args = (1024, 1024, 1024)
    cfg = _config("matmul", args, order=order, reorder=reorder, tile_i=[-1, 4, 16],
                  tile_j=[-1, 32, 16], tile_k=[-1, 256], pack_a=False, pack_b=False)
    s, tensors = get_template("matmul").instantiate(cfg, args)
    text = str(polytile.lower(s, tensors, stop_after=None))
    if order == "goto" and reorder in ([2, 1, 0], [0, 1, 2]):
        # i0 below i1: a block of C, not prefetched; the default: the next micro-tile
        assert ("llvm.prefetch" in text) == (reorder == [0, 1, 2])


@pytest.mark.parametrize("args,kc,parallel", [((37, 53, 64), 32, "i0.j0"),
                                              ((29, 1, 48), 16, "none"),
                                              ((1, 67, 96), 96, "i0"),
                                              ((61, 97, 128), 128, "i0.j0")])
def test_matmul_a_panels_in_k_blocks(args, kc, parallel):
    """When 16 divides ``kc`` and ``kc`` divides K, A is packed in blocks of 16 steps of k
    (``packedA[p, q, r, s]``, a vectorized copy, no transpose) and the micro-kernel's k loop
    is split by 16 with 8 steps unrolled: the product at ragged M and N, both orders."""
    for order in ("goto", "ij"):
        tiles = dict(tile_i=[-1, 2, 12], tile_j=[-1, 2, 16]) if min(args) > 24 else {}
        cfg = _config("matmul", args, **tiles, tile_k=[-1, kc], order=order, pack_a=True,
                      pack_b=True, parallel=parallel)
        s, tensors = get_template("matmul").instantiate(cfg, args)
        pa = next(t for t in s.stages if t.op.name == "packedA").op
        assert [int(d) for d in pa.output(0).shape][-1] == 16
        _check("matmul", args, cfg, seed=args[0] + kc)


def test_matmul_a_panels_plain_when_k_blocks_are_ragged():
    # K = 70 is not a multiple of kc = 32: the plain [P, K, mr] panel
    cfg = _config("matmul", (37, 53, 70), **RAGGED, pack_a=True)
    s, tensors = get_template("matmul").instantiate(cfg, (37, 53, 70))
    pa = next(t for t in s.stages if t.op.name == "packedA").op
    assert [int(d) for d in pa.output(0).shape] == [4, 70, 12]


@pytest.mark.parametrize("pack,parallel,tiles", [
    (True, "i0.j0", dict(RAGGED)),
    (False, "j0", dict(RAGGED, reorder=[1, 0, 2])),
    (True, "i0", dict(RAGGED, tile_k=[-1, 70])),
    (True, "j0", dict(tile_i=[-1, 3, 6], tile_j=[-1, 2, 64], tile_k=[-1, 32]))])
def test_matmul_blis_order(pack, parallel, tiles):
    """The blis order (``i0, k0, j0, i1, j1``; A's block packed at ``k0``, B's at ``j0``;
    with one reduction block ``k0`` right above ``k1`` and A packed at ``i0``) at ragged
    sizes, each parallel choice, a reorder, one reduction block and A in k blocks of 16
    (37 x 197 x 64: ragged 6-row and 64-lane panels and blocks)."""
    args = (37, 197, 64) if tiles["tile_i"][2] == 6 else (37, 53, 70)
    cfg = _config("matmul", args, order="blis", pack_a=pack, pack_b=pack,
                  parallel=parallel, **tiles)
    _check("matmul", args, cfg, seed=len(parallel))
    if tiles["tile_i"][2] == 6:
        s, tensors = get_template("matmul").instantiate(cfg, args)
        lines = str(polytile.lower(s, tensors)).splitlines()
        at = {name: next(n for n, ln in enumerate(lines) if re.search(pat, ln))
              for name, pat in (("k0", r"for k\.outer "), ("pa", r"packedA\[.*\] = "),
                                ("pb", r"packedB\[.*\] = "))}
        at["j1"] = next(n for n, ln in enumerate(lines) if re.search(
            r"for j\.inner\.outer .*prefetch", ln) and "for k" in lines[n + 1])
        # A's block packed in the k0 loop, then B's, then the micro-tiles, the next one
        # prefetched at j1 (the inner of the micro-tile loops)
        assert at["k0"] < at["pa"] < at["pb"] < at["j1"], lines


def test_batch_matmul_blis_order():
    args = (3, 37, 53, 70)
    _check("batch_matmul", args, _config("batch_matmul", args, order="blis",
                                         parallel="b.i0.j0", **RAGGED))


def test_blis_knobs_are_points_of_the_space():
    """``blis_knobs`` (the benchmark's blis config) names candidates of the space at any
    size, down to matrices smaller than a register tile; and it computes the product."""
    from polytile.autotune.templates import blis_knobs

    for shape in itertools.product((1, 7, 12, 96, 1021), (1, 31, 96, 400, 768), (1, 64)):
        _config("matmul", shape, **blis_knobs(*shape))
    _check("matmul", (100, 70, 50), _config("matmul", (100, 70, 50),
                                            **blis_knobs(100, 70, 50)))


def test_matmul_block_candidates_for_the_blis_order():
    """Blocks of A of all the panels or half of them, whatever their number, and blocks
    of B of 3 or 6 register tiles that leave a ragged block (384 of 1024 columns)."""
    sp = get_template("matmul").space((1024, 1024, 1024))
    ti = [e.size for e in sp.knobs["tile_i"].entities]
    tj = [e.size for e in sp.knobs["tile_j"].entities]
    assert [-1, 171, 6] in ti and [-1, 86, 6] in ti and [-1, 6, 64] in tj
    assert len(ti) == len({tuple(x) for x in ti}) and len(tj) == len({tuple(x) for x in tj})


def test_matmul_space_holds_the_tutorial_blis_schedule():
    """``blas_like(order="blis")`` is the template's blis config: the same loop nest; and
    it computes the product at ragged sizes."""
    tut = _tutorial()
    shape = (1024, 1024, 1024)
    s, args = tut.blas_like(*shape, order="blis", mc=516, nc=384)
    cfg = _config("matmul", shape, tile_i=[-1, 86, 6], tile_j=[-1, 6, 64],
                  tile_k=[-1, 1024], order="blis", parallel="i0.j0", reorder=[0, 1, 2],
                  unroll=["none", "unroll"])
    s2, args2 = get_template("matmul").instantiate(cfg, shape)
    assert str(polytile.lower(s2, args2)) == str(polytile.lower(s, args))
    rng = np.random.default_rng(5)
    for (M, N, K), kc in (((37, 197, 64), 32),):
        s, args = tut.blas_like(M, N, K, order="blis", mc=18, nc=128, kc=kc, threads=True)
        f = polytile.build(s, args)
        a = rng.standard_normal((M, K)).astype("float32")
        b = rng.standard_normal((K, N)).astype("float32")
        c = np.full((M, N), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4)


def _blis_shared(args: tuple, **over):
    from polytile.autotune.templates import blis_knobs

    return _config("matmul", args, **dict(blis_knobs(*args), **over))


def test_blis_order_shares_a_and_splits_the_column_blocks():
    """BLIS's sharing (``parallel="i0.j0"`` in the blis order, :func:`blis_knobs`): A's
    block is packed once at ``k0`` by a parallel loop over its panels, then the threads
    split ``j0`` below it, each packing the B blocks of its own columns; exact at odd,
    ragged sizes (two k blocks, one of them ragged) with 1 and 2 threads."""
    args = (37, 197, 70)  # 37 = 6 * 6 + 1 rows, 197 = 3 * 64 + 5 columns, 70 = 2 * 32 + 6
    cfg = _blis_shared(args, tile_k=[-1, 32])
    assert cfg["tile_j"].size[1] == 2  # at least two column blocks: one per thread
    s, tensors = get_template("matmul").instantiate(cfg, args)
    f = polytile.build(s, tensors)
    lines = str(f.func).splitlines()
    heads = [ln.strip() for ln in lines if ln.lstrip().startswith("for ")]
    k0 = next(n for n, h in enumerate(heads) if h.startswith("for k.outer in range"))
    assert heads[k0 + 1].startswith("for p in parallel("), heads  # A's panels, shared
    pj = next(n for n, h in enumerate(heads) if n > k0 and h.startswith("for j.outer in"))
    assert "parallel(0, 2)" in heads[pj], heads  # the column blocks, split by the threads
    # B's block packed inside the parallel loop (each thread its own columns)
    assert heads[pj + 1].startswith("for p in range("), heads
    from polytile.targets.llvm.runtime import get_num_threads, set_num_threads

    old = get_num_threads()
    try:
        for n in (1, 2):
            set_num_threads(n)
            _compare("matmul", args, cfg, f, tensors, seed=n)
    finally:
        set_num_threads(old)


@pytest.mark.slow
@pytest.mark.parametrize("args", [(1021, 1003, 1009), (1024, 1024, 1024)])
def test_blis_order_exact_at_large_odd_sizes_with_1_and_2_threads(args):
    _check("matmul", args, _blis_shared(args), seed=2, threads=(1, 2))


@pytest.mark.parametrize("name,args", [("matmul", (64, 64, 64)), ("matmul", (37, 53, 70)),
                                       ("batch_matmul", (2, 37, 29, 61))])
def test_small_products_have_no_parallel_loop_whatever_the_knob(name, args, monkeypatch):
    """Issue 13: at 64^3 the blis config (``j0`` parallel, 2 iterations) ran at 7 GFLOP/s
    at 2 threads against 106 at 1: each call woke the sleeping second thread (passive
    wait policy), about 65 us on an idle VM, for 4.5 us of work. At most
    ``SERIAL_PRODUCT`` multiply-adds, no parallel knob value (in any order) leaves a
    parallel loop; one more reduction step, and the knob's loop is parallel again."""
    from polytile.autotune import templates

    monkeypatch.setattr(templates, "SERIAL_PRODUCT", templates.SMALL_PRODUCT)
    t = get_template(name)
    pars = ["b", "b.i0", "b.i0.j0"] if name == "batch_matmul" else ["i0", "i0.j0", "j0"]
    for order, par in itertools.product(["ij", "goto", "blis"], pars):
        from polytile.autotune.templates import blis_knobs

        over = dict(blis_knobs(*args)) if order == "blis" and name == "matmul" else {}
        over.update(order=order, parallel=par, pack_a=True, pack_b=True)
        s, tensors = t.instantiate(_config(name, args, **over), args)
        assert _parallel_loops(s, tensors) == [], (order, par)
    # just above the bound the blis config keeps its parallel loops
    big = args[:-1] + (args[-1] + 1,) if name == "matmul" and args[0] == 64 else None
    if big:
        from polytile.autotune.templates import blis_knobs as bk

        s, tensors = t.instantiate(_config(name, big, **bk(*big)), big)
        assert _parallel_loops(s, tensors)


def test_a_symbolic_product_is_not_taken_for_a_small_one(monkeypatch):
    # serial_product bounds the work only for constant sizes: a te.size_var row count
    # keeps the parallel knob (and does not fail on int() of a symbolic size)
    from polytile import te
    from polytile.autotune import templates

    monkeypatch.setattr(templates, "SERIAL_PRODUCT", templates.SMALL_PRODUCT)

    n = te.size_var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((n, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert not templates.serial_product(C)
    A8 = te.placeholder((8, 8), name="A8")
    C8 = te.compute((8, 8), lambda i, j: te.sum(A8[i, k] * B[k, j], axis=k), name="C8")
    assert templates.serial_product(C8)
