"""Mistakes in ``polytile.build``: target strings, options, schedules that do not fit the
target. Each raises before any code generation that could crash the process."""

from __future__ import annotations

import pytest
from polytile.targets.cuda import compile as cuda_compile

import polytile
from polytile import te
from polytile.errors import ScheduleError, TargetError

N = 8


def matmul(bind: bool = False):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    if bind:
        s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
        s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def build(target, bind: bool = False, **options):
    s, args = matmul(bind)
    return polytile.build(s, args, target=target, **options)


def too_many_threads():
    A = te.placeholder((4096,), name="A")
    C = te.compute((4096,), lambda i: A[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    polytile.build(s, [A, C], target="cuda")


CASES = [
    pytest.param(lambda: build("llvmx"), TargetError,
                 r"target: unknown target kind 'llvmx' in 'llvmx'; expected one of 'llvm', "
                 r"'cuda'", id="unknown-target"),
    pytest.param(lambda: build("opencl"), TargetError,
                 r"target: unknown target kind 'opencl'.*; expected one of", id="tvm-only-target"),
    pytest.param(lambda: build(None), TargetError,
                 r"target: got NoneType None; expected a target string such as 'llvm'",
                 id="target-none"),
    pytest.param(lambda: build("llvm -mcpu=foo"), TargetError,
                 r"(?s)target: LLVM does not know the CPU 'foo' in 'llvm -mcpu=foo'; expected an "
                 r"LLVM CPU name.*hint:", id="unknown-mcpu"),
    pytest.param(lambda: build("llvm -foo=bar"), TargetError,
                 r"target: unknown option '-foo=bar' in 'llvm -foo=bar'; expected one of -mcpu",
                 id="unknown-llvm-option"),
    pytest.param(lambda: build("llvm -opt-level=7"), TargetError,
                 r"target: bad optimisation level '7' in 'llvm -opt-level=7'; expected 0, 1, 2 "
                 r"or 3", id="opt-level-7"),
    pytest.param(lambda: build("cuda -arch=sm_xx", bind=True), TargetError,
                 r"target: bad GPU architecture 'sm_xx' in 'cuda -arch=sm_xx'; expected "
                 r"sm_<NN>", id="cuda-arch-sm_xx"),
    pytest.param(lambda: build("llvm", compiler="nvcc"), TargetError,
                 r"build: options \['compiler'\] are not understood by target 'llvm'; expected "
                 r"no extra options", id="cuda-option-on-llvm"),
    pytest.param(lambda: build("cuda", bind=True, target_host="cuda"), TargetError,
                 r"build: target_host='cuda'; expected an 'llvm' target or None",
                 id="target-host-cuda"),
    pytest.param(lambda: build("llvm", binds={"A": None}), TargetError,
                 r"build: binds of 1 tensors are given; expected no binds", id="binds"),
    pytest.param(lambda: build("cuda", bind=True, compiler="clang"), TargetError,
                 r"compile_cuda: unknown compiler 'clang'; expected one of auto, nvrtc, nvcc",
                 id="unknown-cuda-compiler"),
    pytest.param(lambda: build("llvm", bind=True), ScheduleError,
                 r"build: target 'llvm' runs on the CPU, but the schedule binds loops to GPU "
                 r"indices; build for target 'cuda'", id="thread-bindings-on-llvm"),
    pytest.param(lambda: build("cuda"), ScheduleError,
                 r"build: target 'cuda' needs GPU kernels, but no loop of the schedule is bound "
                 r"to a GPU index; bind loops", id="cuda-without-bindings"),
    pytest.param(too_many_threads, ScheduleError,
                 r"bind: threadIdx\.x of the kernel of stage 'C' has extent 4096; at most 1024",
                 id="cuda-too-many-threads"),
]


@pytest.mark.parametrize("mistake, exc, match", CASES)
def test_build_mistake_is_refused(mistake, exc, match):
    with pytest.raises(exc, match=match):
        mistake()


def test_cuda_arch_the_compiler_does_not_know():
    """A well-formed but unknown architecture is the target's fault, not polytile's: it was a
    BuildError whose hint called it a polytile bug."""
    if cuda_compile.available_compiler() is None:
        pytest.skip("no CUDA compiler (nvcc or NVRTC)")
    with pytest.raises(TargetError,
                       match=r"compile_cuda: .*(does not support|cannot compile for) sm_999; "
                             r"expected") as info:
        build("cuda -arch=sm_999", bind=True, cache_dir=None)
    assert "polytile bug" not in str(info.value)


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_tvm_target_host_and_empty_binds_are_accepted(target):
    # TVM's build(s, args, target="cuda", target_host="llvm") was a TargetError
    f = build(target, bind=target == "cuda", target_host="llvm", binds={})
    assert f.target.kind == target


def test_tvm_positional_order_target_host_then_name():
    """TVM's build(inputs, args, target, target_host, name): the fourth positional
    argument was polytile's name, so TVM's ``build(s, args, "llvm", "llvm", "myadd")``
    raised a TypeError."""
    s, args = matmul()
    f = polytile.build(s, args, "llvm", "llvm", "myadd")
    assert f.entry_name == "myadd"
    with pytest.raises(TargetError, match=r"(?s)build: target_host='myadd' is not a target; "
                       r"expected an 'llvm' target.*hint: the 4th positional argument"):
        polytile.build(s, args, "llvm", "myadd")


def test_unknown_source_format():
    f = build("llvm")
    with pytest.raises(ValueError, match=r"get_source: unknown format 'ptx'; expected 'll'"):
        f.get_source("ptx")


@pytest.mark.parametrize("with_source", [True, False], ids=["import_c-lacks-it", "no-source"])
def test_call_extern_of_an_undefined_function_is_refused(with_source):
    """A tensor intrinsic calling a function that no import_c source defines was linked to
    address 0 by the JIT: the build passed and the first call crashed the process
    (segmentation fault)."""
    from polytile import tir
    from polytile.errors import BuildError

    n = 4
    a = te.placeholder((n,), name="a")
    c = te.compute((n,), lambda i: a[i] * 2, name="c")
    intrin = te.decl_tensor_intrin(c.op, lambda ins, outs: tir.call_extern(
        "int32", "polytile_test_never_defined_fn", outs[0].access_ptr("w"),
        ins[0].access_ptr("r")), name="twice4")
    A = te.placeholder((3 * n,), name="A")
    C = te.compute((3 * n,), lambda i: A[i] * 2, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=n)
    s[C].tensorize(xi, intrin)
    if with_source:
        s[C].pragma(xo, "import_c", "int polytile_test_other_fn(float *c) { return 0; }")
    with pytest.raises(BuildError, match=r"build: function 'main' calls "
                       r"\['polytile_test_never_defined_fn'\], defined nowhere"):
        polytile.build(s, [A, C], target="llvm")
