"""``polytile.nd``: device arrays for GPU functions (TVM's ``tvm.nd``).

``polytile.nd.array(np_array, device="cuda")`` copies to CUDA device 0 and returns an
:class:`NDArray` (``.numpy()`` copies back); ``polytile.nd.empty(shape, dtype, device)``
allocates; ``polytile.nd.device("cuda")`` names the device. Functions built for ``cuda``
also accept torch/cupy arrays (``__dlpack__``, ``__cuda_array_interface__``) directly;
functions built for ``llvm`` take numpy arrays. Importing this module needs no GPU and no
cuda-python.
"""

from __future__ import annotations

from polytile.targets.cuda.ndarray import Device, NDArray, array, device, empty


def cuda(dev_id: int = 0) -> Device:
    """``device("cuda", dev_id)`` (TVM's ``tvm.cuda(0)``)."""
    return device("cuda", dev_id)


__all__ = ["Device", "NDArray", "array", "cuda", "device", "empty"]
