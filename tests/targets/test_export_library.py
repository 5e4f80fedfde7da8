"""``export_library`` and ``polytile.runtime.load_module``: a CPU shared library with a C ABI
that runs without polytile (called from a C program through ``dlopen``, and from a Python
without site-packages through ctypes), loaded back as a checked module; a CUDA cubin with
its launch plan, loaded back and launched (emulated driver; a GPU where there is one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import poison, rand

import polytile
from polytile import te
from polytile.errors import BuildError
from polytile.runtime import load_module
from polytile.targets.cuda import compile as cc

M, K = 13, 7


def _rowsum_with_scale():
    """``C[i] = alpha * sum_k A[i, k] * B[k]``, with a scalar parameter between arrays."""
    A = te.placeholder((M, K), name="A")
    alpha = te.var("alpha", "float32")
    B = te.placeholder((K,), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M,), lambda i: te.sum(alpha * A[i, k] * B[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    return s, [A, alpha, B, C]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    s, args = _rowsum_with_scale()
    f = polytile.build(s, args, "llvm", name="rowsum")
    path = str(tmp_path_factory.mktemp("lib") / "rowsum.so")
    assert f.export_library(path) == path
    return f, path


def _inputs():
    return rand((M, K), seed=1), np.float32(1.5), rand((K,), seed=2)


def _ref(a, alpha, b):
    return alpha * (a.astype("float64") @ b.astype("float64"))


def test_load_module_runs_and_checks(library):
    f, path = library
    m = load_module(path)
    assert m.entry_name == "rowsum" and m["rowsum"] is m
    assert m.metadata["c_signature"] == ("int32_t rowsum(const float* A, float alpha, "
                                         "const float* B, float* C)")
    a, alpha, b = _inputs()
    c = poison((M,), "float32")
    m(a, alpha, b, c)
    np.testing.assert_allclose(c, _ref(a, alpha, b), rtol=2e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"rowsum: argument 'C' has shape \(12,\); "
                                         r"expected shape \(13,\)"):
        m(a, alpha, b, np.zeros(M - 1, "float32"))
    with pytest.raises(TypeError, match="argument 'A' has dtype float64"):
        m(a.astype("float64"), alpha, b, c)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        m(a, b, c)
    r = m.time_evaluator(m.entry_name, polytile.cpu(), number=2, repeat=2)(a, alpha, b, c)
    assert len(r.results) == 2
    with pytest.raises(ValueError, match="has no source"):
        m.get_source()


_C_DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
typedef int32_t (*fn_t)(const float*, float, const float*, float*);
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  fn_t f = (fn_t)dlsym(h, "rowsum");
  const char* meta = (const char*)dlsym(h, "polytile_metadata");
  if (!f || !meta) return 3;
  float a[%(M)d * %(K)d], b[%(K)d], c[%(M)d];
  for (int i = 0; i < %(M)d * %(K)d; ++i) a[i] = (float)((i * 7) %% 11) - 5.0f;
  for (int k = 0; k < %(K)d; ++k) b[k] = 0.25f * (float)(k + 1);
  for (int i = 0; i < %(M)d; ++i) c[i] = NAN;
  int32_t status = f(a, 1.5f, b, c);
  printf("status %%d\n", status);
  for (int i = 0; i < %(M)d; ++i) printf("%%.9g\n", c[i]);
  return meta[0] == '{' ? 0 : 4;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_program_calls_the_library(library, tmp_path):
    _, path = library
    src = tmp_path / "driver.c"
    src.write_text(_C_DRIVER % {"M": M, "K": K})
    exe = tmp_path / "driver"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), "-ldl"], check=True)
    res = subprocess.run([str(exe), path], capture_output=True, text=True, check=False,
                         env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "2"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split()
    assert lines[:2] == ["status", "0"]
    a = (((np.arange(M * K) * 7) % 11) - 5.0).reshape(M, K)
    b = 0.25 * np.arange(1, K + 1)
    np.testing.assert_allclose(np.array(lines[2:], float), _ref(a, 1.5, b), rtol=1e-6)


_CTYPES_DRIVER = """
import ctypes, json, sys
assert "numpy" not in sys.modules
try:
    import polytile
    sys.exit("polytile is importable")
