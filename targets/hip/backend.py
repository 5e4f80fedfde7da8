"""The ``hip`` backend: AMD Instinct GPUs through HIP C, registered as data.

Target strings: ``hip -mcpu=gfx90a`` (CDNA2, MI200), ``hip -mcpu=gfx942`` (CDNA3, MI300;
the default) or ``hip -mcpu=gfx950`` (CDNA4, MI350), and ``-fast-math``. The limits per
``-mcpu`` (AMD's CDNA2/CDNA3/CDNA4 ISA guides; LLVM's AMDGPUUsage for the LDS sizes):
1024 threads per workgroup, wavefronts of 64 lanes, 64 KiB of LDS per workgroup on
gfx90a and gfx942 and 160 KiB on gfx950, and the MFMA instructions of :mod:`.mfma`.
"""

from __future__ import annotations

from polytile.backend import (Backend, DeviceLimits, Target, need_value, no_value,
                              register_backend, split_option)
from polytile.errors import TargetError, format_error
from polytile.schedule.passes.narrow import narrow_indices

from . import mfma
from .compile import ARCHS
from .runtime import API, HIPDeviceAPI, HIPModule

DEFAULT_MCPU = "gfx942"
_LDS = {"gfx90a": 64 * 1024, "gfx942": 64 * 1024, "gfx950": 160 * 1024}


def hip_limits(mcpu: str) -> DeviceLimits:
    """The :class:`DeviceLimits` of ``mcpu`` (one of ``compile.ARCHS``)."""
    return DeviceLimits(
        max_threads_per_block=1024, max_block_dim=(1024, 1024, 1024),
        max_grid_dim=(2**31 - 1, 65535, 65535), warp_size=mfma.WAVEFRONT,
        shared_bytes_per_block=_LDS[mcpu], static_shared_bytes=_LDS[mcpu],
        vector_load_bytes=16, tensor_intrinsics=mfma.for_arch(mcpu))


HIP_LIMITS = {m: hip_limits(m) for m in ARCHS}


class HIPBackend(Backend):
    """AMD GPUs: the C printer's HIP dialect, hipcc (or clang + llvmlite) for the ISA,
    hip-python to run (untested on hardware)."""

    kind = "hip"
    description = ("AMD Instinct GPUs through HIP C (hipcc; runs through hip-python, "
                   "untested on hardware)")
    is_gpu = True
    option_names = ("-mcpu", "-fast-math")
    device_names = ("hip", "rocm", "amd")
    limits = HIP_LIMITS[DEFAULT_MCPU]

    def parse_options(self, spec: str, options: tuple) -> Target:
        """Parse ``-mcpu`` and ``-fast-math`` (module doc).

        Raises
        ------
        TargetError
            For an unknown option or ``-mcpu``.
        """
        mcpu, fast = DEFAULT_MCPU, False
        for opt in options:
            name, value = split_option(spec, opt, self.option_names)
            if name == "-fast-math":
                no_value(name, value)
                fast = True
                continue
            mcpu = need_value(spec, name, value)
            if mcpu not in ARCHS:
                raise TargetError(format_error("target", f"unknown -mcpu {mcpu!r} in {spec!r}",
                                               f"one of {', '.join(ARCHS)}"))
        return Target("hip", arch=mcpu, opt_level=3, fast_math=fast, host=False,
                      options=options, limits=HIP_LIMITS[mcpu])

    def passes(self, target: Target) -> tuple:
        """32-bit index arithmetic, as on CUDA."""
        return (("narrow_indices", narrow_indices),)

    def build_module(self, func, target: Target, **options) -> HIPModule:
        """Print (and compile where hipcc exists) ``func``, see :class:`.runtime.HIPModule`."""
        return HIPModule(func, target, **options)

    def device_api(self) -> HIPDeviceAPI:
        return API


register_backend(HIPBackend())
