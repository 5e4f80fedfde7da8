"""The GPU resource limits that GPU templates prune their knob spaces with.

A GPU template must not offer configs that cannot launch: more threads per block than the
device has, more shared memory than a block may declare, more registers than a block
holds. Its knob lists are filtered with :func:`current` *before* anything is built, so
the tuner never spends a build (or a trial) on them.

Where the limits come from, first match wins:

1. a binding (:func:`use`): the tuner binds the limits its GPU runner read from the
   device (:func:`from_device`), in the tuning process and in every build worker, so all
   of them see the same space;
2. the ``-arch`` of the target the template is instantiated for, looked up in
   :data:`ARCH_LIMITS` (CUDA C Programming Guide, "Technical Specifications per Compute
   Capability", and the L2 sizes of the reference parts: A100, RTX 3090, RTX 4090, H100/H200);
3. ``sm_90`` without an ``-arch``.

Shared memory is further capped at what polytile's CUDA backend lets a block declare
statically (``CUDA_LIMITS.shared_bytes_per_block``, 48 KiB): lowering refuses more.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict, dataclass

_local = threading.local()

#: Shared memory (bytes) a block of polytile's CUDA kernels may declare: the static limit.
STATIC_SHARED_BYTES = 48 * 1024


@dataclass(frozen=True)
class GPULimits:
    """Per-block limits of a GPU (bytes, counts).

    Attributes
    ----------
    arch : str
        ``sm_XY``.
    max_threads_per_block : int
    shared_bytes_per_block : int
        Shared memory one block may use (after the static cap, see the module docstring).
    registers_per_block : int
        32-bit registers of one block.
    registers_per_thread : int
        Most registers one thread may use (255 on every architecture here).
    l2_bytes : int
        L2 cache size (the runner rotates input sets larger than it).
    sm_count : int
        Streaming multiprocessors (0: unknown).
    shared_bytes_optin : int
        Shared memory a software-pipelined kernel may opt in to (dynamic shared memory,
        ``cudaFuncAttributeMaxDynamicSharedMemorySize``; the CUDA backend opts in for
        pipelined kernels only): the tensor-core GEMM template's multi-stage tiles.
    """

    arch: str = "sm_90"
    max_threads_per_block: int = 1024
    shared_bytes_per_block: int = STATIC_SHARED_BYTES
    registers_per_block: int = 65536
    registers_per_thread: int = 255
    l2_bytes: int = 50 << 20
    sm_count: int = 0
    shared_bytes_optin: int = 227 * 1024

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> GPULimits:
        return GPULimits(**{k: d[k] for k in GPULimits.__dataclass_fields__ if k in d})


#: Limits per architecture (shared memory already capped at the static 48 KiB; the opt-in
#: maxima: 163 KiB on sm_80, 99 KiB on sm_86/sm_89, 227 KiB on sm_90).
ARCH_LIMITS = {
    "sm_80": GPULimits("sm_80", 1024, STATIC_SHARED_BYTES, 65536, 255, 40 << 20, 108,
                       163 * 1024),
    "sm_86": GPULimits("sm_86", 1024, STATIC_SHARED_BYTES, 65536, 255, 6 << 20, 82,
                       99 * 1024),
    "sm_89": GPULimits("sm_89", 1024, STATIC_SHARED_BYTES, 65536, 255, 72 << 20, 128,
                       99 * 1024),
    "sm_90": GPULimits("sm_90", 1024, STATIC_SHARED_BYTES, 65536, 255, 50 << 20, 132,
                       227 * 1024),
}


def arch_of(target) -> str:
    """The ``-arch=sm_XY`` of a target string ('' without one)."""
    for w in str(target or "").split()[1:]:
        if w.startswith("-arch="):
            return w.split("=", 1)[1]
    return ""


def for_arch(arch: str) -> GPULimits:
    """The table's limits for ``arch`` (``sm_90`` for an empty or unknown one of at least
    9.0, the nearest lower entry otherwise)."""
    if arch in ARCH_LIMITS:
        return ARCH_LIMITS[arch]
    try:
        num = int(arch[3:].rstrip("af"))
    except (ValueError, IndexError):
        return ARCH_LIMITS["sm_90"]
    lower = [a for a in ARCH_LIMITS if int(a[3:]) <= num]
    base = ARCH_LIMITS[max(lower, key=lambda a: int(a[3:]))] if lower else ARCH_LIMITS["sm_80"]
    return GPULimits(arch, *list(asdict(base).values())[1:])


def from_device(info: dict) -> GPULimits:
    """Limits from a GPU runner's device description (``gpu_runner.device_info``),
    shared memory capped at :data:`STATIC_SHARED_BYTES`."""
    table = for_arch(info.get("arch", ""))
    return GPULimits(
        arch=info.get("arch") or table.arch,
        max_threads_per_block=int(info.get("max_threads_per_block")
                                  or table.max_threads_per_block),
        shared_bytes_per_block=min(STATIC_SHARED_BYTES, int(info.get(
            "max_shared_memory_per_block") or table.shared_bytes_per_block)),
        registers_per_block=int(info.get("max_registers_per_block")
                                or table.registers_per_block),
        registers_per_thread=table.registers_per_thread,
        l2_bytes=int(info.get("l2_cache_bytes") or table.l2_bytes),
        sm_count=int(info.get("multi_processor_count") or table.sm_count),
        shared_bytes_optin=int(info.get("max_shared_memory_per_block_optin")
                               or table.shared_bytes_optin))


def current(target=None) -> GPULimits:
    """The limits GPU templates prune with: the innermost binding, else the table entry of
    ``target``'s ``-arch`` (see the module docstring)."""
    st = getattr(_local, "stack", None)
    if st:
        return st[-1]
    return for_arch(arch_of(target) or "sm_90")


@contextlib.contextmanager
def use(limits: GPULimits | dict | None):
    """Bind ``limits`` (None: no binding) for the templates instantiated in the block."""
    if limits is None:
        yield None
        return
    if isinstance(limits, dict):
        limits = GPULimits.from_json(limits)
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(limits)
    try:
        yield limits
    finally:
        _local.stack.pop()


def current_target() -> str:
    """The target string the GPU template being instantiated is built for ('' outside
    one): templates read arch-specific features from its ``-arch`` (``sm_90a``: wgmma)."""
    st = getattr(_local, "targets", None)
    return st[-1] if st else ""


@contextlib.contextmanager
def target_binding(target):
    """Bind ``target`` (a string or None) for :func:`current_target` in the block."""
    if not hasattr(_local, "targets"):
        _local.targets = []
    _local.targets.append(str(target or ""))
    try:
        yield
    finally:
        _local.targets.pop()


def fits(limits: GPULimits, threads: int, shared_bytes: int, regs_per_thread: int) -> bool:
    """Whether a block of ``threads`` threads, each needing about ``regs_per_thread``
    registers, with ``shared_bytes`` of shared memory, can launch within ``limits``."""
    return (1 <= threads <= limits.max_threads_per_block
            and shared_bytes <= limits.shared_bytes_per_block
            and regs_per_thread <= limits.registers_per_thread
            and regs_per_thread * threads <= limits.registers_per_block)