except ImportError:
    pass
lib = ctypes.CDLL(sys.argv[1])
meta = json.loads(ctypes.string_at(ctypes.addressof(
    ctypes.c_char.in_dll(lib, "polytile_metadata"))).decode())
f = getattr(lib, meta["entry"])
f.restype = ctypes.c_int32
f.argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
M, K = meta["params"][0]["shape"]
a = (ctypes.c_float * (M * K))(*[float(i % 5) for i in range(M * K)])
b = (ctypes.c_float * K)(*[1.0] * K)
c = (ctypes.c_float * M)()
print(f(a, 2.0, b, c), *list(c))
"""


def test_python_without_polytile_calls_the_library(library):
    _, path = library
    # -S: no site-packages (so neither polytile nor numpy), -E: no PYTHON* variables
    res = subprocess.run([sys.executable, "-S", "-E", "-c", _CTYPES_DRIVER, path],
                         capture_output=True, text=True, check=False, cwd="/")
    assert res.returncode == 0, res.stderr
    status, *c = res.stdout.split()
    assert status == "0"
    a = (np.arange(M * K) % 5).reshape(M, K).astype(float)
    np.testing.assert_allclose(np.array(c, float), 2.0 * a.sum(1), rtol=1e-6)


def test_metadata_and_object_export(library, tmp_path):
    f, _ = library
    o = tmp_path / "rowsum.o"
    f.export_library(str(o))
    nm = shutil.which("nm")
    if nm is not None:
        syms = subprocess.run([nm, str(o)], capture_output=True, text=True).stdout
        assert " T rowsum" in syms and "polytile_metadata" in syms
    meta = load_module(f.export_library(str(tmp_path / "again.so"))).metadata
    assert meta["format"] == "polytile-function" and meta["target"] == str(f.target)
    assert [p["name"] for p in meta["params"]] == ["A", "alpha", "B", "C"]
    assert meta["params"][0] == {"name": "A", "kind": "array", "dtype": "float32",
                                 "shape": [M, K], "written": False}
    assert meta["params"][1] == {"name": "alpha", "kind": "scalar", "dtype": "float32"}
    assert meta["params"][3]["written"] is True
    assert meta["status"] == {"ok": 0, "no_memory": 1, "assert_base": 16}


def test_runtime_check_status_from_a_loaded_library(tmp_path):
    # a data-dependent gather: its bounds check fails at run time with a status
    A = te.placeholder((5,), name="A")
    I = te.placeholder((3,), name="I", dtype="int32")
    G = te.compute((3,), lambda i: A[I[i]], name="G")
    f = polytile.build(te.create_schedule(G.op), [A, I, G], "llvm", name="gather")
    m = load_module(f.export_library(str(tmp_path / "gather.so")))
    a = rand((5,), seed=3)
    g = poison((3,), "float32")
    m(a, np.array([4, 0, 2], "int32"), g)
    np.testing.assert_array_equal(g, a[[4, 0, 2]])
    assert m.metadata["asserts"][0]["error"] == "IndexError"
    with pytest.raises(IndexError, match=r"gather: stage 'G' reads A\[I\[i\]\] outside its "
                                         r"shape \(5,\)"):
        m(a, np.array([4, 9, 2], "int32"), g)


def test_load_module_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file"):
        load_module(str(tmp_path / "missing.so"))
    (tmp_path / "f.dll").write_bytes(b"")
    with pytest.raises(ValueError, match=r"cannot load 'f.dll'; expected a '.so' \(llvm\)"):
        load_module(str(tmp_path / "f.dll"))
    (tmp_path / "garbage.so").write_bytes(b"not an ELF file")
    with pytest.raises(ValueError, match="'.*garbage.so' cannot be loaded as a shared library"):
        load_module(str(tmp_path / "garbage.so"))
    if shutil.which("gcc") is None:
        return
    c = tmp_path / "plain.c"
    c.write_text("int plain(void) { return 1; }\n")
    so = tmp_path / "plain.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True)
    with pytest.raises(ValueError, match="has no 'polytile_metadata' symbol"):
        load_module(str(so))


# ------------------------------------------------------------------ CUDA
def _gpu_rowsum():
    _, args = _rowsum_with_scale()
    A, alpha, B, C = args
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=8)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, args


def test_cuda_export_and_load_module(cuda_build, tmp_path):
    s, args = _gpu_rowsum()
    f = cuda_build(s, args, name="rowsum_gpu")
    path = f.export_library(str(tmp_path / "rowsum.cubin"))
    assert open(path, "rb").read() == f.get_source("cubin")
    m = load_module(path)
    assert m.entry_name == "rowsum_gpu" and m.arch == f.arch
    a, alpha, b = _inputs()
    da, db = (polytile.nd.array(x, device="cuda") for x in (a, b))
    dc = polytile.nd.array(poison((M,), "float32"), device="cuda")
    m(da, alpha, db, dc)
    np.testing.assert_allclose(dc.numpy(), _ref(a, alpha, b), rtol=2e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"rowsum_gpu: argument 'C' has shape \(12,\)"):
        m(da, alpha, db, polytile.nd.empty((M - 1,), "float32", device="cuda"))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        m(a, alpha, db, dc)
    r = m.time_evaluator(m.entry_name, polytile.cuda(0), number=2, repeat=2)(da, alpha, db, dc)
    assert len(r.results) == 2


def test_cuda_export_metadata_without_a_gpu(tmp_path):
    # building needs no GPU: the cubin (nvcc) and its launch plan are written here
    if cc.available_compiler() is None:
        pytest.skip("no CUDA compiler")
    A = te.placeholder((M, K), name="A")
    B = te.compute((M, K), lambda i, j: A[i, j] * 2.0, name="B")
    Cc = te.compute((M, K), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(Cc.op)
    for T in (B, Cc):
        s[T].bind(T.op.axis[0], te.thread_axis("blockIdx.x"))
        s[T].bind(T.op.axis[1], te.thread_axis("threadIdx.x"))
    f = polytile.build(s, [A, Cc], "cuda -arch=sm_90", name="two", cache_dir=tmp_path)
    path = f.export_library(str(tmp_path / "two.cubin"))
    meta = json.loads(open(path + ".json").read())
    assert meta["entry"] == "two" and meta["arch"] == "sm_90"
    assert [k["grid"] for k in meta["kernels"]] == [[M, 1, 1], [M, 1, 1]]
    assert [k["block"] for k in meta["kernels"]] == [[K, 1, 1], [K, 1, 1]]
    assert meta["workspace"] == [{"name": "B", "dtype": "float32", "shape": [M, K]}]
    assert sorted(meta["kernels"][0]["params"]) == [["param", 0], ["workspace", 0]]
    assert sorted(meta["kernels"][1]["params"]) == [["param", 1], ["workspace", 0]]
    assert meta["kernels"][0]["stored"] == [["workspace", 0]]
    assert meta["kernels"][1]["stored"] == [["param", 1]]
    assert open(path, "rb").read()[:4] == b"\x7fELF"


def test_cubin_without_its_plan(tmp_path):
    p = tmp_path / "x.cubin"
    p.write_bytes(b"\x7fELF")
    with pytest.raises(FileNotFoundError, match="no launch plan"):
        load_module(str(p))


def test_export_refuses_unknown_suffix(library, tmp_path):
    f, _ = library
    with pytest.raises(ValueError, match="cannot write 'x.dylib'"):
        f.export_library(str(tmp_path / "x.dylib"))


def test_export_link_failure_is_a_build_error(library, tmp_path):
    f, _ = library
    with pytest.raises(BuildError, match="linking"):
        f.export_library(str(tmp_path / "no" / "such" / "dir" / "f.so"))


def test_save_is_tvms_name_of_export(library, tmp_path):
    # TVM's Module.save(file_name, fmt) was an AttributeError
    f, _ = library
    assert f.save(str(tmp_path / "rowsum.ll")).endswith("rowsum.ll")
    assert "define" in (tmp_path / "rowsum.ll").read_text()
    f.save(str(tmp_path / "rowsum.o"), fmt="o")
    assert (tmp_path / "rowsum.o").stat().st_size > 0
    with pytest.raises(ValueError, match="save: fmt='ll' for 'x.o'; expected the format"):
        f.save(str(tmp_path / "x.o"), fmt="ll")
