"""Shared fixtures; the instance generators live in mentored.testing."""

from __future__ import annotations

import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    # A seed per test, stable across runs and processes, independent of test order.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
