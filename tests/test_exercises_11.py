"""The notebook 11 exercise checkers accept the right answer and reject wrong ones."""
import numpy as np

from lib.calibration import HistogramBinningCalibrator
from lib.exercises import is_correct


def test_ex1_isotonic_never_decreases():
    assert is_correct("nb11-ex1", False)[0]
    assert not is_correct("nb11-ex1", True)[0]
    assert not is_correct("nb11-ex1", "no")[0]


def test_ex2_histogram_distinct_values():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(size=770)
    fitted = HistogramBinningCalibrator(n_bins=15).fit(confidence, rng.random(770) < confidence)
    assert is_correct("nb11-ex2", len(np.unique(fitted.predict(np.linspace(0, 1, 10001)))))[0]
    assert not is_correct("nb11-ex2", 770)[0]
    assert not is_correct("nb11-ex2", "fifteen")[0]


def test_ex3_platt():
    assert is_correct("nb11-ex3", "Platt")[0]
    assert is_correct("nb11-ex3", "platt scaling")[0]
    assert not is_correct("nb11-ex3", "isotonic")[0]
