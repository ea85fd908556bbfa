"""Fresh random seeds for every test, printed so that a failure can be replayed."""

import os

import numpy as np
import pytest


@pytest.fixture
def seed() -> int:
    value = os.environ.get("SPARSE_DECODE_TEST_SEED")
    value = int(value) if value else int.from_bytes(os.urandom(4), "little")
    # Shown with the failure report (captured stdout); replay with the variable.
    print(f"seed={value} (replay: SPARSE_DECODE_TEST_SEED={value})")
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
