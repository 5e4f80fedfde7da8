"""Mistakes when calling a built function: every argument is checked in Python before any
native code runs, so a wrong count, shape, dtype, layout, device, a read-only output or an
aliased input/output is a ``TypeError``/``ValueError`` naming the function and argument,
never a crash or a silently wrong result. The output stays untouched."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te

M, K = 5, 7  # C[M, M] = A[M, K] @ B[K, M]


@pytest.fixture(scope="module")
def f():
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return polytile.build(te.create_schedule(C.op), [A, B, C], name="mm")


@pytest.fixture(scope="module")
def g():
    """``C[i] = A[i] * n`` with an int8 scalar parameter ``n``."""
    n = te.var("n", dtype="int8")
    A = te.placeholder((M,), name="A")
    C = te.compute((M,), lambda i: A[i] * n.astype("float32"), name="C")
    return polytile.build(te.create_schedule(C.op), [A, C, n], name="scale")


def _a():
    return np.random.default_rng(0).uniform(-1, 1, (M, K)).astype("float32")


def _b():
    return np.random.default_rng(1).uniform(-1, 1, (K, M)).astype("float32")


def _c():
    return np.full((M, M), 7.0, "float32")  # sentinel: a refused call must not write it


class _DLPackOn:
    """A stand-in for a torch tensor: DLPack device ``(kind, 0)`` (1 = CPU, 2 = CUDA)."""

    def __init__(self, kind: int, array: np.ndarray):
        self.kind, self.array = kind, array
        self.shape, self.dtype = array.shape, array.dtype

    def __dlpack_device__(self):
        return (self.kind, 0)

    def __dlpack__(self, stream=None, **kw):
        if self.kind != 1:
            raise BufferError("device memory")
        return self.array.__dlpack__()


def _fortran(a):
    return np.asfortranarray(a)


def _strided(shape):
    return np.zeros((shape[0], 2 * shape[1]), "float32")[:, ::2]


def _readonly(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def too_few(f, g, c):
    f(_a(), _b())


def too_many(f, g, c):
    f(_a(), _b(), c, c)


def keyword_arguments(f, g, c):
    f(A=_a(), B=_b(), C=c)


def wrong_shape(f, g, c):
    f(_a(), _b(), np.zeros((M, M + 1), "float32"))


def transposed_shape(f, g, c):
    f(_a().T.copy(), _b(), c)


def flattened(f, g, c):
    f(_a().ravel(), _b(), c)


def float64_input(f, g, c):
    f(_a().astype("float64"), _b(), c)


def big_endian_input(f, g, c):
    f(_a().astype(">f4"), _b(), c)


def int_output(f, g, c):
    f(_a(), _b(), np.zeros((M, M), "int32"))


def strided_output(f, g, c):
    f(_a(), _b(), _strided((M, M)))


def fortran_order_input(f, g, c):
    f(_fortran(_a()), _b(), c)


def transposed_view_input(f, g, c):
    f(np.ascontiguousarray(_a().T).T, _b(), c)


def read_only_output(f, g, c):
    f(_a(), _b(), _readonly(c))


def output_shares_a_workspace_with_an_input(f, g, c):
    work = np.zeros(M * K + M * M, "float32")  # one buffer carved into views, overlapping
    f(work[:M * K].reshape(M, K), _b(), work[M * K - M:M * K - M + M * M].reshape(M, M))


def output_overlaps_an_input():
    # a square case so that the same array fits both
    A = te.placeholder((M, M), name="A")
    C = te.compute((M, M), lambda i, j: A[j, i] * 2, name="C")
    h = polytile.build(te.create_schedule(C.op), [A, C], name="tr")
    x = np.ones((M, M), "float32")
    h(x, x)


def python_list(f, g, c):
    f(_a().tolist(), _b(), c)


def scalar_for_an_array(f, g, c):
    f(1.0, _b(), c)


def masked_array(f, g, c):
    f(np.ma.masked_array(_a(), mask=np.zeros((M, K), bool)), _b(), c)


def tensor_on_the_gpu(f, g, c):
    f(_DLPackOn(2, _a()), _b(), c)


def tensor_object_on_the_cpu(f, g, c):
    f(_DLPackOn(1, _a()), _b(), c)


def float_for_an_int_scalar(f, g, c):
    g(np.ones(M, "float32"), np.zeros(M, "float32"), 2.5)


def int_scalar_out_of_range(f, g, c):
    g(np.ones(M, "float32"), np.zeros(M, "float32"), 300)


def array_for_a_scalar(f, g, c):
    g(np.ones(M, "float32"), np.zeros(M, "float32"), np.array([2]))


def timing_zero_runs(f, g, c):
    f.time_evaluator(number=0)


def timing_with_wrong_arguments(f, g, c):
    f.time_evaluator(number=1, repeat=1)(_a(), _b(), c.astype("float64"))


CASES = [
    pytest.param(too_few, TypeError,
                 r"mm: takes 3 arguments \(A, B, C\) but 2 were given; expected one argument "
                 r"per parameter", id="too-few-arguments"),
    pytest.param(too_many, TypeError, r"mm: takes 3 arguments \(A, B, C\) but 4 were given",
                 id="too-many-arguments"),
    pytest.param(keyword_arguments, TypeError, r"unexpected keyword argument 'A'",
                 id="keyword-arguments"),
    pytest.param(wrong_shape, ValueError,
                 r"mm: argument 'C' has shape \(5, 6\); expected shape \(5, 5\)",
                 id="wrong-shape"),
    pytest.param(transposed_shape, ValueError,
                 r"mm: argument 'A' has shape \(7, 5\); expected shape \(5, 7\)",
                 id="transposed-shape"),
    pytest.param(flattened, ValueError,
                 r"mm: argument 'A' has shape \(35,\); expected shape \(5, 7\)",
                 id="flattened-array"),
    pytest.param(float64_input, TypeError,
                 r"(?s)mm: argument 'A' has dtype float64; expected dtype float32.*hint: "
                 r"convert with A\.astype\('float32'\)", id="float64-input"),
    pytest.param(big_endian_input, TypeError,
                 r"mm: argument 'A' has dtype >f4; expected dtype float32",
                 id="big-endian-input"),
    pytest.param(int_output, TypeError, r"mm: argument 'C' has dtype int32; expected dtype "
                 r"float32", id="int-output"),
    pytest.param(strided_output, ValueError,
                 r"(?s)mm: argument 'C' is not C-contiguous; expected a C-contiguous array.*"
                 r"hint: pass np\.ascontiguousarray\(C\)", id="strided-output"),
    pytest.param(fortran_order_input, ValueError,
                 r"(?s)mm: argument 'A' is not C-contiguous.*hint: pass np\.ascontiguousarray",
                 id="fortran-order-input"),
    pytest.param(transposed_view_input, ValueError, r"mm: argument 'A' is not C-contiguous",
                 id="transposed-view-input"),
    pytest.param(read_only_output, ValueError,
                 r"mm: argument 'C' is read-only but the function writes it; expected a "
                 r"writeable array", id="read-only-output"),
    pytest.param(output_shares_a_workspace_with_an_input, ValueError,
                 r"mm: arguments 'A' and 'C' overlap in memory and the function writes one of "
                 r"them; expected distinct arrays", id="output-overlaps-an-input-view"),
    pytest.param(python_list, TypeError,
                 r"(?s)mm: argument 'A' is a list; expected a numpy\.ndarray of dtype float32.*"
                 r"hint: wrap it with np\.asarray\(A, dtype='float32'\)", id="python-list"),
    pytest.param(scalar_for_an_array, TypeError,
                 r"mm: argument 'A' is a float; expected a numpy\.ndarray", id="scalar-for-array"),
    pytest.param(masked_array, TypeError,
                 r"(?s)mm: argument 'A' is a masked array; expected a plain numpy\.ndarray.*"
                 r"hint: pass A\.filled", id="masked-array"),
    pytest.param(tensor_on_the_gpu, TypeError,
                 r"(?s)mm: argument 'A' is a _DLPackOn on cuda:0; expected a numpy\.ndarray.*"
                 r"hint: functions built for 'llvm' run on the CPU.*\.cpu\(\)\.numpy\(\)",
                 id="tensor-on-the-gpu-for-a-cpu-function"),
    pytest.param(tensor_object_on_the_cpu, TypeError,
                 r"(?s)mm: argument 'A' is a _DLPackOn; expected a numpy\.ndarray.*hint: convert "
                 r"it with np\.asarray\(A\)", id="torch-like-cpu-tensor"),
    pytest.param(float_for_an_int_scalar, TypeError,
                 r"scale: argument 'n' is the float 2\.5; expected an integer for the int8",
                 id="float-for-an-int-scalar"),
    pytest.param(int_scalar_out_of_range, ValueError,
                 r"scale: argument 'n' = 300 does not fit in int8; expected a value in "
                 r"\[-128, 127\]", id="int-scalar-out-of-range"),
    pytest.param(array_for_a_scalar, TypeError,
                 r"scale: argument 'n' is a ndarray; expected a Python or numpy number",
                 id="array-for-a-scalar"),
    pytest.param(timing_zero_runs, ValueError,
                 r"time_evaluator: number=0, repeat=1, min_repeat_ms=0; expected number >= 1",
                 id="time-evaluator-zero-runs"),
    pytest.param(timing_with_wrong_arguments, TypeError,
                 r"mm: argument 'C' has dtype float64; expected dtype float32",
                 id="time-evaluator-wrong-arguments"),
]


@pytest.mark.parametrize("mistake, exc, match", CASES)
def test_call_mistake_is_refused_before_running(f, g, mistake, exc, match):
    c = _c()
    with pytest.raises(exc, match=match):
        mistake(f, g, c)
    assert (c == 7.0).all()  # nothing ran


def test_output_overlapping_an_input_is_refused():
    with pytest.raises(ValueError, match=r"(?s)tr: arguments 'A' and 'C' overlap in memory and "
                       r"the function writes one of them; expected distinct arrays.*hint: pass "
                       r"a copy"):
        output_overlaps_an_input()


def test_read_only_inputs_and_one_array_for_two_inputs_are_fine(f):
    """Not mistakes: inputs are only read."""
    a = _readonly(np.eye(M, K, dtype="float32"))
    b = _readonly(np.eye(K, M, dtype="float32"))
    c = _c()
    f(a, b, c)
    np.testing.assert_array_equal(c, np.eye(M, dtype="float32"))


# ------------------------------------------------------------------------ GPU functions
@pytest.fixture(scope="module")
def f_gpu():
    from polytile.targets.cuda import compile as cuda_compile
    from polytile.targets.cuda.runtime import device_count

    if device_count() == 0 or cuda_compile.available_compiler() is None:
        pytest.skip("needs an NVIDIA GPU and a CUDA compiler")
    A = te.placeholder((M,), name="A")
    C = te.compute((M,), lambda i: A[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    return polytile.build(s, [A, C], target="cuda", name="twice")


@pytest.mark.gpu
def test_gpu_function_given_host_arrays(f_gpu):
    out = polytile.nd.array(np.zeros(M, "float32"), device="cuda")
    with pytest.raises(TypeError, match=r"(?s)twice: argument 'A' is a numpy\.ndarray \(host "
                       r"memory\); expected a CUDA array.*hint: copy it to the GPU with "
                       r"polytile\.nd\.array\(A, device='cuda'\)"):
        f_gpu(np.ones(M, "float32"), out)


@pytest.mark.gpu
def test_gpu_function_given_a_cpu_tensor(f_gpu):
    out = polytile.nd.array(np.zeros(M, "float32"), device="cuda")
    with pytest.raises(TypeError, match=r"twice: argument 'A' \(_DLPackOn\) is on cpu.*; "
                       r"expected an array on cuda:0"):
        f_gpu(_DLPackOn(1, np.ones(M, "float32")), out)


@pytest.mark.gpu
def test_gpu_function_given_torch_mistakes(f_gpu):
    torch = pytest.importorskip("torch")
    out = torch.zeros(M, device="cuda")
    with pytest.raises(TypeError, match=r"twice: argument 'A' \(Tensor\) is on cpu"):
        f_gpu(torch.ones(M), out)
    with pytest.raises(TypeError, match=r"twice: argument 'A' has dtype float64; expected "
                       r"dtype float32"):
        f_gpu(torch.ones(M, device="cuda", dtype=torch.float64), out)
    with pytest.raises(ValueError, match=r"(?s)twice: argument 'A' is not C-contiguous.*hint: "
                       r"pass a contiguous copy"):
        f_gpu(torch.ones(2 * M, device="cuda")[::2], out)
