"""The vocabulary of loops, shared by stages and the loop IR: :class:`LoopKind` and
:class:`ThreadTag`.

A stage's ``annotations`` map a loop to what ``vectorize``/``unroll``/``parallel`` made of
it (a :class:`LoopKind`) or to the hardware index ``bind`` mapped it onto (a
:class:`ThreadTag`); a loop-IR ``For`` has a :class:`LoopKind`. Both are string enums:
a member equals its value (``LoopKind.PARALLEL == "parallel"``, ``ThreadTag.THREAD_X ==
"threadIdx.x"``) and prints as it, so the printed IR, the records and hand-written IR
with plain strings read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class _Vocabulary(str, Enum):
    """A string enum that prints as its value (``enum.StrEnum`` is Python >= 3.11), also
    through ``repr`` (messages quote it as the string it stands for)."""

    __str__ = str.__str__
    __format__ = str.__format__

    def __repr__(self) -> str:
        return repr(self.value)


class LoopKind(_Vocabulary):
    """How a loop runs: ``serial``, ``parallel`` (iterations on several CPU threads),
    ``vectorized`` (iterations as SIMD lanes) or ``unrolled`` (one copy of the body per
    iteration)."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"

    @property
    def primitive(self) -> str:
        """The schedule primitive that asks for it (``"vectorize"``)."""
        return _PRIMITIVES[self]


_PRIMITIVES = {LoopKind.SERIAL: "serial", LoopKind.PARALLEL: "parallel",
               LoopKind.VECTORIZED: "vectorize", LoopKind.UNROLLED: "unroll"}


class ThreadTag(_Vocabulary):
    """A GPU hardware index a loop can be bound to; ``vthread`` is a virtual thread (the
    loop runs unrolled inside each thread, TVM's ``vthread``)."""

    BLOCK_X = "blockIdx.x"
    BLOCK_Y = "blockIdx.y"
    BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"
    THREAD_Y = "threadIdx.y"
    THREAD_Z = "threadIdx.z"
    VTHREAD = "vthread"

    @property
    def is_block(self) -> bool:
        """``blockIdx.*``."""
        return self.value.startswith("blockIdx")

    @property
    def is_thread(self) -> bool:
        """``threadIdx.*``."""
        return self.value.startswith("threadIdx")

    @property
    def in_thread(self) -> bool:
        """Each value runs on one thread: ``threadIdx.*`` or ``vthread``."""
        return self.is_thread or self is ThreadTag.VTHREAD

    @property
    def is_hardware(self) -> bool:
        """A launch dimension (every tag but ``vthread``)."""
        return self is not ThreadTag.VTHREAD

    @property
    def param(self) -> str:
        """The isl parameter holding the index in schedule trees (``bx`` ... ``tz``)."""
        return _PARAMS[self]

    @classmethod
    def hardware(cls) -> tuple:
        """The six launch dimensions, blocks first, each x, y, z."""
        return tuple(t for t in cls if t.is_hardware)


_PARAMS = {t: ("b" if t.is_block else "t") + t.value[-1] for t in ThreadTag if t.is_hardware}

#: isl parameter names of the hardware indices (tag -> name), and their isl space.
PARAMS = {t: t.param for t in ThreadTag.hardware()}
PARAM_SPACE = "[" + ", ".join(PARAMS.values()) + "]"

#: What a stage's ``annotations`` hold for a loop.
Annotation = LoopKind | ThreadTag


def annotation_name(a: Annotation) -> str:
    """How messages and traces name annotation ``a``: the primitive (``"vectorize"``) or
    ``"bind:<tag>"``."""
    if isinstance(a, ThreadTag):
        return f"bind:{a.value}"
    return LoopKind(a).primitive


def loop_kind(a: Annotation | None) -> LoopKind:
    """The loop-IR kind of a loop with annotation ``a`` (virtual threads are unrolled;
    loops bound to hardware indices are no loops and never ask)."""
    if a is None:
        return LoopKind.SERIAL
    if isinstance(a, ThreadTag):
        return LoopKind.UNROLLED if a is ThreadTag.VTHREAD else LoopKind.SERIAL
    return LoopKind(a)


#: Storage scopes of tensor-core fragments (CUDA ``nvcuda::wmma::fragment``): per thread
#: in the IR's meaning (each thread of a warp holds the whole tile, as the interpreter
#: runs it), held collectively by the 32 lanes of a warp on the device. Only tensor
#: intrinsics (``targets/cuda/tensor_core.py``) read and write them.
#: ``wgmma.accumulator`` (Hopper ``wgmma.mma_async``, targets/cuda/wgmma_intrin.py): a
#: 64 x N float32 tile held by the 128 threads of a warpgroup (N / 2 registers each).
FRAGMENT_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator",
                   "mfma.accumulator_32x32", "mfma.accumulator_16x16", "wgmma.accumulator")
#: The tile of each fragment scope (rows, columns): a fragment buffer is a row-major array
#: of such tiles, one intrinsic operand each. AMD MFMA accumulators (the registers of a
#: wavefront's 64 lanes, ``targets/hip/mfma.py``) come in the two output tiles of the
#: MFMA instructions.
FRAGMENT_TILES = {"wmma.matrix_a": (16, 16), "wmma.matrix_b": (16, 16),
                  "wmma.accumulator": (16, 16), "mfma.accumulator_32x32": (32, 32),
                  "mfma.accumulator_16x16": (16, 16)}


