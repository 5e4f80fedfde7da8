"""The fused GPU row templates (``softmax``, ``layernorm``, ``rmsnorm`` for ``cuda``: one
kernel, attached cross-thread reductions, 16-byte vectors, rows optionally staged in
shared memory; ``autotune/templates_gpu.py``).

Sampled ``layout`` configs at odd sizes (prime rows and columns, columns that no vector or
thread count divides, one row) in float32 and float16: the reference interpreter (races
and divergent barriers checked) and the emulated CUDA driver against numpy in float64;
nvcc compiles sampled configs at 4096 x 4096; on a GPU (``gpu`` marker) sampled layouts of
1024 x 4096 and 33 x 4093 run against numpy.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import check, compile_with_nvcc, nvcc_text, poison

import polytile
from polytile.autotune import gpu_limits
from polytile.autotune.data import make_inputs, output_positions
from polytile.autotune.template import get_template
from polytile.autotune.templates_gpu import row_layouts
from polytile.schedule.interpreter import run as interpret
from polytile.schedule.loop_ir import IfThenElse, StmtVisitor, Sync
from polytile.te.expr import Var
from polytile.te.visitor import collect

NAMES = ("softmax", "layernorm", "rmsnorm")
SIZES = [(7, 45), (1, 1), (2, 97), (3, 256)]


def _picks(sp, n: int, seed: int) -> list:
    return [sp.default_index()] + random.Random(seed).sample(range(len(sp)),
                                                             min(n, len(sp) - 1))


def _inputs(tensors, args):
    arrays = make_inputs(tensors, 1, args)
    outs = output_positions(tensors)
    arrays[outs[0]][...] = poison(arrays[outs[0]].shape, arrays[outs[0]].dtype.name)
    return arrays, outs[0]


def _reference(t, arrays, out, args):
    return t.reference(*[a.astype("float64") for k, a in enumerate(arrays) if k != out],
                       args=args)


class _DivergentSyncs(StmtVisitor):
    def __init__(self):
        self.depth = self.found = 0

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        thread = any(v.name.startswith("threadIdx") for v in collect(s.cond, Var))
        self.depth += thread
        self.generic_visit(s)
        self.depth -= thread

    def visit_Sync(self, s: Sync) -> None:
        self.found += self.depth > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("args", SIZES)
def test_sampled_layouts_compute_the_definition(name, dtype, args):
    t = get_template(name)
    sp = t.space(args, dtype, "cuda")
    # blocks of at most 128 threads: the interpreter runs each thread as a generator
    layouts = [sp.get(k).knob_values()["layout"] for k in range(len(sp))]
    small = [k for k, lay in enumerate(layouts) if lay[0] * lay[2] <= 128]
    for i in [sp.default_index()] + random.Random(args[1]).sample(small, 1):
        s, tensors = t.instantiate(sp.get(i), args, dtype, "cuda")
        f = polytile.lower(s, tensors, target="cuda")
        v = _DivergentSyncs()
        v.visit(f.body)
        assert v.found == 0, sp.get(i).knob_values()
        assert len(re.findall(r"launch ", str(f))) == 1   # one kernel
        arrays, out = _inputs(tensors, args)
        interpret(f, *arrays)
        check(arrays[out], _reference(t, arrays, out, args), k=args[1])


def test_local_statistics_are_combined_by_every_thread():
    """``local`` statistics: no thread-0 guard on the combine, one barrier fewer per
    reduction, the same numbers (interpreter, races and barriers checked)."""
    t = get_template("layernorm")
    args = (3, 40)
    sp = t.space(args, "float16", "cuda")
    syncs = {}
    for local in (0, 1):
        idx = next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == [
            32, 8, 1, 1, local])
        s, tensors = t.instantiate(sp.get(idx), args, "float16", "cuda")
        f = polytile.lower(s, tensors, target="cuda")
        syncs[local] = str(f).count("sync(")
        arrays, out = _inputs(tensors, args)
        interpret(f, *arrays)
        check(arrays[out], _reference(t, arrays, out, args), k=args[1])
    assert syncs[1] < syncs[0]


def test_layouts_respect_the_device_limits():
    small = gpu_limits.GPULimits("sm_90", max_threads_per_block=256,
                                 shared_bytes_per_block=16384)
    lays = row_layouts(small, 4096, 4096, "float32")
    assert lays and all(th * rows <= 256 for th, _, rows, _, _ in lays)
    assert all(8 * th * rows + (sh == 1) * rows * 4096 * 4 <= 16384
               for th, _, rows, sh, _ in lays)
    assert not any(sh == 1 and rows > 1 for _, _, rows, sh, _ in lays)   # one 16 KiB row at most
    # rows in registers: at most 256 bytes of its row a thread (64 floats)
    regs = [lay for lay in lays if lay[3] == 2]
    assert regs and all(4096 // (th * vec) * vec * 4 <= 256 for th, vec, _, _, _ in regs)
    assert {lay[0] for lay in regs} == {64, 128, 256}
    assert not any(loc and rows > 1 for _, _, rows, _, loc in lays)
    # vectors divide the row and are 16 or 8 bytes, single elements only where none
    # divides it; short rows keep few threads
    assert {lay[1] for lay in row_layouts(small, 8, 4096, "float16")} == {8, 4}
    assert {lay[1] for lay in row_layouts(small, 8, 4092, "float16")} == {4}
    assert {lay[1] for lay in row_layouts(small, 8, 4094, "float16")} == {1}
    assert {lay[1] for lay in row_layouts(small, 8, 4094, "float32")} == {2}
    assert {lay[0] for lay in row_layouts(small, 8, 20, "float32")} == {32}
    assert {lay[2] for lay in row_layouts(small, 3, 20, "float32")} == {1, 2}


def test_vector_copies_and_staging_in_the_cuda_source():
    t = get_template("softmax")
    for dtype, vt in (("float32", "float4"), ("float16", "uint4")):
        sp = t.space((4096, 4096), dtype, "cuda -arch=sm_90")
        for lay in ([256, 16 // np.dtype(dtype).itemsize, 1, 1, 0],
                    [128, 16 // np.dtype(dtype).itemsize, 1, 0, 1],
                    [128, 16 // np.dtype(dtype).itemsize, 2, 1, 0]):
            idx = next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == lay)
            s, tensors = t.instantiate(sp.get(idx), (4096, 4096), dtype, "cuda -arch=sm_90")
            src = polytile.build(s, tensors, target="cuda -arch=sm_90").get_source()
            assert src.count("__global__") == 1
            assert f"*({vt}*)(&softmax[" in src              # 16-byte stores
            assert ("cp_async" in src) == bool(lay[3])       # staged rows: cp.async copies
            assert f"__launch_bounds__({lay[0] * lay[2]})" in src
            # local statistics: every thread combines (no write of the result to shared)
            assert ("__shared__ __align__(16) float rowsum[" in src) == (not lay[4])


def _source(name: str, dtype: str, lay: list, args=(4096, 4096)) -> str:
    t = get_template(name)
    sp = t.space(args, dtype, "cuda -arch=sm_90")
    idx = next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == lay)
    s, tensors = t.instantiate(sp.get(idx), args, dtype, "cuda -arch=sm_90")
    return polytile.build(s, tensors, target="cuda -arch=sm_90").get_source()


@pytest.mark.parametrize("lay", [[32, 8, 2, 0, 0], [32, 4, 4, 1, 0], [32, 8, 4, 1, 0]])
def test_rows_on_threadidx_y_keep_per_thread_copies(lay):
    """Several rows per block: the local copies a reduction reads hold this thread's
    ``vec`` elements (the partial loop was innermost, so a copy attached at a reduction
    loop spanned every thread's: ``half A_local_1[2048]`` at 256 threads of 8), and the
    kernel still computes softmax (interpreter, 5 x 136: a ragged last block of rows)."""
    src = _source("softmax", "float16", lay)
    sizes = re.findall(r"half A(?:_shared)?_local(?:_\d)?\[(\d+)\];", src)
    assert len(sizes) == 3 and set(sizes) == {str(lay[1])}, sizes
    t, args = get_template("softmax"), (5, 136)
    sp = t.space(args, "float16", "cuda")
    idx = next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == lay)
    s, tensors = t.instantiate(sp.get(idx), args, "float16", "cuda")
    arrays, out = _inputs(tensors, args)
    interpret(polytile.lower(s, tensors, target="cuda"), *arrays)
    check(arrays[out], _reference(t, arrays, out, args), k=args[1])


@pytest.mark.parametrize("lay", [[256, 8, 1, 0, 1], [128, 8, 1, 0, 0], [64, 4, 2, 0, 0]])
def test_float16_softmax_is_lean_in_ptx(lay):
    """float16 softmax 4096 x 4096 (issue-bound before: ~50 SASS instructions an element,
    0.5x the copy bound on the H200): every exp is one ``ex2.approx.ftz`` (no denormal
    fix-up), no IEEE division per element (a reciprocal per row), the row read by vector
    loads only (``ld.global.nc.v4``/``v2``), written by vector stores only."""
    ptx = nvcc_text(_source("softmax", "float16", lay), "ptx")
    if ptx is None:
        pytest.skip("nvcc not found")
    # two passes use exp, 2 x 16 where the loops over a thread's 16 elements are unrolled
    assert ptx.count("ex2.approx.ftz.f32") == 32 or lay[0] != 256
    assert "ex2.approx.ftz.f32" in ptx and "ex2.approx.f32" not in ptx and "div.rn.f32" not in ptx
    assert "max.NaN.f32" in ptx and "setp.nan" not in ptx   # the row maximum, NaN kept
    def widths(op):   # bytes per global access: v<n>.<type><bits>, or a scalar's bits
        found = re.findall(op + r"\.global(?:\.nc)?(?:\.v(\d))?\.[a-z]+(\d+)", ptx)
        return {int(n or 1) * int(bits) // 8 for n, bits in found}

    assert widths("ld") == widths("st") == {2 * lay[1]}


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_float16_rows_load_128_bits_in_sass(name):
    """The SASS of the float16 row kernels (``cuobjdump -sass``; skipped without it):
    128-bit global loads and stores only (no 16-bit ``LDG.E.U16``), at most one call (the
    slow path of the IEEE division of the row's reciprocal; it was one per element), no
    ``-126`` compare (the denormal fix-up of a non-ftz ``exp``), two barriers;
    softmax: 32 ``MUFU.EX2`` for the 16 elements a thread owns at 256 threads a row."""
    sass = nvcc_text(_source(name, "float16", [256, 8, 1, 0, 1]), "sass")
    if sass is None:
        pytest.skip("nvcc or cuobjdump not found")
    ldg = re.findall(r"\bLDG\.E(\.\w+)?", sass)
    stg = re.findall(r"\bSTG\.E(\.\w+)?", sass)
    assert ldg and set(ldg) == {".128"}, ldg
    assert stg and set(stg) == {".128"}, stg
    assert sass.count("CALL.REL") <= 1 and "-126" not in sass
    # one barrier a reduction (the warps' partials; every thread combines them itself):
    # the others of the conservative placement order nothing (passes/elide_barriers.py)
    assert sass.count("BAR.SYNC") == 2
    if name == "softmax":
        assert sass.count("MUFU.EX2") == 32
        # the row maximum: one NaN-propagating FMNMX an element, no compare-and-select
        assert "FMNMX.NAN" in sass and "FSETP.NAN" not in sass


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_sampled_configs_compile_with_nvcc(name, dtype):
    t = get_template(name)
    sp = t.space((4096, 4096), dtype, "cuda -arch=sm_90")
    for i in _picks(sp, 2, 7):
        s, tensors = t.instantiate(sp.get(i), (4096, 4096), dtype, "cuda -arch=sm_90")
        compile_with_nvcc(polytile.build(s, tensors, target="cuda -arch=sm_90").get_source())


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def device(request, tmp_path, monkeypatch):
    """``"gpu"`` (a real device) or ``"emulated"`` (the host emulation of the driver)."""
    if request.param == "gpu":
        from polytile.targets.cuda import compile as cc

        if cc.available_compiler() is None:
            pytest.skip("no CUDA compiler")
        yield "gpu"
        return
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "targets"))
    import cuda_emulator

    if not cuda_emulator.available():
        pytest.skip("no g++ for the emulated driver")
    with cuda_emulator.installed(tmp_path, monkeypatch):
        yield "emulated"


def _run_built(t, sp, i, args, dtype):
    s, tensors = t.instantiate(sp.get(i), args, dtype, "cuda")
    f = polytile.build(s, tensors, target="cuda")
    arrays, out = _inputs(tensors, args)
    dev = [polytile.nd.array(a, device="cuda") for a in arrays]
    f(*dev)
    check(dev[out].numpy(), _reference(t, arrays, out, args), k=args[1])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_built_kernels_run(device, name, dtype):
    """Emulated: the default and one sampled config at an odd size; on a GPU: the default
    and five sampled layouts of 1024 x 4096 and of 33 x 4093 (no vectors, ragged
    threads)."""
    t = get_template(name)
    if device == "emulated":
        args = (3, 72)
        sp = t.space(args, dtype, "cuda")
        for i in _picks(sp, 1, 3):
            _run_built(t, sp, i, args, dtype)
        return
    for args in ((1024, 4096), (33, 4093)):
        sp = t.space(args, dtype, "cuda")
        for i in _picks(sp, 5, 11):
            _run_built(t, sp, i, args, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nan_rows_stay_nan(device, dtype):
    """A NaN in a row makes that row's softmax NaN, as numpy's maximum propagates it (on
    sm_80+ the row maximum is PTX ``max.NaN``); the other rows match numpy. 33 x 4093 and
    64 x 4096 (vectors), default and sampled layouts; emulated: 3 x 72."""
    t = get_template("softmax")
    for args in (((3, 72),) if device == "emulated" else ((33, 4093), (64, 4096))):
        sp = t.space(args, dtype, "cuda")
        for i in _picks(sp, 1 if device == "emulated" else 3, 5):
            s, tensors = t.instantiate(sp.get(i), args, dtype, "cuda")
            f = polytile.build(s, tensors, target="cuda")
            arrays, out = _inputs(tensors, args)
            arrays[0][1, args[1] - 2] = np.nan
            dev = [polytile.nd.array(a, device="cuda") for a in arrays]
            f(*dev)
            got, ref = dev[out].numpy(), _reference(t, arrays, out, args)
            assert np.isnan(got[1]).all(), sp.get(i).knob_values()
            rest = [r for r in range(args[0]) if r != 1]
            check(got[rest], ref[rest], k=args[1])


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_defaults_are_the_measured_best(device, name, dtype):
    """Rows of at least 1024 elements default to the layout measured fastest on the H200
    (``FLOAT16_DEFAULTS`` / ``FLOAT32_DEFAULTS``: rows in registers), and that default
    computes the definition (8 x 2048 emulated, float16 only; 1024 x 4096 and 5 x 2056 on
    a GPU: a ragged block of rows, a ragged last step of the row's registers)."""
    from polytile.autotune.templates_gpu import FLOAT16_DEFAULTS, FLOAT32_DEFAULTS

    want = {"float16": FLOAT16_DEFAULTS, "float32": FLOAT32_DEFAULTS}[dtype][name]
    t = get_template(name)
    big = t.space((4096, 4096), dtype, "cuda")
    assert big.default().knob_values()["layout"] == want
    small = t.space((7, 45), dtype, "cuda")   # short rows: the generic default
    assert small.default().knob_values()["layout"] != want
    if device == "emulated" and dtype == "float32":
        return   # CI time: the float16 case runs the same schedule
    for args in (((8, 2048),) if device == "emulated" else ((1024, 4096), (5, 2056))):
        sp = t.space(args, dtype, "cuda")
        assert sp.default().knob_values()["layout"] == want
        _run_built(t, sp, sp.default_index(), args, dtype)


#: rows kept in registers (``layout`` ``shared`` = 2): name, dtype, (M, N), layout; rows
#: that the block does not divide, rows the threads' steps do not divide (1000, 96)
REGISTER_CASES = [
    pytest.param("softmax", "float32", (7, 1000), [32, 4, 2, 2, 0], marks=pytest.mark.slow),
    ("layernorm", "float16", (5, 96), [32, 8, 4, 2, 0]),
    ("rmsnorm", "float16", (2, 1000), [64, 8, 1, 2, 1]),
    ("softmax", "float32", (3, 100), [32, 2, 1, 2, 1]),
    pytest.param("layernorm", "float32", (3, 100), [32, 2, 1, 2, 1], marks=pytest.mark.slow),
]


def _layout_index(sp, lay):
    return next(k for k in range(len(sp)) if sp.get(k).knob_values()["layout"] == lay)


@pytest.mark.parametrize("name,dtype,args,lay", REGISTER_CASES)
def test_rows_in_registers_compute_the_definition(name, dtype, args, lay):
    """Each thread's part of its row read once into a ``local`` array of its own elements
    only (a thread-owned dimension), the passes reading it there: exact on the
    interpreter (races and barriers checked), no other read of the row."""
    t = get_template(name)
    sp = t.space(args, dtype, "cuda")
    s, tensors = t.instantiate(sp.get(_layout_index(sp, lay)), args, dtype, "cuda")
    f = polytile.lower(s, tensors, target="cuda")
    text = str(f)
    steps = -(-args[1] // (lay[0] * lay[1]))
    assert f"A_regs = alloc({dtype}[1, {steps}, 1, {lay[1]}], scope='local')" in text, text
    assert text.count("A[") == steps   # read once: a vector per (unrolled) step
    arrays, out = _inputs(tensors, args)
    interpret(f, *arrays)
    check(arrays[out], _reference(t, arrays, out, args), k=args[1])


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_rows_in_registers_at_4096(name):
    t, args, lay = get_template(name), (3, 4096), [64, 4, 1, 2, 1]
    sp = t.space(args, "float32", "cuda")
    s, tensors = t.instantiate(sp.get(_layout_index(sp, lay)), args, "float32", "cuda")
    arrays, out = _inputs(tensors, args)
    interpret(polytile.lower(s, tensors, target="cuda"), *arrays)
    check(arrays[out], _reference(t, arrays, out, args), k=args[1])


@pytest.mark.parametrize("name", ["layernorm",
                                  pytest.param("softmax", marks=pytest.mark.slow)])
def test_rows_in_registers_in_the_cuda_source(name):
    """float16 4096 x 4096, 128 threads of 8: a thread's 32 halves in one array read by four
    16-byte loads, the row never read again from global memory; nvcc keeps the array in
    registers (no local memory: 0 bytes of stack frame, no spills)."""
    src = _source(name, "float16", [128, 8, 1, 2, 1])
    assert "half A_regs[32];" in src
    assert src.count("*(const uint4*)(&A[") == 4 and src.count("&A[") == 4
    assert "A_local" not in src and "A_shared" not in src
    from polytile.targets.cuda import compile as cc

    if cc.nvcc_path() is None:
        pytest.skip("nvcc not found")
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cu"
        path.write_text(src)
        res = subprocess.run([cc.nvcc_path(), "-arch=sm_90", "-cubin", "-std=c++17",
                              "-Xptxas", "-v", "-o", str(path.with_suffix(".cubin")),
                              str(path)], check=True, capture_output=True, text=True)
    info = res.stdout + res.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in info, info


@pytest.mark.parametrize("name", NAMES)
def test_rows_in_registers_run(device, name):
    """The register layouts built and run (emulated: 3 x 1000 float16, a ragged step, for
    layernorm; the others with ``-m slow``; on a GPU: 1024 x 4096 and 33 x 4000 in both
    dtypes, two sampled register layouts each)."""
    if device == "emulated" and name != "layernorm":
        pytest.skip("emulated: layernorm only in the default run (CI time); "
                    "test_rows_in_registers_run_emulated runs the others with -m slow")
    _registers_run(device, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_rows_in_registers_run_emulated(tmp_path, monkeypatch, name):
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "targets"))
    import cuda_emulator

    if not cuda_emulator.available():
        pytest.skip("no g++ for the emulated driver")
    with cuda_emulator.installed(tmp_path, monkeypatch):
        _registers_run("emulated", name)


def _registers_run(device, name):
    t = get_template(name)
    cases = [((3, 1000), "float16")] if device == "emulated" else [
        (args, dt) for args in ((1024, 4096), (33, 4000)) for dt in ("float32", "float16")]
    for args, dtype in cases:
        sp = t.space(args, dtype, "cuda")
        regs = [k for k in range(len(sp)) if sp.get(k).knob_values()["layout"][3] == 2]
        assert regs
        for i in random.Random(5).sample(regs, min(len(regs), 1 if device == "emulated" else 2)):
            _run_built(t, sp, i, args, dtype)
