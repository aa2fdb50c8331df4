import numpy as np
import pytest

from bitalign_capture.logprobs import Pending, log_softmax


def test_pending_resolves_only_the_next_position():
    p = Pending()
    row = log_softmax(np.array([1.0, 2.0, 3.0], np.float32))
    p.hold(4, 9, row)
    assert p.resolve(4, 11, 0) is None and len(p) == 0  # the sequence moved on: dropped
    p.hold(4, 9, row)
    assert p.resolve(5, 10, 0) is None and len(p) == 1  # another sequence: untouched
    pos, lp = p.resolve(4, 10, 2)
    assert pos == 9 and lp == row[2] and len(p) == 0


def test_take_and_bad_token():
    p = Pending()
    p.hold(1, 3, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        p.take(1, 4)
    p.hold(1, 3, np.log(np.full(4, 0.25, np.float32)))
    assert p.take(1, 2) == (3, np.float32(np.log(np.float32(0.25))))
    assert p.take(1, 2) is None


def test_log_softmax_reference():
    x = np.array([[0.0, 0.0], [1000.0, 0.0]], np.float32)
    y = log_softmax(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(np.exp(y).sum(axis=1), 1.0, rtol=1e-6)
    assert y[1, 0] == 0.0 and np.isfinite(y).all()