def fragment_tile(scope: str, dtype: str, width: int | None = None) -> tuple[int, int]:
    """``(rows, columns)`` of one tile of a fragment buffer: 16x16 on CUDA, except the tf32 WMMA
    shape m16n16k8 (float32 ``matrix_a`` 16x8, ``matrix_b`` 8x16) and the warpgroup
    accumulator ``wgmma.accumulator``: 64 rows by the buffer's ``width`` (one wgmma
    ``m64nNk16`` D tile per 64 rows). A fragment buffer is an array of such tiles,
    row-major over the tile grid (MFMA accumulators: :data:`FRAGMENT_TILES`)."""
    if scope == "wgmma.accumulator":
        if width is None:
            raise ValueError("fragment_tile: a wgmma.accumulator tile needs the width")
        return 64, int(width)
    if dtype == "float32" and scope == "wmma.matrix_a":
        return 16, 8
    if dtype == "float32" and scope == "wmma.matrix_b":
        return 8, 16
    return FRAGMENT_TILES[scope]


def thread_private(scope: str) -> bool:
    """Does a buffer of ``scope`` have one copy per GPU thread (``local``, fragments)?"""
    return scope == "local" or scope in FRAGMENT_SCOPES


def default_scope(tags) -> str:
    """TVM's storage scope of an attached stage without one, from the tags of the loops
    around it (None for unbound loops): ``local`` inside a thread (or virtual thread)
    loop, ``shared`` inside a block loop only, else ``global``."""
    tags = [t for t in tags if t is not None]
    if any(ThreadTag(t).in_thread for t in tags):
        return "local"
    if any(ThreadTag(t).is_block for t in tags):
        return "shared"
    return "global"


@dataclass(frozen=True)
class PipelinePragma:
    """``s[C].pipeline(k, stages=N)`` on loop-IR ``For.pragmas``: the loop ``axis`` of
    stage ``stage`` runs as an ``stages``-deep software pipeline (see
    :mod:`polytile.schedule.passes.software_pipeline`)."""

    stages: int
    stage: str
    axis: str
    #: ``mma_wait``: asynchronous MMA groups (``te.AsyncGroup``) left in flight per
    #: iteration; None when the compute is synchronous
    mma_wait: int | None = None
    #: ``fragment_prefetch``: the fragments of the first k step of iteration ``k + 1`` are
    #: loaded (into a second set of fragment registers) before the last step's MMAs of
    #: iteration ``k``, across the barrier
    fragment_prefetch: bool = False
    #: ``copy_after_wait``: with ``mma_wait``, the copies of each iteration are issued
    #: after its MMA wait and a second barrier, into the slot that wait retired
    #: (``stages - mma_wait`` tiles ahead instead of ``stages - 1 - mma_wait``)
    copy_after_wait: bool = False
    #: ``tma``: the shared tiles are copied by TMA bulk tensor copies completing on one
    #: mbarrier per slot (:mod:`polytile.schedule.passes.tma_copy`)
    tma: bool = False
    #: ``sync_copies`` (``double_buffer``): copies that are no 16-byte vector loops stay
    #: ordinary loads and stores (complete when issued; the slots and barriers are the
    #: same) instead of being refused
    sync_copies: bool = False
    #: ``via``: the stages whose ``double_buffer()`` asked for this pipeline (refusals
    #: name them and ``double_buffer``, the primitive the user called)
    via: tuple = ()

    def __str__(self) -> str:
        w = "" if self.mma_wait is None else f", mma_wait={self.mma_wait}"
        w += ", fragment_prefetch=True" if self.fragment_prefetch else ""
        w += ", copy_after_wait=True" if self.copy_after_wait else ""
        w += ", tma=True" if self.tma else ""
        return f"software_pipeline(stages={self.stages}{w})"


@dataclass(frozen=True)
class AutoUnrollPragma:
    """``s[C].pragma(k, "auto_unroll_max_step", N)`` on loop-IR ``For.pragmas``: serial
    loops of constant extent inside the loop expanding to at most ``max_step`` statements
    are unrolled (:func:`~polytile.schedule.passes.loops.auto_unroll`)."""

    max_step: int

    def __str__(self) -> str:
        return f"auto_unroll_max_step={self.max_step}"


@dataclass(frozen=True)
class PrefetchPragma:
    """``s[C].prefetch(T, axis, offset)`` on loop-IR ``For.pragmas``: each iteration of the
    loop ``axis`` of stage ``stage`` first prefetches the cache lines of buffer ``tensor``
    that iteration ``axis + offset`` accesses (see
    :mod:`polytile.schedule.passes.prefetch`)."""

    tensor: str
    offset: int
    stage: str
    axis: str

    def __str__(self) -> str:
        return f"prefetch({self.tensor}, offset={self.offset})"


def for_pragmas(stage, iv) -> tuple:
    """The ``For.pragmas`` of the loop of ``iv`` in ``stage``: pragma names, with the
    objects of those that the loop passes read (a software pipeline, an auto unroll, a
    prefetch)."""
    out = []
    for k, v in stage.pragmas.get(iv, ()):
        if k == "auto_unroll_max_step":
            out.append(AutoUnrollPragma(v))
        elif k in ("software_pipeline", "prefetch"):
            out.append(v)
        else:
            out.append(k)
    return tuple(out)


#: The ``For.pragmas`` entry of a vectorized 16-byte copy from global into shared memory
#: that runs asynchronously (PTX ``cp.async``; :mod:`~polytile.schedule.passes.async_copy`).
ASYNC_COPY = "cp.async"


__all__ = ["ASYNC_COPY", "AutoUnrollPragma", "PipelinePragma", "PrefetchPragma", "for_pragmas",
           "Annotation", "LoopKind", "PARAMS", "PARAM_SPACE", "ThreadTag", "annotation_name",
           "default_scope", "loop_kind", "FRAGMENT_SCOPES", "FRAGMENT_TILES", "fragment_tile", "thread_private"]
