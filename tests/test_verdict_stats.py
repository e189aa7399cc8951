"""Statistics of verdicts: Student t quantiles, Welch intervals on log values, trials needed."""

import math

import pytest

from decodescope.verdict import thresholds as th
from decodescope.verdict.stats import (
    betainc,
    relative_change,
    t_cdf,
    t_quantile,
    trials_needed,
    welch_df,
)

# Two-sided 95 % critical values of Student's t (any statistics table).
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 20: 2.0860,
        30: 2.0423, 120: 1.9799}


@pytest.mark.parametrize(("df", "expected"), sorted(T975.items()))
def test_t_quantile_matches_the_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_is_symmetric_and_tends_to_the_normal():
    assert t_quantile(0.025, 7) == pytest.approx(-t_quantile(0.975, 7))
    assert t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)
    assert t_cdf(0.0, 3.3) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_incomplete_beta_edges_and_a_known_value():
    assert betainc(2, 3, 0.0) == 0.0 and betainc(2, 3, 1.0) == 1.0
    # I_0.5(2, 3) = 11/16 (closed form for integer a, b)
    assert betainc(2, 3, 0.5) == pytest.approx(11 / 16, abs=1e-12)


def test_welch_df_known_case_and_zero_variance():
    # equal variances and n: df = 2n - 2
    assert welch_df(4.0, 5, 4.0, 5) == pytest.approx(8.0)
    assert welch_df(0.0, 3, 0.0, 3) is None


def test_clear_drop_is_beyond_noise_with_an_interval_around_it():
    c = relative_change("decode", [100, 101, 99, 100], [80, 81, 79, 80])
    assert c.status == "down" and c.changed
    assert c.rel == pytest.approx(-0.2, abs=0.002)
    assert c.ci_lo is not None and c.ci_hi is not None and c.rel is not None
    assert c.ci_lo < c.rel < c.ci_hi < 0
    assert "beyond noise" in c.describe() and "−20.0%" in c.describe()


def test_same_values_are_not_significant_and_say_so():
    c = relative_change("decode", [100, 102, 98], [101, 99, 100])
    assert c.status == "not_significant" and not c.changed
    assert c.ci_lo is not None and c.ci_hi is not None
    assert c.ci_lo < 0 < c.ci_hi
    assert c.describe().endswith("not significant")


def test_constant_sides_give_a_point_interval():
    c = relative_change("mal", [3.0, 3.0], [2.0, 2.0])
    assert c.df is None and c.ci_lo == c.ci_hi == pytest.approx(-1 / 3)
    assert c.status == "down"


def test_small_but_real_change_is_below_the_minimum_effect():
    c = relative_change("decode", [100.0, 100.1, 99.9, 100.0], [98.0, 98.1, 97.9, 98.0])
    assert c.status == "below_min_effect" and not c.changed
    loose = relative_change("decode", [100.0, 100.1, 99.9, 100.0], [98.0, 98.1, 97.9, 98.0],
                            min_effect=0.01)
    assert loose.status == "down"


def test_noisy_sides_are_undecidable_with_trials_needed():
    c = relative_change("decode", [100, 60, 140], [90, 130, 55])
    assert c.status == "undecidable"
    assert c.trials_needed is not None and c.trials_needed > 3
    assert "noise too high" in c.describe()


def test_fewer_than_two_values_is_no_data_never_significant():
    c = relative_change("decode", [100.0], [50.0, 51.0])
    assert c.status == "no_data" and c.ci_lo is None and not c.changed
    assert c.rel == pytest.approx(-0.495, abs=0.001)
    # None, zero and NaN are not rates
    c2 = relative_change("decode", [None, 0.0, float("nan"), 5.0], [5.0, 5.0])
    assert c2.status == "no_data" and c2.n_baseline == 1


def test_trials_needed_reaches_the_target_half_width():
    sd = 0.05  # 5 % spread of log values on each side
    n = trials_needed(sd, sd, 0.03)
    assert n is not None
    df, df_before = welch_df(sd**2, n, sd**2, n), welch_df(sd**2, n - 1, sd**2, n - 1)
    assert df is not None and df_before is not None
    half = t_quantile(0.975, df) * math.sqrt(2 * sd**2 / n)
    assert half <= math.log1p(0.03)
    half_before = t_quantile(0.975, df_before) * math.sqrt(2 * sd**2 / (n - 1))
    assert half_before > math.log1p(0.03)
    assert trials_needed(0.0, 0.0, 0.03) == th.MIN_UNITS
    assert trials_needed(5.0, 5.0, 0.001) is None  # more than MAX_TRIALS_SUGGESTED


def test_between_run_spread_widens_the_interval_by_its_known_variance():
    """Two tight runs 5 % apart: significant with no between-run term; with run_sd = 3 % the
    log difference's sd gains sqrt(2)·3 % and the interval reaches 0 (a known component:
    the normal quantile once the trials themselves are constant)."""
    base, cur = [100.0, 100.2, 99.8, 100.1, 99.9], [95.0, 95.2, 94.8, 95.1, 94.9]
    tight = relative_change("decode rate", base, cur)
    wide = relative_change("decode rate", base, cur, run_sd=0.03)
    assert tight.status == "down"
    assert wide.status in ("not_significant", "undecidable")
    assert wide.rel == pytest.approx(tight.rel)
    assert wide.ci_lo < tight.ci_lo and wide.ci_hi > tight.ci_hi
    const = relative_change("decode rate", [100.0, 100.0], [90.0, 90.0], run_sd=0.02)
    half = (math.log(const.ci_hi + 1) - math.log(const.ci_lo + 1)) / 2
    assert half == pytest.approx(1.959964 * math.sqrt(2) * 0.02, rel=1e-6)
    assert const.status == "down"  # −10 % is beyond ±5.5 %


def test_trials_cannot_beat_the_between_run_spread():
    """When z·sqrt(2)·run_sd alone exceeds the target half-width, no number of trials of one
    run reaches it: None (more runs, not more trials)."""
    assert trials_needed(0.02, 0.02, 0.10) is not None
    assert trials_needed(0.02, 0.02, 0.10, run_sd=0.04) is None  # 1.96·1.41·4 % = 11 %
    a, b = trials_needed(0.05, 0.05, 0.10), trials_needed(0.05, 0.05, 0.10, run_sd=0.02)
    assert a is not None and b is not None and b > a
