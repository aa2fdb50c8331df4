import pytest


def pytest_configure(config):
    # also declared in capture/python/pyproject.toml; registered here so any rootdir works
    config.addinivalue_line("markers", "torch: needs torch (and transformers for the model tests); run with -m torch")


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(7)
