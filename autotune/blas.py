"""Which BLAS kernel numpy runs here, and whether ``OPENBLAS_CORETYPE`` holds it back.

The "x numpy" that ``polytile tune``, ``polytile run`` and the benchmarks print is only as
honest as numpy's own speed. OpenBLAS picks a kernel for the CPU at load time (its
``DYNAMIC_ARCH`` build), unless the environment variable ``OPENBLAS_CORETYPE`` names one:
some machines set it to work around an old OpenBLAS, and a CPU with AVX-512 then runs the
AVX2 ``Haswell`` kernel. On a 2-core Zen 5 (AVX-512) numpy's float32 1024^3 product ran at
115-119 GFLOP/s pinned to ``Haswell`` and 217 GFLOP/s with OpenBLAS's own choice
(``SkylakeX``): a pinned anchor makes polytile look about 1.8x faster than it is.

:func:`numpy_blas` reads the kernel (threadpoolctl, which asks the loaded library through
``openblas_get_corename``; without threadpoolctl, numpy's build configuration, which names
the library but not the kernel chosen at run time), :func:`cpu_isa` the CPU's vector ISA
(``/proc/cpuinfo``), and :func:`pinned_warning` says, with the fix, when the variable pins
a kernel older than the CPU supports.
"""

from __future__ import annotations

import os

from dataclasses import dataclass

#: Vector ISA levels, oldest first.
ISA_LEVELS = ("sse", "avx", "avx2", "avx512")

#: OpenBLAS x86-64 core names (``OPENBLAS_CORETYPE`` values, ``openblas_get_corename``) by
#: the vector ISA their kernels use; any other name counts as ``sse``.
OPENBLAS_CORE_ISA = {
    "sandybridge": "avx", "bulldozer": "avx", "piledriver": "avx", "steamroller": "avx",
    "excavator": "avx",
    "haswell": "avx2", "zen": "avx2",
    "skylakex": "avx512", "cooperlake": "avx512", "sapphirerapids": "avx512",
}

#: The OpenBLAS core a CPU of each ISA level gets at best (what to expect unpinned).
NATIVE_CORE = {"avx": "Sandybridge", "avx2": "Haswell", "avx512": "SkylakeX"}


@dataclass(frozen=True)
class BlasInfo:
    """numpy's BLAS as loaded in this process.

    Attributes
    ----------
    library : str
        ``"openblas"``, ``"mkl"``, ... or ``"unknown"``.
    version : str
        The library's version, or ``""``.
    kernel : str
        The kernel (OpenBLAS core) chosen at load time, e.g. ``"SkylakeX"``; ``""`` when
        unknown (threadpoolctl not installed, or a library that does not say).
    coretype : str
        The value of ``OPENBLAS_CORETYPE`` in this environment, ``""`` when unset.
    source : str
        Where ``kernel`` came from: ``"threadpoolctl"`` or ``"numpy config"``.
    """

    library: str
    version: str
    kernel: str
    coretype: str
    source: str

    def describe(self) -> str:
        """One line: ``openblas 0.3.31 kernel SkylakeX (threadpoolctl),
        OPENBLAS_CORETYPE unset``."""
        kernel = f"kernel {self.kernel}" if self.kernel else \
            "kernel unknown (threadpoolctl is not installed)"
        ver = f" {self.version}" if self.version else ""
        env = f"OPENBLAS_CORETYPE={self.coretype}" if self.coretype else \
            "OPENBLAS_CORETYPE unset"
        return f"{self.library}{ver} {kernel}, {env}"


def numpy_blas(environ=None) -> BlasInfo:
    """numpy's BLAS library, version and run-time kernel (:class:`BlasInfo`).

    Loads numpy (and with it its BLAS). The kernel comes from threadpoolctl when it is
    installed (a dependency of polytile), else it is left unknown and the library and
    version come from ``numpy.show_config``. ``environ`` (default ``os.environ``) is
    where ``OPENBLAS_CORETYPE`` is read.
    """
    import numpy as np

    env = os.environ if environ is None else environ
    coretype = env.get("OPENBLAS_CORETYPE", "")
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        # scipy (loaded by xgboost) brings an OpenBLAS of its own, often listed first:
        # numpy's is the one in numpy's wheel (numpy.libs), else the only one
        own = [i for i in infos if os.path.basename(os.path.dirname(
            str(i.get("filepath", "")))).startswith("numpy")]
        if own or infos:
            i = (own or infos)[0]
            return BlasInfo(str(i.get("internal_api") or "unknown"),
                            str(i.get("version") or ""), str(i.get("architecture") or ""),
                            coretype, "threadpoolctl")
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name, version = str(blas.get("name", "unknown")), str(blas.get("version", ""))
    except (KeyError, TypeError):  # numpy < 1.25 has no mode="dicts": library unknown
        name, version = "unknown", ""
    return BlasInfo(name, version, "", coretype, "numpy config")


def cpu_isa(cpuinfo: str | None = None) -> str | None:
    """The widest vector ISA level of :data:`ISA_LEVELS` this x86-64 CPU runs OpenBLAS
    kernels of (``avx512`` needs AVX512F, BW, DQ and VL, as OpenBLAS's SkylakeX kernels do;
    ``avx2`` needs FMA too), from the ``flags`` line of ``cpuinfo`` (default: the text of
    ``/proc/cpuinfo``); None when unknown (another OS or architecture)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as fh:
                cpuinfo = fh.read()
        except OSError:
            return None
    flags: set = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if not flags:
        return None
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "avx" if "avx" in flags else "sse"


def pinned_warning(info: BlasInfo, isa: str | None,
                   command: str = "<command>") -> str | None:
    """A warning, with the fix, when ``OPENBLAS_CORETYPE`` (``info.coretype``) makes
    OpenBLAS run a kernel (``info.kernel``, else the variable's value) of an older vector
    ISA than ``isa``, the CPU's (:func:`cpu_isa`): numpy is then slower than this CPU
    allows and every "x numpy" flatters polytile. None when nothing is pinned, the library
    is not OpenBLAS, or the CPU's ISA is unknown. ``command``: the command line to show
    in the fix."""
    if not info.coretype or isa not in ISA_LEVELS or info.library not in ("openblas",
                                                                          "scipy-openblas"):
        return None
    kernel = info.kernel or info.coretype
    k_isa = OPENBLAS_CORE_ISA.get(kernel.lower(), "sse")
    if ISA_LEVELS.index(k_isa) >= ISA_LEVELS.index(isa):
        return None
    return (f"numpy's OpenBLAS runs its {kernel} kernel ({k_isa}) because "
            f"OPENBLAS_CORETYPE={info.coretype} pins it, but this CPU has {isa} "
            f"(OpenBLAS would choose {NATIVE_CORE[isa]} or later): numpy is slower than "
            "it can be here and the ratios to numpy flatter polytile. To compare with "
            "numpy's own kernel, run without it: env -u OPENBLAS_CORETYPE -u "
            f"OPENBLAS_L2_SIZE {command}")


def anchor_note(environ=None, cpuinfo: str | None = None,
                command: str | None = None) -> tuple[str, str | None]:
    """``(description, warning or None)`` of numpy's BLAS here: :meth:`BlasInfo.describe`
    of :func:`numpy_blas` and :func:`pinned_warning` for this CPU (:func:`cpu_isa`), the
    fix shown for ``command`` (default: this process's command line)."""
    import sys

    info = numpy_blas(environ)
    if command is None:
        command = " ".join([os.path.basename(sys.executable)] + sys.argv)
    return info.describe(), pinned_warning(info, cpu_isa(cpuinfo), command)
