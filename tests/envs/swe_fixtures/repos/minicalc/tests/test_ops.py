import pytest

from minicalc.ops import clamp, mean, running_total


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_edges():
    assert clamp(-3, 0, 10) == 0
    assert clamp(11, 0, 10) == 10


@pytest.mark.parametrize("xs,want", [([1, 2, 3], 2.0), ([4], 4.0)])
def test_mean(xs, want):
    assert mean(xs) == want


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


class TestRunning:
    def test_running_total(self):
        assert running_total([1, 2, 3]) == [1, 3, 6]
