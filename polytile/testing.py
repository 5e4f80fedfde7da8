"""Test helpers under TVM's ``tvm.testing`` names."""

from __future__ import annotations

import numpy as np


def assert_allclose(actual, desired, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """``numpy.testing.assert_allclose`` on arrays or objects with ``.numpy()``.

    Raises
    ------
    AssertionError
        When the arrays differ beyond the tolerances.
    """
    def host(x):
        return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x

    np.testing.assert_allclose(host(actual), host(desired), rtol=rtol, atol=atol, verbose=True)
