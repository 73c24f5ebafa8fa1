"""Fitting the assistant on dev (lib.assistant_fitting): its settings, the thresholds from saved dev answers."""
from __future__ import annotations

import ast
import json
import math
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lib.assistant import CalibratedPYes, CostRule
from lib.assistant_fitting import (ASSISTANT_SETTINGS, FINALE_SETTINGS, SUPPORT_SIGNALS, AssistantSettings, FinaleSettings,
                                   cross_fitted_support, decide_rows, dev_answers, fit_answerability,
                                   fit_answerability_gate, fit_cost_rule, fit_support)
from lib.routing import CostThresholds
from lib.saved_runs.questions import ASSISTANT_DEV, ASSISTANT_TEST, ASSISTANT_TEST_PAST_BOUNDARY
from lib.saved_runs.store import RESULTS_DIR


@pytest.mark.parametrize("run", [ASSISTANT_DEV, ASSISTANT_TEST, ASSISTANT_TEST_PAST_BOUNDARY])
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


def finale_rows(n: int = 120, seed: int = 2) -> pd.DataFrame:
    """Saved-run-like rows: P(yes) that is over-confident (right about (1 + P(yes)) / 2 - 0.2 of the time)."""
    rng = np.random.default_rng(seed)
    p_yes = rng.uniform(0, 1, n)
    rows = pd.DataFrame({"id": [f"q{i:03d}" for i in range(n)], "failed_gate": None, "verified": True,
                         "citations_valid": True, "p_yes": p_yes, "top_score": rng.uniform(0.3, 0.7, n),
                         "margin": rng.uniform(0, 0.2, n)})
    rows["right"] = pd.Series(rng.uniform(0, 1, n) < 0.3 + 0.6 * p_yes, dtype=object)
    return rows


def test_cross_fitted_support_scores_each_answer_with_signals_fitted_on_the_other_folds():
    from sklearn.model_selection import StratifiedKFold

    from lib.calibration import IsotonicCalibrator

    rows = finale_rows()
    cross = cross_fitted_support(rows, FINALE_SETTINGS)
    assert list(cross.columns) == list(SUPPORT_SIGNALS) and cross.index.equals(rows.index)
    right = rows["right"].astype(bool).to_numpy()
    expected = np.empty(len(rows))
    folds = StratifiedKFold(FINALE_SETTINGS.folds, shuffle=True, random_state=FINALE_SETTINGS.fold_seed)
    for fit_on, score_on in folds.split(np.zeros(len(rows)), right):
        calibrator = IsotonicCalibrator().fit(rows["p_yes"].to_numpy()[fit_on], right[fit_on])
        expected[score_on] = calibrator.predict(rows["p_yes"].to_numpy()[score_on])
    assert np.array_equal(cross["P(yes), isotonic"].to_numpy(), expected)
    assert np.array_equal(cross["P(yes)"].to_numpy(), rows["p_yes"].to_numpy())


def test_fit_cost_rule_takes_the_best_cross_fitted_signal_and_the_fewest_headings_that_reach_the_target():
    from lib.calibration import brier
    from lib.routing import cost_thresholds

    rows = finale_rows()
    ranks = pd.Series(np.tile([1.0, 2.0, 3.0, math.nan], 30), index=rows["id"].to_numpy())
    fit = fit_cost_rule(rows, ranks, ask_target=0.7)
    right = rows["right"].astype(bool).to_numpy()
    assert fit.signal == min(SUPPORT_SIGNALS, key=lambda name: brier(fit.cross_fitted[name], right))
    expected = cost_thresholds(fit.cross_fitted[fit.signal], right, FINALE_SETTINGS.costs,
                               in_options=ranks.to_numpy() <= fit.n_offer)
    assert fit.rule.thresholds == expected
    helps = fit.offers["ASK offers the gold section"]
    assert helps[fit.n_offer] >= 0.7 and all(helps[k] < 0.7 for k in range(1, fit.n_offer))
    assert fit.n_offer == 3  # three of four answers have the gold section among the best three


def test_decide_rows_hands_over_failed_checks_and_routes_the_rest_by_the_rule():
    rows = finale_rows(8)
    rows.loc[0, "failed_gate"] = "boundary"
    rows.loc[1, "verified"] = False
    rows.loc[2, "citations_valid"] = False
    rows.loc[3, "p_yes"] = math.nan
    rows.loc[4:, "p_yes"] = [0.95, 0.6, 0.2, 0.81]
    rule = CostRule(CalibratedPYes(), CostThresholds(act_threshold=0.8, hand_over_threshold=0.5,
                                                     expected_cost=0.0, fitted_on=1))
    assert decide_rows(rows, rule).tolist() == ["out_of_scope", "hand_over", "hand_over", "hand_over",
                                                "act", "ask", "hand_over", "act"]


# --------------------------------------------------------------------------- the notebooks read the settings

ASSISTANT_NOTEBOOKS = ("18-assistant.ipynb", "20-finale.ipynb")
SETTING_NAMES = ({f.name for f in fields(AssistantSettings)} | {f.name for f in fields(FinaleSettings)}
                 | {"target_precision", "costs", "threshold"})
COST_KEYS = {"act_wrong", "ask", "hand_over", "act_right", "ask_wrong"}


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, (ast.Tuple, ast.List)) and all(map(_literal, node.elts)))


def restated_settings(source: str) -> list[str]:
    """Where code passes or assigns a literal where an assistant setting belongs.

    A keyword argument named like a setting (`n_offer=3`, `target_precision=0.9`), an
    assignment to such a name or its upper-case form (`N_OFFER = 3`), or a dict literal of
    costs (`{"act_wrong": 15.0, ...}`) with a literal value.
    """
    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in SETTING_NAMES and _literal(node.value):
            found.append(f"{node.arg}={ast.unparse(node.value)}")
        elif isinstance(node, ast.Assign) and _literal(node.value):
            found += [target.id for target in node.targets
                      if isinstance(target, ast.Name) and target.id.lower() in SETTING_NAMES]
        elif isinstance(node, ast.Dict):
            found += [f"{key.value!r}: {ast.unparse(value)}" for key, value in zip(node.keys, node.values)
                      if isinstance(key, ast.Constant) and key.value in COST_KEYS and _literal(value)]
    return sorted(found)


def test_the_restated_settings_check_catches_what_it_should():
    assert sorted(restated_settings("A.Assistant(n_sources=2, n_offer=N)\nN_OFFER = 3\nx = F.fit(d, target_precision=0.9)")) == [
        "N_OFFER", "n_sources=2", "target_precision=0.9"]
    assert restated_settings('costs = {"act_wrong": 15.0, "ask": c}\nsweep = {**costs, "ask": 0.5}') == [
        "'act_wrong': 15.0", "'ask': 0.5"]
    assert restated_settings("S = F.ASSISTANT_SETTINGS\nN_OFFER = S.n_offer\nf(n_offer=N_OFFER, k=3)\n%matplotlib inline") == []


@pytest.mark.parametrize("name", ASSISTANT_NOTEBOOKS)
def test_the_assistant_notebooks_read_their_settings_and_never_restate_them(name):
    notebook = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / name).read_text(encoding="utf-8"))
    problems = [f"cell {i}: {found}" for i, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"
                for found in restated_settings("".join(cell["source"]))]
    assert not problems, f"{name} restates settings of lib.assistant_fitting instead of reading them: {problems}"
