"""Fitting the assistant on dev (lib.assistant_fitting): its settings, the thresholds from saved dev answers."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lib.assistant_fitting import (ASSISTANT_SETTINGS, AssistantSettings, dev_answers, fit_answerability,
                                   fit_answerability_gate, fit_support)
from lib.question_runs import ASSISTANT_DEV, ASSISTANT_TEST
from lib.results_store import RESULTS_DIR


@pytest.mark.parametrize("run", [ASSISTANT_DEV, ASSISTANT_TEST])
def test_the_saved_runs_were_made_with_the_settings_the_notebook_reads(run):
    with (RESULTS_DIR / f"{run}.jsonl").open(encoding="utf-8") as lines:
        saved = json.loads(next(lines))["settings"]
    expected = ASSISTANT_SETTINGS.header()
    if run == ASSISTANT_TEST:
        del expected["dev_fit"]  # the test run names the dev run it was fitted on by its fingerprint instead
    assert {key: saved[key] for key in expected} == expected


def test_settings_are_one_frozen_value():
    assert AssistantSettings() == ASSISTANT_SETTINGS
    with pytest.raises(AttributeError):
        ASSISTANT_SETTINGS.n_sources = 3  # type: ignore[misc]


def test_saved_answerability_probabilities_fit_like_traces():
    p_yes = [0.9, 0.85, 0.6, math.nan, 0.95]
    right = [True, True, False, True, True]
    threshold = fit_answerability_gate(p_yes, right, target_precision=0.9).threshold_
    assert 0.6 < threshold <= 0.85


def test_fit_answerability_takes_the_first_target_dev_reaches():
    p_yes = [0.95, 0.9, 0.85, 0.8, 0.6, 0.5]
    right = [False, True, True, True, None, False]  # the surest answer is wrong; None: not judged, left out
    threshold, target, unreachable = fit_answerability(p_yes, right, targets=(1.0, 0.75, 0.5))
    assert (threshold, target, unreachable) == (0.8, 0.75, [1.0])
    threshold, target, unreachable = fit_answerability([0.9, 0.8], [False, False], targets=(0.9, 0.8))
    assert math.isinf(threshold) and target == 0.8 and unreachable == [0.9, 0.8]


def test_the_last_step_is_fitted_on_verified_judged_dev_answers_only():
    rng = np.random.default_rng(1)
    n = 40
    rows = pd.DataFrame({"verified": rng.uniform(size=n) < 0.8, "p_yes": rng.uniform(size=n),
                         "top_score": rng.uniform(0.3, 0.7, n), "margin": rng.uniform(0, 0.2, n)})
    rows["right"] = pd.Series(rows["p_yes"] > 0.4, dtype=object)
    rows.loc[[0, 1], "right"] = None
    rows.loc[2, "p_yes"] = math.nan
    kept = dev_answers(rows)
    assert set(kept.index) == set(rows.index[rows["verified"]]) - {0, 1, 2}
    support = fit_support(rows, 0.9)
    assert support.target_precision == 0.9 and support.coef_[0] > 0 and support.reached_
