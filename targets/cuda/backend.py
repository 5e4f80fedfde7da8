"""The ``cuda`` backend: NVIDIA GPUs through CUDA C, registered as data.

Options of ``cuda`` target strings: ``-arch=sm_<NN>`` (default: the compute capability of
device 0, else ``sm_90``), ``-fast-math`` (``__expf``-style intrinsics and
``--use_fast_math``) and ``-min-blocks=<N>`` (``__launch_bounds__(threads, N)`` on every
kernel of the module, 1 to 32: ptxas keeps the registers per thread low enough for N
blocks per SM, e.g. 3 blocks of 128 threads at 168 registers). Build options: ``compiler`` (``"auto"``, ``"nvrtc"``, ``"nvcc"``)
and ``cache_dir`` (the cubin cache), see :class:`~.runtime.CUDAModule`.

The device limits are those of compute capability 9.0 (CUDA C Programming Guide,
"Technical Specifications per Compute Capability"); shared memory is the 48 KiB a block
may declare statically (more needs an opt-in per kernel, which the printer uses for
hand-written loop IR and for software-pipelined kernels, up to the 227 KiB of sm_90).
"""

from __future__ import annotations

import re

from polytile.backend import (Backend, DeviceLimits, Target, need_value, no_value,
                              register_backend, split_option)
from polytile.errors import TargetError, format_error
from polytile.schedule.passes.narrow import narrow_indices
from polytile.schedule.passes.elide_barriers import elide_barriers
from polytile.schedule.passes.group_guards import group_guards
from polytile.schedule.passes.warp_reduce import warp_reduce

from .runtime import API, CUDADeviceAPI, CUDAModule

CUDA_LIMITS = DeviceLimits(
    max_threads_per_block=1024, max_block_dim=(1024, 1024, 64),
    max_grid_dim=(2**31 - 1, 65535, 65535), warp_size=32,
    shared_bytes_per_block=48 * 1024, static_shared_bytes=48 * 1024,
    shared_bytes_optin=227 * 1024, async_copy_bytes=16,
    registers_per_block=64 * 1024, vector_bytes=0, vector_load_bytes=16)


class CUDABackend(Backend):
    """NVIDIA GPUs: the C printer's CUDA dialect, NVRTC or nvcc, the driver API."""

    kind = "cuda"
    description = "NVIDIA GPUs through CUDA C (NVRTC or nvcc), run with the driver API"
    is_gpu = True
    option_names = ("-arch", "-fast-math", "-min-blocks")
    build_options = ("compiler", "cache_dir")
    device_names = ("cuda", "gpu", "nvidia")
    limits = CUDA_LIMITS
    tunable = True  # timed in a GPU runner process (polytile.autotune.gpu_runner)

    def parse_options(self, spec: str, options: tuple) -> Target:
        """Parse ``-arch``, ``-fast-math`` and ``-min-blocks`` (module doc).

        Raises
        ------
        TargetError
            For an unknown option or a malformed architecture.
        """
        arch = ""
        fast = False
        attrs = ()
        for opt in options:
            name, value = split_option(spec, opt, self.option_names)
            if name == "-fast-math":
                no_value(name, value)
                fast = True
                continue
            if name == "-min-blocks":
                blocks = need_value(spec, name, value)
                if not (blocks.isdigit() and 1 <= int(blocks) <= 32):
                    raise TargetError(format_error(
                        "target", f"bad blocks per SM {blocks!r} in {spec!r}",
                        "expected -min-blocks=<N> with 1 <= N <= 32"))
                attrs = (("min_blocks", int(blocks)),)
                continue
            arch = need_value(spec, name, value)
            if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
                raise TargetError(format_error("target", f"bad GPU architecture {arch!r} in "
                                               f"{spec!r}", "expected sm_<NN>, e.g. -arch=sm_90"))
        return Target("cuda", arch=arch, opt_level=3, fast_math=fast, host=False,
                      options=options, limits=self.limits, attrs=attrs)

    def passes(self, target: Target) -> tuple:
        """The serial combines of cross-thread reductions become warp shuffles
        (:mod:`~polytile.schedule.passes.warp_reduce`); barriers that order no access of
        one thread before another's go (:mod:`~polytile.schedule.passes.elide_barriers`);
        GPUs run 32-bit index arithmetic natively (a no-op for buffers of 2**30 elements or
        more); the guarded statements of a ragged register tile share one branch per guard
        (:mod:`~polytile.schedule.passes.group_guards`)."""
        return (("warp_reduce", warp_reduce), ("elide_barriers", elide_barriers),
                ("narrow_indices", narrow_indices), ("group_guards", group_guards))

    def build_module(self, func, target: Target, **options) -> CUDAModule:
        """Print and compile ``func`` (see :class:`~.runtime.CUDAModule`)."""
        return CUDAModule(func, target, **options)

    def device_api(self) -> CUDADeviceAPI:
        return API


register_backend(CUDABackend())
