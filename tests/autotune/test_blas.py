"""numpy's BLAS kernel and the warning when ``OPENBLAS_CORETYPE`` pins an older one
(:mod:`polytile.autotune.blas`)."""

from __future__ import annotations

import pytest

from polytile.autotune.blas import (BlasInfo, anchor_note, cpu_isa, numpy_blas,
                                     pinned_warning)

ZEN5 = ("processor\t: 0\nflags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw "
        "avx512vl avx512_bf16\n")
HASWELL_CPU = "flags\t\t: fpu sse sse2 avx fma avx2\n"


def info(kernel="Haswell", coretype="Haswell", library="openblas"):
    return BlasInfo(library, "0.3.31", kernel, coretype, "threadpoolctl")


@pytest.mark.parametrize("text, want", [
    (ZEN5, "avx512"), (HASWELL_CPU, "avx2"),
    ("flags\t: sse avx avx512f\n", "avx"),      # AVX512F alone: no SkylakeX kernel
    ("flags\t: sse sse2\n", "sse"), ("processor\t: 0\n", None)])
def test_cpu_isa_from_flags(text, want):
    assert cpu_isa(text) == want


def test_pinned_older_kernel_warns_with_the_fix():
    w = pinned_warning(info(), "avx512", "polytile tune matmul")
    assert w is not None and w.endswith("OPENBLAS_L2_SIZE polytile tune matmul")
    assert "Haswell" in w and "OPENBLAS_CORETYPE=Haswell" in w and "avx512" in w
    assert "env -u OPENBLAS_CORETYPE" in w and "SkylakeX" in w


@pytest.mark.parametrize("blas, isa", [
    (info(kernel="SkylakeX", coretype=""), "avx512"),       # nothing pinned
    (info(kernel="Haswell", coretype=""), "avx512"),        # OpenBLAS's own choice
    (info(kernel="SkylakeX", coretype="SkylakeX"), "avx512"),  # pinned, not older
    (info(), "avx2"),                                       # the CPU's best kernel
    (info(), None),                                         # unknown CPU
    (info(library="mkl"), "avx512"),                        # not OpenBLAS
])
def test_no_warning(blas, isa):
    assert pinned_warning(blas, isa) is None


def test_pinned_kernel_unknown_uses_the_variable():
    # without threadpoolctl the kernel is unknown: the variable's value is judged
    w = pinned_warning(info(kernel="", coretype="Sandybridge"), "avx2")
    assert w is not None and "Sandybridge kernel (avx)" in w


def test_numpy_blas_reads_the_environment_given():
    got = numpy_blas({"OPENBLAS_CORETYPE": "Zen"})
    assert got.coretype == "Zen" and got.library
    assert "OPENBLAS_CORETYPE=Zen" in got.describe()
    assert "OPENBLAS_CORETYPE unset" in numpy_blas({}).describe()


def test_anchor_note_fake_kernel(monkeypatch):
    import threadpoolctl

    fake = [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.31",
             "architecture": "Haswell"}]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: fake)
    desc, warn = anchor_note({"OPENBLAS_CORETYPE": "Haswell"}, ZEN5)
    assert desc == "openblas 0.3.31 kernel Haswell, OPENBLAS_CORETYPE=Haswell"
    assert warn is not None and "flatter" in warn
    fake[0]["architecture"] = "SkylakeX"
    assert anchor_note({}, ZEN5)[1] is None


def test_numpy_blas_picks_numpys_openblas_beside_scipys(monkeypatch):
    # scipy (imported by xgboost) loads an OpenBLAS of its own, listed first
    import threadpoolctl

    fake = [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.30",
             "architecture": "Zen", "filepath": "/site/scipy.libs/libscipy_openblas.so"},
            {"user_api": "openmp", "internal_api": "openmp", "filepath": "/x/libgomp.so"},
            {"user_api": "blas", "internal_api": "openblas", "version": "0.3.31",
             "architecture": "SkylakeX",
             "filepath": "/site/numpy.libs/libscipy_openblas64_.so"}]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: fake)
    got = numpy_blas({})
    assert (got.version, got.kernel) == ("0.3.31", "SkylakeX")
