"""Symbolic shapes on CUDA: one kernel source for every size, grids computed at launch.

Numeric tests run on the GPU (marked ``gpu``) and on the host emulation of the CUDA driver
(``tests/targets/cuda_emulator.py``: the generated CUDA C compiled by g++), which runs the
whole launch path (sizes read off the arrays, grid evaluated per call, empty grids not
launched). The sources are also compiled with ``nvcc -arch=sm_90`` when it is installed.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import polytile
from polytile import te
from polytile.errors import ScheduleError


def _nvcc_check(src: str, tmp_path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return
    cu = tmp_path / "k.cu"
    cu.write_text(src)
    res = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "k.cubin"),
                          str(cu)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def _vadd():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def _source(s, args) -> str:
    from polytile.targets.c_printer import print_c_module
    from polytile.targets.cuda.dialect import CUDADialect

    func = polytile.lower(s, args, target="cuda", stop_after=None)
    return print_c_module(func, CUDADialect()).source


def test_vadd_source_compiles_and_grid_is_symbolic(tmp_path):
    s, args = _vadd()
    text = str(polytile.lower(s, args, target="cuda"))
    assert "grid=[((n + 63) // 64), 1, 1]" in text
    _nvcc_check(_source(s, args), tmp_path)


def test_vadd_runs_all_sizes(cuda_build):
    s, args = _vadd()
    f = cuda_build(s, args)
    for n in (0, 1, 63, 64, 65, 1000):
        a = np.random.default_rng(n).uniform(-1, 1, n).astype("float32")
        b = np.random.default_rng(n + 1).uniform(-1, 1, n).astype("float32")
        da, db = polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda")
        dc = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
        f(da, db, dc)
        np.testing.assert_allclose(dc.numpy(), a + 2.0 * b, rtol=1e-6)


def _rowsum():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_rowsum_runs_all_sizes(cuda_build, tmp_path):
    s, args = _rowsum()
    _nvcc_check(_source(s, args), tmp_path)
    f = cuda_build(s, args)
    for n, m in ((0, 3), (1, 1), (33, 7), (70, 0)):
        a = np.random.default_rng(n + m).uniform(-1, 1, (n, m)).astype("float32")
        da = polytile.nd.array(a, device="cuda")
        db = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
        f(da, db)
        np.testing.assert_allclose(db.numpy(), a.astype(np.float64).sum(axis=1), rtol=1e-5,
                                   atol=1e-5)


def test_symbolic_thread_extent_refused():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="bound to 'threadIdx.x' but has the symbolic "
                       "extent n"):
        polytile.lower(s, [A, C], target="cuda")


def _row_in_shared():
    # each block stages a whole row of B (m elements) in shared memory: dynamic shared
    # memory whose size is computed at each launch
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + B[i, m - 1 - j], name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, te.thread_axis("blockIdx.x"))
    jo, ji = s[C].split(j, factor=32)
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[B].set_scope("shared")
    s[B].compute_at(s[C], i)
    bo, bi = s[B].split(B.op.axis[1], factor=32)
    s[B].bind(bi, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_dynamic_shared_memory_source(tmp_path):
    s, args = _row_in_shared()
    src = _source(s, args)
    assert "extern __shared__" in src and "pt_dynamic_shared + 0" in src
    _nvcc_check(src, tmp_path)


def test_dynamic_shared_memory_runs(cuda_build):
    s, args = _row_in_shared()
    f = cuda_build(s, args)
    for n, m in ((0, 5), (1, 1), (3, 33), (5, 100)):
        a = np.random.default_rng(n * m).uniform(-1, 1, (n, m)).astype("float32")
        da = polytile.nd.array(a, device="cuda")
        dc = polytile.nd.array(np.full((n, m), np.nan, "float32"), device="cuda")
        f(da, dc)
        np.testing.assert_allclose(dc.numpy(), 2.0 * a + 2.0 * a[:, ::-1], rtol=1e-6)


def test_shared_memory_over_limit_at_launch(cuda_build):
    s, args = _row_in_shared()
    f = cuda_build(s, args)
    a = np.zeros((1, 20000), "float32")   # 80 kB of shared memory for one row
    with pytest.raises(ValueError, match="bytes of shared memory for the sizes"):
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(a.copy(), device="cuda"))


def _gemm_shared():
    n, K = te.var("n"), 32
    A = te.placeholder((n, K), name="A")
    B = te.placeholder((K, n), name="B")
    k = te.reduce_axis((0, K), "k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    bi, ti = s[C].split(i, factor=8)
    bj, tj = s[C].split(j, factor=8)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=8)
    s[AS].compute_at(s[CL], ko)
    s[BS].compute_at(s[CL], ko)
    for T in (AS, BS):
        x, y = T.op.axis
        s[T].bind(x, te.thread_axis("threadIdx.y"))
        s[T].bind(y, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def test_gemm_shared_tiles_all_sizes(cuda_build, tmp_path):
    s, args = _gemm_shared()
    text = str(polytile.lower(s, args, target="cuda"))
    assert "A.shared = alloc(float32[8, 8], scope='shared')" in text   # constant tiles
    assert "grid=[((n + 7) // 8), ((n + 7) // 8), 1]" in text
    _nvcc_check(_source(s, args), tmp_path)
    f = cuda_build(s, args)
    for n in (0, 1, 7, 9, 30):
        g = np.random.default_rng(n)
        a = g.uniform(-1, 1, (n, 32)).astype("float32")
        b = g.uniform(-1, 1, (32, n)).astype("float32")
        dc = polytile.nd.array(np.full((n, n), np.nan, "float32"), device="cuda")
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), dc)
        np.testing.assert_allclose(dc.numpy(), a.astype(np.float64) @ b, rtol=1e-5,
                                   atol=1e-5)


def test_cubin_export_of_symbolic_grids_and_shared_memory(cuda_build, tmp_path):
    # the launch plan keeps grid and dynamic shared memory as expressions of n and m; the
    # loaded module reads n and m off the arrays at each call, as the built one does
    import json

    from polytile.runtime import load_module

    s, args = _row_in_shared()
    path = cuda_build(s, args).export_library(str(tmp_path / "rows.cubin"))
    meta = json.loads(open(path + ".json").read())
    assert meta["version"] == 2
    assert [p["shape"] for p in meta["params"][:2]] == [["n", "m"], ["n", "m"]]
    assert meta["kernels"][0]["grid"][0] == "n"
    assert "m" in json.dumps(meta["kernels"][0]["dynamic_shared_bytes"])
    f = load_module(path)
    for n, m in ((0, 5), (1, 1), (3, 33), (5, 100)):
        a = np.random.default_rng(n * m + 1).uniform(-1, 1, (n, m)).astype("float32")
        da = polytile.nd.array(a, device="cuda")
        dc = polytile.nd.array(np.full((n, m), np.nan, "float32"), device="cuda")
        f(da, dc)
        np.testing.assert_allclose(dc.numpy(), 2.0 * a + 2.0 * a[:, ::-1], rtol=1e-6)
    a = np.zeros((1, 20000), "float32")
    with pytest.raises(ValueError, match="bytes of shared memory for the sizes"):
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(a.copy(), device="cuda"))
    s, args = _vadd()
    path = cuda_build(s, args).export_library(str(tmp_path / "vadd.cubin"))
    grid = json.loads(open(path + ".json").read())["kernels"][0]["grid"]
    assert grid == [["floordiv", ["add", "n", 63], 64], 1, 1]
    f = load_module(path)
    for n in (0, 1, 65, 130):
        a, b = (np.random.default_rng(n + k).uniform(-1, 1, n).astype("float32")
                for k in range(2))
        dc = polytile.nd.array(np.full(n, np.nan, "float32"), device="cuda")
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), dc)
        np.testing.assert_allclose(dc.numpy(), a + 2.0 * b, rtol=1e-6)


@pytest.mark.parametrize("rank", [2, 3])
def test_tvm_gpu_injective_schedule_over_symbolic_shapes(cuda_build, rank):
    # topi's CUDA schedule_injective: fuse every axis, split by the block size, bind; the
    # fused index is not affine, so the nest is lowered as the last axis split and bound
    # with the other axes on blockIdx.y/z (same elements, each computed once)
    shape = tuple(te.var(f"n{k}") for k in range(rank))
    A = te.placeholder(shape, name="A")
    B = te.placeholder(shape, name="B")
    C = te.compute(shape, lambda *i: A[i] * 2.0 - B[i], name="C")
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*C.op.axis)
    bx, tx = s[C].split(fused, factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    text = str(polytile.lower(s, [A, B, C], target="cuda"))
    assert "block=[64, 1, 1]" in text
    f = cuda_build(s, [A, B, C])
    sizes = [(3, 70), (1, 1), (4, 0), (2, 129)] if rank == 2 else [(2, 3, 65), (1, 5, 1)]
    for shp in sizes:
        g = np.random.default_rng(sum(shp))
        a, b = (g.uniform(-1, 1, shp).astype("float32") for _ in range(2))
        c = polytile.nd.array(np.full(shp, np.nan, "float32"), device="cuda")
        f(polytile.nd.array(a, device="cuda"), polytile.nd.array(b, device="cuda"), c)
        np.testing.assert_allclose(c.numpy(), a.astype(np.float64) * 2 - b, rtol=1e-6,
                                   atol=1e-6)
    if shutil.which("nvcc"):   # build compiles the source (nvcc without a GPU)
        assert "__global__" in polytile.build(s, [A, B, C], target="cuda").get_source()


def test_gpu_injective_rewrite_needs_the_whole_pattern():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    C = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*C.op.axis)
    bx, tx = s[C].split(fused, factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"split: iter_var 'i.j.fused' of stage 'C' fuses "
                       r"a loop of symbolic extent n and is split by 32, but 'i.j.fused.outer' "
                       r"is not bound to blockIdx.x"):
        polytile.lower(s, [A, C], target="cuda")
