"""Confidence intervals on data whose answer is known."""

import math
import random

from evals import stats


def test_constant_scores_have_an_interval_of_width_zero():
    estimate = stats.bootstrap_mean([1.0] * 30)
    assert (estimate.mean, estimate.ci_low, estimate.ci_high, estimate.n) == (1.0, 1.0, 1.0, 30)


def test_no_scores_give_no_numbers():
    assert stats.bootstrap_mean([]).as_dict() == {"mean": None, "ci_low": None, "ci_high": None, "n": 0}


def test_pass_fail_interval_matches_the_normal_approximation():
    # 400 items, 300 passed: p = 0.75, standard error sqrt(p(1-p)/n) = 0.02165,
    # so the 95% interval is about 0.75 ± 0.0424.
    values = [1.0] * 300 + [0.0] * 100
    estimate = stats.bootstrap_mean(values, seed=3)
    half_width = 1.96 * math.sqrt(0.75 * 0.25 / 400)
    assert estimate.mean == 0.75
    assert abs(estimate.ci_low - (0.75 - half_width)) < 0.01
    assert abs(estimate.ci_high - (0.75 + half_width)) < 0.01


def test_the_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = random.Random(11)
    covered = 0
    trials = 200
    for trial in range(trials):
        sample = [1.0 if rng.random() < 0.6 else 0.0 for _ in range(100)]
        estimate = stats.bootstrap_mean(sample, resamples=500, seed=trial)
        covered += estimate.ci_low <= 0.6 <= estimate.ci_high
    assert 0.88 <= covered / trials <= 0.99


def test_the_same_scores_always_give_the_same_interval():
    values = [0.1, 0.5, 0.9, 0.4, 0.7, 0.3]
    assert stats.bootstrap_mean(values, seed=5) == stats.bootstrap_mean(values, seed=5)


def test_a_paired_difference_sees_a_small_consistent_change():
    rng = random.Random(2)
    a = [rng.random() for _ in range(60)]
    b = [x + 0.02 for x in a]  # every item a little better
    paired = stats.bootstrap_difference(a, b, paired=True)
    unpaired = stats.bootstrap_difference(a, b, paired=False)
    assert abs(paired.mean - 0.02) < 1e-9 and stats.significant(paired)
    assert not stats.significant(unpaired)  # item-to-item spread hides it


def test_no_difference_is_not_significant():
    values = [1.0, 0.0] * 20
    assert not stats.significant(stats.bootstrap_difference(values, list(values), paired=True))


def test_percentile_interpolates_between_ranks():
    assert stats.percentile([10, 20, 30, 40], 0.5) == 25
    assert stats.percentile([10, 20, 30, 40], 0.95) == 38.5
    assert stats.percentile([], 0.5) is None
