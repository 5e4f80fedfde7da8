"""The HIP backend (AMD GPUs): C printer dialect, MFMA tensor intrinsics, hipcc build,
hip-python runtime (untested on hardware: the project has no AMD GPU).

``polytile.build(s, args, target="hip -mcpu=gfx942")`` gives a :class:`~.runtime.HIPModule`
whose ``get_source()`` is HIP C; :mod:`.compile` compiles it without a GPU; :mod:`.mfma`
holds the matrix-core intrinsics and their lane layouts. :mod:`.backend` registers the
``hip`` kind.
"""

from __future__ import annotations

from .backend import HIP_LIMITS, HIPBackend, hip_limits
from .dialect import HIPDialect
from .runtime import API, HIPDeviceAPI, HIPModule

__all__ = ["API", "HIPBackend", "HIPDeviceAPI", "HIPDialect", "HIPModule", "HIP_LIMITS",
           "hip_limits"]
