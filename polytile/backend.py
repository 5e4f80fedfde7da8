"""Backends as registered data: what a target kind is, what its device can do, how it builds.

A *backend* is one code generator with its runtime: ``llvm`` (the host CPU through LLVM)
and ``cuda`` (NVIDIA GPUs through CUDA C) are two registrations, and a user-defined one is a
third (models, read not copied: Triton's ``BaseBackend`` with ``parse_options`` and
``add_stages``; TVM's target kinds with their limit attributes; tinygrad's renderer
capabilities). A :class:`Backend` says

* ``kind``: its name in target strings (``"cuda -arch=sm_90"``);
* ``parse_options``: how the words after the kind become a :class:`Target`;
* ``is_gpu``: whether its programs are GPU kernels (schedules bind loops to
  ``blockIdx``/``threadIdx``);
* ``limits``: its :class:`DeviceLimits`, the table lowering checks schedules against
  (threads per block, warp size, shared memory, stack budgets, vector widths, tensor
  intrinsics);
* ``passes``: its own loop-IR passes, run last in ``lower``'s phase table (index narrowing
  on GPUs);
* ``build_module``: how a lowered function becomes a :class:`polytile.targets.Module`.

``register_backend`` adds a backend (from inside polytile or outside it),
``get_backend(kind)`` finds one, ``Target.parse`` turns a string into a :class:`Target`.
Nothing else in polytile compares kind strings: ``build``, the lowering, the tuner, the
CLI and ``polytile.nd`` ask the registry.

The built-in backends register themselves when their module is imported. The registry sits
below them (they import it to register), so it names their modules in ``BUILTIN`` and
imports one the first time its kind is asked for: ``import polytile`` stays light, and a
machine without cuda-python never loads the CUDA backend.

Target strings: ``<kind> [-option[=value]]...``; each backend documents its options
(:mod:`polytile.targets.llvm.backend`, :mod:`polytile.targets.cuda.backend`).
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from polytile.errors import TargetError, format_error

#: Built-in kinds, in the order error messages list them, and the module registering each.
BUILTIN = {"llvm": "polytile.targets.llvm.backend", "cuda": "polytile.targets.cuda.backend",
           "hip": "polytile.targets.hip.backend"}

_REGISTRY: dict = {}


@dataclass(frozen=True, slots=True)
class DeviceLimits:
    """The numbers a device imposes on a program; every field is 0 (or empty) where the
    device has no such limit or feature.

    Attributes
    ----------
    max_threads_per_block : int
        Threads of one GPU block (product of the ``threadIdx`` extents).
    max_block_dim, max_grid_dim : tuple of int
        Largest ``threadIdx.x/y/z`` and ``blockIdx.x/y/z`` extents.
    warp_size : int
        Threads that execute in lockstep (CUDA warp: 32; AMD wavefront: 64; 1 on a CPU).
    shared_bytes_per_block : int
        Shared memory (CUDA ``__shared__``, AMD LDS) the buffers of one kernel may use,
        in bytes; lowering refuses more.
    static_shared_bytes : int
        Shared memory a kernel may declare statically (bytes); above it the C printer
        declares one dynamic array.
    shared_bytes_optin : int
        Shared memory one kernel may use when it opts in (bytes; CUDA's
        ``cudaFuncAttributeMaxDynamicSharedMemorySize``: 227 KiB on sm_90, 163 KiB on
        sm_80); lowering allows it to kernels with a software-pipelined loop
        (``Stage.pipeline``), whose buffers are ``stages`` times larger. 0: the same as
        ``shared_bytes_per_block``.
    registers_per_block : int
        32-bit registers of one block.
    async_copy_bytes : int
        Bytes of one asynchronous global -> shared copy (CUDA ``cp.async``: 16); 0 where
        there is none: staging copies stay synchronous and software pipelines wait for
        nothing.
    vector_bytes : int
        Width of the widest SIMD register in bytes (64 with AVX-512, 32 with AVX2, 16 with
        SSE/NEON); 0 on devices without SIMD registers (GPUs).
    vector_load_bytes : int
        Widest single load or store of one thread in bytes (a CUDA ``float4``: 16).
    stack_buffer_bytes : int
        Largest intermediate buffer put on a native stack (bytes); larger ones go to the
        heap.
    stack_frame_bytes : int
        Stack bytes of intermediates one native frame may use (the function, and each
        parallel-loop body run on another thread).
    tensor_intrinsics : tuple of str
        Names of the tensor intrinsics (MMA-style instructions) ``tensorize`` may map a
        loop nest onto; empty until a backend offers some.
    """

    max_threads_per_block: int = 0
    max_block_dim: tuple = (0, 0, 0)
    max_grid_dim: tuple = (0, 0, 0)
    warp_size: int = 1
    shared_bytes_per_block: int = 0
    shared_bytes_optin: int = 0
    static_shared_bytes: int = 0
    registers_per_block: int = 0
    async_copy_bytes: int = 0
    vector_bytes: int = 0
    vector_load_bytes: int = 0
    stack_buffer_bytes: int = 0
    stack_frame_bytes: int = 0
    tensor_intrinsics: tuple = ()


class TargetKind(str):
    """A target's kind: the string itself (``"llvm"``), with TVM's ``kind.name``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The kind as a plain string (TVM's ``target.kind.name``)."""
        return str.__str__(self)


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed target string: a backend kind, its options and the device's limits.

    Attributes
    ----------
    kind : TargetKind
        The backend's kind (``"llvm"``, ``"cuda"``, or a registered one): a ``str``, with
        TVM's ``kind.name``.
    cpu : str
        LLVM CPU name (``"znver4"``); empty where it does not apply.
    features : tuple of str
        LLVM feature flags such as ``"+avx2"``/``"-avx512f"``; empty means "those of ``cpu``".
    opt_level : int
        Optimisation level, 0 to 3.
    fast_math : bool
        Fast (reassociating, less accurate) floating point.
    arch : str
        GPU architecture (``"sm_90"``); empty otherwise.
    host : bool
        True when the code is for this machine's own CPU (no ``-mcpu``/``-mattr`` given).
    options : tuple of str
        The option words as written (``str(target)`` joins them to the kind).
    limits : DeviceLimits
        The device's limits (filled in by the backend's ``parse_options``).
    attrs : tuple of (str, object)
        Options of a backend that the fields above do not cover, as sorted pairs.
    """

    kind: str
    cpu: str = ""
    features: tuple = ()
    opt_level: int = 3
    fast_math: bool = False
    arch: str = ""
    host: bool = True
    options: tuple = field(default=(), compare=False)
    limits: DeviceLimits = field(default=DeviceLimits(), compare=False)
    attrs: tuple = ()

    def __post_init__(self):
        if type(self.kind) is not TargetKind:
            object.__setattr__(self, "kind", TargetKind(self.kind))

    def __enter__(self) -> Target:
        """``with target:`` makes this the current target (TVM's ``with
        tvm.target.Target("cuda"):``): templates called inside it and ``polytile.build``
        without a target use it (see :func:`current_target`)."""
        _current_stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _current_stack().pop()

    @property
    def backend(self) -> Backend:
        """The registered :class:`Backend` of ``kind``."""
        return get_backend(self.kind)

    @property
    def is_gpu(self) -> bool:
        """Whether programs for this target are GPU kernels."""
        return self.backend.is_gpu

    def attr(self, name: str, default=None):
        """The value of backend-specific option ``name`` (see ``attrs``)."""
        return dict(self.attrs).get(name, default)

    @property
    def feature_string(self) -> str:
        """The features as LLVM's comma-separated ``+f,-g`` string."""
        return ",".join(self.features)

    def has_feature(self, name: str) -> bool:
        """True when feature ``name`` (``"avx2"``) is enabled, explicitly or by ``cpu``."""
        if f"+{name}" in self.features:
            return True
        if f"-{name}" in self.features:
            return False
        return self.backend.implies_feature(self, name)

    @property
    def vector_width(self) -> int:
        """Width of the widest SIMD registers in bytes (``limits.vector_bytes``): 64 with
        AVX-512F, 32 with AVX2, 16 otherwise on CPUs; 0 for GPU targets."""
        return self.limits.vector_bytes

    def vector_lanes(self, dtype_bytes: int) -> int:
        """Number of elements of ``dtype_bytes`` bytes that fill one SIMD register."""
        return max(1, self.vector_width // max(1, dtype_bytes))

    def __str__(self) -> str:
        return " ".join((self.kind,) + tuple(self.options))

    @staticmethod
    def parse(spec: str | Target) -> Target:
        """Parse a target string ``<kind> [-option[=value]]...``; a ``Target`` passes
        through. Parsing is cached per string (targets are immutable).

        Raises
        ------
        TargetError
            For a non-string, an empty string, an unknown kind, or options the kind's
            backend refuses (see its ``parse_options``).
        """
        if isinstance(spec, Target):
            return spec
        if not isinstance(spec, str):
            raise TargetError(format_error(
                "target", f"got {type(spec).__name__} {spec!r}",
                "expected a target string such as 'llvm' or 'llvm -mcpu=znver4', or a Target"))
        return _parse(spec)


_scope = threading.local()


def _current_stack() -> list:
    if not hasattr(_scope, "targets"):
        _scope.targets = []
    return _scope.targets


class _DefaultTarget(str):
    """``build``'s default target: ``"llvm"``, unless a ``with Target(...):`` block is
    active (TVM's ``tvm.build`` without a target builds for the current one)."""

    __slots__ = ()


DEFAULT_TARGET = _DefaultTarget("llvm")


def current_target() -> Target | None:
    """The target of the innermost ``with target:`` block of this thread, or None."""
    st = _current_stack()
    return st[-1] if st else None


@functools.lru_cache(maxsize=256)
def _parse(spec: str) -> Target:
    words = spec.split()
    if not words:
        raise TargetError(format_error("target", "empty target string",
                                       f"expected one of {_kinds_text()}"))
    backend = _lookup(words[0])
    if backend is None:
        raise TargetError(format_error("target", f"unknown target kind {words[0]!r} in "
                                       f"{spec!r}", f"expected one of {_kinds_text()}"))
    return backend.parse_options(spec, tuple(words[1:]))


class Backend:
    """A code generator and runtime, described as data; subclass, set the class
    attributes, override what differs, and :func:`register_backend` an instance.

    Class attributes
    ----------------
    kind : str
        Name in target strings.
    description : str
        One line for listings.
    is_gpu : bool
        Programs are GPU kernels (loops bound to ``blockIdx``/``threadIdx``).
    option_names : tuple of str
        The ``-options`` the target string accepts (the default ``parse_options`` stores
        ``-name=value`` as ``attrs`` and ``-name`` alone as ``True``).
    build_options : tuple of str
        Keyword options ``polytile.build`` passes on to ``build_module``.
    tunable : bool
        The autotuner can time candidates for it (on this machine).
    device_names : tuple of str
        Device names ``polytile.nd.array(x, device=...)`` accepts for it (GPU backends).
    limits : DeviceLimits
        The device's limits (``parse_options`` may refine them per target).
    """

    kind: ClassVar[str] = ""
    description: ClassVar[str] = ""
    is_gpu: ClassVar[bool] = False
    option_names: ClassVar[tuple] = ()
    build_options: ClassVar[tuple] = ()
    tunable: ClassVar[bool] = False
    device_names: ClassVar[tuple] = ()
    limits: ClassVar[DeviceLimits] = DeviceLimits()

    def parse_options(self, spec: str, options: tuple) -> Target:
        """The :class:`Target` of target string ``spec`` whose option words are
        ``options``.

        Raises
        ------
        TargetError
            For an option not in ``option_names``.
        """
        attrs = {}
        for opt in options:
            name, value = split_option(spec, opt, self.option_names)
            attrs[name.lstrip("-")] = True if value is None else value
        return Target(self.kind, host=not self.is_gpu, options=options, limits=self.limits,
                      attrs=tuple(sorted(attrs.items())))

    def passes(self, target: Target) -> tuple:
        """The backend's own loop-IR passes, ``(name, function)`` pairs run in order on the
        flattened function at the end of ``lower`` (``function(PrimFunc) -> PrimFunc``)."""
        return ()

    def build_module(self, func, target: Target, **options):
        """Compile lowered, flattened ``func`` into a :class:`polytile.targets.Module`.

        Raises
        ------
        BuildError
            When code generation or compilation fails.
        """
        raise NotImplementedError(f"backend {self.kind!r} does not build modules")

    def canonical(self, target: Target) -> str:
        """The target string records name this target by (the tuner's records)."""
        return str(target)

    def implies_feature(self, target: Target, name: str) -> bool:
        """Whether ``target``'s CPU has feature ``name`` without an explicit ``+name``."""
        return False

    def device_api(self):
        """The :class:`polytile.targets.gpu.DeviceAPI` of a GPU backend's device (memory,
        copies, launches); None for backends that run on the host."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind!r}>"


# ------------------------------------------------------------------------------ options
def split_option(spec: str, opt: str, known: tuple) -> tuple:
    """``("-name", value)`` of option word ``opt`` (value None without ``=``).

    Raises
    ------
    TargetError
        When ``-name`` is not in ``known``.
    """
    name, eq, value = opt.partition("=")
    if name not in known:
        raise TargetError(format_error(
            "target", f"unknown option {opt!r} in {spec!r}",
            f"expected one of {', '.join(known)}" if known else "expected no options"))
    return name, (value if eq else None)


def need_value(spec: str, name: str, value: str | None) -> str:
    """``value``, which option ``name`` requires.

    Raises
    ------
    TargetError
        When it is missing or empty.
    """
    if not value:
        raise TargetError(format_error("target", f"option {name!r} in {spec!r} has no value",
                                       f"expected {name}=<value>"))
    return value


def no_value(name: str, value: str | None) -> None:
    """Refuse a value for flag ``name`` (``-fast-math=1``).

    Raises
    ------
    TargetError
        When ``value`` is not None.
    """
    if value is not None:
        raise TargetError(format_error(
            "target", f"option '{name}' takes no value (got {value!r})",
            f"expected just {name}"))


# ------------------------------------------------------------------------------ registry
def register_backend(backend, *, override: bool = False):
    """Register ``backend`` (a :class:`Backend` instance, or a subclass, instantiated
    without arguments) under its ``kind``; returns its argument, so it also decorates a
    class.

    Raises
    ------
    TargetError
        For something that is not a Backend, a kind that is not a plain name, or a kind
        already registered (unless ``override``).
    """
    b = backend() if isinstance(backend, type) else backend
    if not isinstance(b, Backend):
        raise TargetError(format_error("register_backend", f"got {type(b).__name__} {b!r}",
                                       "expected a polytile.backend.Backend"))
    kind = b.kind
    if not (isinstance(kind, str) and kind.replace("_", "").isalnum() and kind[0].isalpha()):
        raise TargetError(format_error("register_backend", f"kind {kind!r} of {b!r}",
                                       "expected a name of letters, digits and '_'"))
    if kind in _REGISTRY and not override:
        raise TargetError(format_error(
            "register_backend", f"kind {kind!r} is already registered ({_REGISTRY[kind]!r})",
            "expected a new kind", hint="pass override=True to replace it"))
    _REGISTRY[kind] = b
    _parse.cache_clear()
    return backend


def unregister_backend(kind: str) -> None:
    """Remove a user-registered backend (built-in ones stay).

    Raises
    ------
    TargetError
        For a built-in or unknown kind.
    """
    if kind in BUILTIN or kind not in _REGISTRY:
        raise TargetError(format_error("unregister_backend", f"kind {kind!r} is "
                                       + ("built in" if kind in BUILTIN else "not registered"),
                                       "expected a kind registered with register_backend"))
    del _REGISTRY[kind]
    _parse.cache_clear()


def _lookup(kind: str) -> Backend | None:
    b = _REGISTRY.get(kind)
    if b is None and kind in BUILTIN:
        importlib.import_module(BUILTIN[kind])  # the module registers its backend
        b = _REGISTRY.get(kind)
    return b


def get_backend(kind: str) -> Backend:
    """The backend registered for ``kind``.

    Raises
    ------
    TargetError
        For an unknown kind.
    """
    b = _lookup(kind)
    if b is None:
        raise TargetError(format_error("target", f"unknown target kind {kind!r}",
                                       f"expected one of {_kinds_text()}"))
    return b


def registered_kinds() -> tuple:
    """Every kind, built-in ones first, then user-registered ones in registration order."""
    return tuple(BUILTIN) + tuple(k for k in _REGISTRY if k not in BUILTIN)


def backends(predicate: Callable[[Backend], bool] | None = None) -> list:
    """The backends of every kind (loading the built-in ones), filtered by ``predicate``."""
    out = [get_backend(k) for k in registered_kinds()]
    return [b for b in out if predicate is None or predicate(b)]


def _kinds_text() -> str:
    return ", ".join(map(repr, registered_kinds()))


__all__ = ["BUILTIN", "Backend", "DeviceLimits", "Target", "backends", "get_backend",
           "need_value", "no_value", "register_backend", "registered_kinds", "split_option",
           "unregister_backend"]
