"""Tests for transformer.schedule (chapter 10): the paper's warm-up and inverse square root, and the linear
decay that shares its warm-up."""

import math

import pytest

from transformer.schedule import (
    InverseSqrtSchedule,
    LinearDecaySchedule,
    inverse_sqrt_lr,
)


def test_schedule_rises_linearly_peaks_at_warmup_then_decays_as_inverse_sqrt():
    D, W = 512, 4000
    lr = [inverse_sqrt_lr(s, D, W) for s in range(1, 3 * W)]
    assert max(range(len(lr)), key=lr.__getitem__) + 1 == W
    assert lr[W - 1] == pytest.approx(D**-0.5 * W**-0.5)
    assert lr[99] == pytest.approx(100 * lr[0])  # linear warm-up
    assert lr[4 * W - 1 - 2 * W] == pytest.approx(
        lr[W - 1] * math.sqrt(W / (2 * W))
    )  # 1/sqrt(step) after it
    # LambdaLR multiplies base lr 1 by the schedule, counting steps taken from 0
    assert InverseSqrtSchedule(D, W)(0) == inverse_sqrt_lr(1, D, W)


def test_linear_schedule_shares_the_warm_up_and_peak_then_falls_in_a_line_to_almost_zero():
    D, W, total = 256, 400, 1400
    linear, paper = LinearDecaySchedule(D, W, total), InverseSqrtSchedule(D, W)
    lr = [linear(taken) for taken in range(total)]  # steps 1 .. total
    assert lr[:W] == pytest.approx(
        [paper(taken) for taken in range(W)]
    )  # the same warm-up, the same peak
    assert max(range(total), key=lr.__getitem__) + 1 == W
    falls = [a - b for a, b in zip(lr[W - 1 :], lr[W:])]
    assert (
        min(falls) == pytest.approx(max(falls)) and min(falls) > 0
    )  # a straight line down
    assert lr[-1] == pytest.approx(
        lr[W - 1] / (total - W + 1)
    )  # the last step still moves, a little
    assert lr[total // 2] < paper(
        total // 2
    )  # below the inverse square root on the way
