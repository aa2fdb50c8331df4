import os
import sys

import pytest

# the package and the test helpers import without `pip install` (the GPU machine runs the tests from a checkout)
_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (os.path.dirname(_HERE), _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def pytest_configure(config):
    # also declared in capture/python/pyproject.toml; registered here so any rootdir works
    config.addinivalue_line("markers", "torch: needs torch (and transformers for the model tests); run with -m torch")


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(7)
