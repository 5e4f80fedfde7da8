"""Fixtures shared by the te/ and schedule/ tests (helpers live in ``tests/helpers.py``)."""

from __future__ import annotations

import pytest
from helpers import BACKENDS, require_backend


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Each numeric test runs on the interpreter and on the LLVM backend (skipped until
    ``polytile.build`` works on a trivial compute)."""
    require_backend(request.param)
    return request.param
