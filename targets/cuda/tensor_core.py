"""NVIDIA tensor-core intrinsics for ``tensorize`` (WMMA, CUDA's ``nvcuda::wmma``).

Each function declares one :class:`~polytile.te.tensor_intrin.TensorIntrin` on a 16x16x16
tile, in the style of TVM's tensor-core tutorial:

=========================  ==================================================================
``wmma_load_a/b``          ``frag[i, j] = smem[i, j]``: ``wmma::load_matrix_sync`` from a
                           (shared or global) region with any row stride, into a
                           ``wmma.matrix_a`` / ``wmma.matrix_b`` fragment
``wmma_mma``               ``c[i, j] += a[i, k] * b[k, j]`` (``wmma::mma_sync``), with
                           ``reset`` = ``wmma::fill_fragment(c, 0)``; float16 inputs, float32
                           (``acc="float32"``) or float16 accumulation
``wmma_store``             ``out[i, j] = frag[i, j]``: ``wmma::store_matrix_sync``
=========================  ==================================================================

Fragments are buffers of scope ``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``
(``s.cache_read(AS, "wmma.matrix_a", [CF])``, ``s.cache_write(C, "wmma.accumulator")``):
arrays of 16x16 tiles, declared ``nvcuda::wmma::fragment<...> name[tiles]`` by the C
printer (the layout of matrix_a/matrix_b from the ``:row_major``/``:col_major`` tag of the
calls that load them). Their meaning in the loop IR is a per-thread array (each thread of a
warp computes the whole tile, which is what the interpreter runs): the loops of fragment
stages must not be bound to ``threadIdx.x``, whose 32 lanes form the warp that executes the
collective WMMA calls together. Source: CUDA C++ Programming Guide, "Warp Matrix Functions".
"""

from __future__ import annotations

from polytile import te, tir

N = 16
TILE = 256   # elements of one fragment: fragment index = element offset / 256


def _stride(view) -> int:
    return view.strides[0]


def wmma_load_a(dtype: str = "float16", layout: str = "row_major", name: str = "") -> te.TensorIntrin:
    """``load_matrix_sync`` into a ``wmma.matrix_a`` fragment (rows ``i``, columns ``k``)."""
    return _load("matrix_a", dtype, layout, name)


def wmma_load_b(dtype: str = "float16", layout: str = "row_major", name: str = "") -> te.TensorIntrin:
    """``load_matrix_sync`` into a ``wmma.matrix_b`` fragment (rows ``k``, columns ``j``)."""
    return _load("matrix_b", dtype, layout, name)


def _load(use: str, dtype: str, layout: str, name: str) -> te.TensorIntrin:
    a = te.placeholder((N, N), name="src", dtype=dtype)
    c = te.compute((N, N), lambda i, j: a[i, j], name="frag")
    binds = {a: tir.decl_buffer(a.shape, dtype, "src", strides=[te.var("ldm"), 1]),
             c: tir.decl_buffer(c.shape, dtype, "frag", scope=f"wmma.{use}")}

    def fcompute(ins, outs):
        src, frag = ins[0], outs[0]
        return tir.call_intrin("void", f"wmma.load_matrix_sync:{layout}",
                               frag.access_ptr("w"), src.access_ptr("r"), _stride(src))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=name or f"wmma_load_{use[-1]}_{dtype}_{layout}")


def wmma_mma(dtype: str = "float16", acc: str = "float32", name: str = "") -> te.TensorIntrin:
    """``c[i, j] = sum_k a[i, k] * b[k, j]`` on 16x16x16 fragments (``mma_sync``); the
    stage must compute ``te.sum(A[i, k].astype(acc) * B[k, j].astype(acc))`` (or without
    casts when ``acc`` is ``dtype``)."""
    a = te.placeholder((N, N), name="a", dtype=dtype)
    b = te.placeholder((N, N), name="b", dtype=dtype)
    k = te.reduce_axis((0, N), name="k")
    if acc == dtype:
        c = te.compute((N, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    else:
        c = te.compute((N, N), lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc),
                                                   axis=k), name="c")
    binds = {a: tir.decl_buffer(a.shape, dtype, "a", scope="wmma.matrix_a"),
             b: tir.decl_buffer(b.shape, dtype, "b", scope="wmma.matrix_b"),
             c: tir.decl_buffer(c.shape, acc, "c", scope="wmma.accumulator")}

    def fcompute(ins, outs):
        fa, fb = ins
        fc = outs[0]
        update = tir.call_intrin("void", "wmma.mma_sync", fc.access_ptr("w"),
                                 fa.access_ptr("r"), fb.access_ptr("r"), fc.access_ptr("r"))
        reset = tir.call_intrin("void", "wmma.fill_fragment", fc.access_ptr("w"),
                                te.const(0, acc))
        ib = tir.ir_builder.create()
        ib.emit(reset)
        ib.emit(update)
        return ib.get(), reset, update

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds,
                                 name=name or f"wmma_mma_{dtype}_{acc}")


def wmma_store(acc: str = "float32", name: str = "") -> te.TensorIntrin:
    """``store_matrix_sync`` of a ``wmma.accumulator`` fragment to a row-major region."""
    f = te.placeholder((N, N), name="frag", dtype=acc)
    c = te.compute((N, N), lambda i, j: f[i, j], name="dst")
    binds = {f: tir.decl_buffer(f.shape, acc, "frag", scope="wmma.accumulator"),
             c: tir.decl_buffer(c.shape, acc, "dst", strides=[te.var("ldm"), 1])}

    def fcompute(ins, outs):
        frag, dst = ins[0], outs[0]
        return tir.call_intrin("void", "wmma.store_matrix_sync", dst.access_ptr("w"),
                               frag.access_ptr("r"), _stride(dst))

    return te.decl_tensor_intrin(c.op, fcompute, binds=binds, name=name or f"wmma_store_{acc}")


_INLINE = "__device__ __forceinline__"

#: One C++ helper per instruction, named after it: call name -> (helper, definition). The
#: C printer defines a helper once when a kernel calls it.
C_HELPERS = {
    "wmma.load_matrix_sync": ("wmma_load_matrix_sync", (
        f"template <typename F, typename T> {_INLINE} void wmma_load_matrix_sync(F& frag, "
        "const T* src, int ldm) { nvcuda::wmma::load_matrix_sync(frag, src, ldm); }")),
    "wmma.mma_sync": ("wmma_mma_sync", (
        f"template <typename D, typename A, typename B, typename C> {_INLINE} void "
        "wmma_mma_sync(D& d, const A& a, const B& b, const C& c) "
        "{ nvcuda::wmma::mma_sync(d, a, b, c); }")),
    "wmma.fill_fragment": ("wmma_fill_fragment", (
        f"template <typename F, typename T> {_INLINE} void wmma_fill_fragment(F& frag, T v) "
        "{ nvcuda::wmma::fill_fragment(frag, v); }")),
    "wmma.store_matrix_sync": ("wmma_store_matrix_sync", (
        f"template <typename T, typename F> {_INLINE} void wmma_store_matrix_sync(T* dst, "
        "const F& frag, int ldm) { nvcuda::wmma::store_matrix_sync(dst, frag, ldm, "
        "nvcuda::wmma::mem_row_major); }")),
}
