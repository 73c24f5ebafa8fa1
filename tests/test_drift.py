"""`lib.saved_runs.drift`: the comparison arithmetic of two settings' saved answers, on toy numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lib.saved_runs.drift import (ANSWER, compare, DECISION, drift_path, drift_table, Pair, PAIRS, setting_named,
                                  SETTINGS)
from lib.intervals import binomial_interval


def _row(request: str, choice: str, probability: float, correct: bool = True, kind: str = DECISION) -> dict:
    return {"kind": "row", "request": request, "type": kind, "choice": choice, "probability": probability,
            "correct": correct, "seconds": 1.0}


REFERENCE = [_row("d1", "card_arrival", 0.5), _row("d2", "top_up", 0.2, correct=False),
             _row("d3", "refund", 0.9), _row("d4", "lost_card", 0.4)]
OTHER = [_row("d1", "card_arrival", 0.5), _row("d2", "top_up_failed", 0.25),
         _row("d3", "refund", 0.86), _row("d4", "lost_card", 0.4), _row("d9", "refund", 0.1)]


def test_compare_reports_largest_p99_and_flips_on_shared_requests() -> None:
    change = compare(REFERENCE, OTHER)
    assert change.compared == 4  # d9 is in one setting only
    assert change.changed == 1  # d2 flipped: its 0.05 compares two answers and is counted as a flip only
    assert change.largest == pytest.approx(0.04)
    # sorted changes of the unflipped [0, 0, 0.04]: the 99th percentile lies 0.98 of the way from 0 to 0.04
    assert change.p99 == pytest.approx(0.98 * 0.04)
    assert change.flips == 1
    assert (change.flip_low, change.flip_high) == pytest.approx(binomial_interval(1, 4)[1:])
    assert (change.right_reference, change.right_other) == (3, 4)


def test_compare_of_identical_runs_is_all_zero() -> None:
    change = compare(REFERENCE, REFERENCE)
    assert (change.changed, change.largest, change.p99, change.flips, change.flip_low) == (0, 0.0, 0.0, 0, 0.0)


def test_compare_refuses_settings_without_a_common_request() -> None:
    with pytest.raises(ValueError, match="no request in common"):
        compare(REFERENCE, [_row("d7", "refund", 0.3)])


def test_pairs_name_known_settings_and_the_server_reads_answers_from_base() -> None:
    names = {setting.name for setting in SETTINGS}
    for pair in PAIRS:
        assert {pair.reference, pair.other, pair.reference_for(ANSWER)} <= names
    server = next(pair for pair in PAIRS if pair.other == "server")
    assert (server.reference_for(DECISION), server.reference_for(ANSWER)) == ("reply", "base")
    assert ANSWER not in setting_named("reply").kinds
    with pytest.raises(ValueError, match="no drift setting"):
        setting_named("warm")


def _save(results_dir: Path, setting: str, rows: list[dict]) -> None:
    header = {"kind": "header", "run": "drift", "setting": setting}
    drift_path(setting, results_dir).write_text("".join(json.dumps(line) + "\n" for line in [header, *rows]))


def test_drift_table_compares_each_kind_against_its_reference(tmp_path: Path) -> None:
    answers = [_row("aq1", "May 3", 0.8, kind=ANSWER), _row("aq2", "Room 12", 0.6, kind=ANSWER)]
    _save(tmp_path, "base", REFERENCE + answers)
    _save(tmp_path, "reply", [_row("d1", "card_arrival", 0.7)])
    _save(tmp_path, "server", [_row("d1", "refund", 0.6), _row("aq1", "May 3", 0.7, kind=ANSWER)])
    table = drift_table([Pair("embedded vs server", "reply", "server", answer_reference="base"),
                         Pair("threads", "base", "threads-2")], results_dir=tmp_path)
    assert table[["requests", "settings", "compared", "flips"]].values.tolist() == [
        ["decisions", "reply / server", 1, 1], ["grounded answers", "base / server", 1, 0]]
    assert table["largest"].tolist() == pytest.approx([float("nan"), 0.1], nan_ok=True)  # d1 flipped


def test_reading_the_top_20_is_compared_on_decisions_only(tmp_path: Path) -> None:
    answers = [_row("aq1", "May 3", 0.8, kind=ANSWER)]
    _save(tmp_path, "base", REFERENCE + answers)
    _save(tmp_path, "reply", [{**row, "probability": row["probability"] + 0.0001} for row in REFERENCE])
    reading = next(pair for pair in PAIRS if pair.other == "reply")
    table = drift_table([reading], results_dir=tmp_path)
    assert table["requests"].tolist() == ["decisions"]
    assert table.loc[0, "compared"] == len(REFERENCE) and table.loc[0, "flips"] == 0
    assert table.loc[0, "largest"] == pytest.approx(0.0001)
