"""Fitting the assistant on dev: its settings, its gates and thresholds, and the assistant built with them.

Every threshold of `lib.assistant.Assistant` is fitted on the dev questions, never on test:
the boundary and retrieval gates with `fit_gates` (the same fitting as notebook 02), the ask
threshold with `fit_ask_gate`, the answerability threshold with `fit_answerability_gate` on
dev traces (or their saved P(yes), `fit_answerability` trying the targets in order), the last
step's `SupportModel` with `fit_support` on the judged dev answers (`dev_answers`), and the
perplexity ceiling with `fit_perplexity_ceiling`.

`ASSISTANT_SETTINGS` holds the assistant's settings once (sections shown, headings offered,
answer budget, the dev targets): notebook 18 and the saved runs of `lib.saved_runs.questions` both
read them, and `build_assistant` builds the assistant exactly as the notebook does.

The finale's assistant (notebook 20) keeps the boundary and the code checks and replaces the
retrieval gate and the answerability threshold with one `lib.assistant.CostRule`: `fit_cost_rule`
chooses the support signal with the lowest cross-fitted Brier score on the dev answers
(`cross_fitted_support`: P(yes) raw, Platt- or isotonic-calibrated, or the `SupportModel`),
then the act and ask thresholds with `lib.routing.cost_thresholds` and `FINALE_SETTINGS`'s
cost table, and the number of headings an ASK offers. `decide_rows` applies the rule to a
saved run's rows, exactly as `Assistant.decide` does to a trace.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from lib import retrieval as R
from lib.assistant import Assistant, CalibratedPYes, CostRule, SupportModel, SupportSignal, Trace
from lib.calibration import IsotonicCalibrator, PlattCalibrator, brier, ece
from lib.datasets import gold_section_ids, load_corpus, load_questions, load_scope_examples
from lib.indexes import DenseIndex, chunk_by_heading, gold_ranks
from lib.backends.protocol import LLM
from lib.actions import Action
from lib.routing import cost_thresholds
from lib.selective import Gate, fit_threshold

__all__ = [
    "AssistantSettings", "ASSISTANT_SETTINGS", "fit_gates", "fit_ask_gate", "fit_answerability_gate",
    "fit_answerability", "dev_answers", "fit_support", "fit_perplexity_ceiling", "AssistantSetup",
    "build_assistant", "FinaleSettings", "FINALE_SETTINGS", "SUPPORT_SIGNALS", "checked_answers",
    "cross_fitted_support", "FinaleFit", "fit_cost_rule", "decide_rows",
    "build_finale",
]


@dataclass(frozen=True)
class AssistantSettings:
    """The assistant of notebook 18: what it shows and offers, and the targets its thresholds are fitted to on dev."""

    n_sources: int = 2
    """Sections shown to the model."""
    n_offer: int = 3
    """Section headings an ASK offers."""
    max_tokens: int = 200
    """Budget of the grounded answer."""
    boundary_target: float = 0.95
    """Target precision of the boundary gate (in scope lets in)."""
    retrieval_target: float = 0.90
    """Target precision of the retrieval gate (answerable grounds)."""
    ask_target: float = 0.7
    """Target precision of the ask gate (asking helps)."""
    answerability_targets: tuple[float, ...] = (0.95, 0.9, 0.8)
    """Target precisions of the answerability threshold, tried in order until dev reaches one."""
    dev_fit_seed: int = 0
    """Seed of the order in which the saved dev run answers the dev questions past the boundary."""

    def header(self) -> dict[str, object]:
        """The settings as a saved run's header keeps them (JSON values; the dev questions it answers named)."""
        return {**asdict(self), "answerability_targets": list(self.answerability_targets),
                "dev_fit": "past the boundary"}


ASSISTANT_SETTINGS = AssistantSettings()
"""The one set of settings notebook 18 and its saved runs use."""


def fit_gates(
    dev: pd.DataFrame,
    scope: R.Scope,
    *,
    boundary_target: float = 0.95,
    retrieval_target: float = 0.90,
) -> tuple[Gate, R.RetrievalGate]:
    """Fit the boundary and retrieval gates on dev questions, as notebook 02 does.

    Boundary: `Gate(boundary_target)` on `boundary_scores`, positive = type is not
    out_of_scope. Retrieval: `RetrievalGate(retrieval_target)` on the `retrieval_features`
    of the dev questions that pass the boundary, positive = type is answerable.

    Args:
        dev: the dev questions (columns question, type). Never pass test questions.
        scope: the index and the in-scope examples the gates look at.
    """
    b = R.boundary_scores(dev["question"], scope.example_questions, scope.embed)
    boundary_gate = Gate(target_precision=boundary_target).fit(b, (dev["type"] != "out_of_scope").to_numpy())
    inside = dev[boundary_gate.predict(b)]
    features = R.retrieval_features(scope.index, inside)
    retrieval_gate = R.RetrievalGate(target_precision=retrieval_target).fit(
        features, (inside["type"] == "answerable").to_numpy())
    return boundary_gate, retrieval_gate


def fit_ask_gate(
    dev: pd.DataFrame,
    boundary_gate: Gate,
    retrieval_gate: R.RetrievalGate,
    scope: R.Scope,
    *,
    n_offer: int = 3,
    target_precision: float = 0.8,
) -> Gate:
    """The threshold on the top retrieval score above which a failed retrieval gate means ASK.

    Fitted on the dev questions that pass the boundary but fail the retrieval gate (the
    only ones the rule applies to). Positive = asking would help: the question is
    answerable and one of its gold sections is among the `n_offer` headings offered.
    The threshold is the lowest top score whose ASK precision on dev reaches
    `target_precision` (`lib.selective.Gate`); below it nothing is close -> HAND_OVER.
    """
    verdicts = R.route_many(dev["question"], boundary_gate, retrieval_gate, scope)
    rows = [i for i, v in enumerate(verdicts) if v.failed_gate in ("retrieval_score", "retrieval_margin")]
    if not rows:
        raise ValueError("fit_ask_gate: no dev question fails the retrieval gate after passing the boundary")
    subset = dev.iloc[rows]
    helps = [row.type == "answerable"
             and bool(set(gold_section_ids(row.section_ids)) & {s for s, _ in verdicts[i].ranked_sections[:n_offer]})
             for i, row in zip(rows, subset.itertuples())]
    top = [verdicts[i].top_score for i in rows]
    return Gate(target_precision=target_precision).fit(top, helps)


def fit_answerability_gate(traces: Sequence[Trace | float], correct: Sequence[bool], *,
                           target_precision: float = 0.9) -> Gate:
    """The gate on P(yes) above which ACT is right at least `target_precision` of the time on dev.

    Uses only the traces the threshold decides: those whose grounded answer had every
    quote verified (and so got an answerability probability). `traces` may also hold the
    P(yes) values themselves (as a saved run keeps them; NaN where no probe was asked).
    `correct[i]` says whether trace i's answer is right (see `answer_is_right`; unjudged rows
    should be left out beforehand). Returns the fitted `lib.selective.Gate`: its `threshold_`
    is the assistant's `answerability_threshold`, and `reached_` is False when no threshold
    reaches the target (the threshold is then `inf`: the assistant never answers).
    """
    if len(traces) != len(correct):
        raise ValueError(f"traces ({len(traces)}) and correct ({len(correct)}) differ in length")
    probabilities = [t if isinstance(t, (int, float, np.floating)) else
                     (t.answerability.probability if t.answerability is not None else math.nan) for t in traces]
    rows = [(float(p), bool(c)) for p, c in zip(probabilities, correct) if p is not None and np.isfinite(p)]
    if not rows:
        raise ValueError("fit_answerability_gate: no trace has an answerability probability "
                         "(none passed the gates with verified quotes)")
    scores, right = zip(*rows)
    return Gate(target_precision=target_precision).fit(np.array(scores), np.array(right))


@dataclass
class AssistantSetup:
    """Notebook 18's assistant with every gate fitted on dev, and the questions it is measured on."""

    assistant: Assistant
    dev: pd.DataFrame
    test: pd.DataFrame
    dev_fit: pd.DataFrame
    test_past_boundary: pd.DataFrame


def build_assistant(llm: LLM, embed: Callable[[Sequence[str]], np.ndarray] | None = None) -> AssistantSetup:
    """Fit the three gates on dev and build the assistant exactly as notebook 18 does (threshold not fitted).

    `dev_fit` holds every dev question that passes the boundary, in a seeded random order: the
    saved dev run answers each of them whatever the retrieval gate says, so that P(yes) and
    the retrieval scores can be fitted together over their whole range. `embed` (default
    `llm.embed`) embeds the sections, examples and questions: a notebook passes saved vectors'
    `embed` so that it needs no embedding model. `test_past_boundary`
    holds the test questions that pass the boundary, in the same kind of order: the finale's
    test run answers each of them, as the assistant of the finale (notebook 20) does.
    """
    s = ASSISTANT_SETTINGS
    sections = load_corpus()
    dev, test = load_questions("dev"), load_questions("test")
    embed = embed or llm.embed
    scope = R.Scope(DenseIndex(chunk_by_heading(sections), embed), embed(load_scope_examples()))
    boundary, retrieval = fit_gates(dev, scope, boundary_target=s.boundary_target, retrieval_target=s.retrieval_target)
    ask = fit_ask_gate(dev, boundary, retrieval, scope, n_offer=s.n_offer, target_precision=s.ask_target)
    assistant = Assistant(llm=llm, scope=scope, sections={x.id: x.text for x in sections},
                          boundary_gate=boundary, retrieval_gate=retrieval, ask_gate=ask,
                          n_sources=s.n_sources, n_offer=s.n_offer, max_tokens=s.max_tokens)
    past_boundary = [_past_boundary(questions, boundary, retrieval, scope).sample(frac=1.0, random_state=s.dev_fit_seed)
                     for questions in (dev, test)]
    return AssistantSetup(assistant, dev, test, *past_boundary)


def _past_boundary(questions: pd.DataFrame, boundary: Gate, retrieval: R.RetrievalGate,
                   scope: R.Scope) -> pd.DataFrame:
    """The questions the boundary gate lets in, in their given order."""
    routes = R.route_many(questions["question"], boundary, retrieval, scope)
    return questions[[v.failed_gate != "boundary" for v in routes]]


def fit_answerability(p_yes: Sequence[float], correct: Sequence[bool | None],
                      targets: Sequence[float] = ASSISTANT_SETTINGS.answerability_targets,
                      ) -> tuple[float, float, list[float]]:
    """The answerability threshold from dev answers: the first target precision dev can reach.

    Rows whose answer was not judged (`correct` None) are left out. Returns (threshold,
    target reached, targets that were not reachable). If none is reachable, the threshold of
    the last target (above every probability: the assistant never answers).
    """
    judged = [(p, bool(r)) for p, r in zip(p_yes, correct) if r is not None]
    unreachable: list[float] = []
    for target in targets:
        gate = fit_answerability_gate([p for p, _ in judged], [r for _, r in judged], target_precision=target)
        if gate.reached_:
            return gate.threshold_, target, unreachable
        unreachable.append(target)
    return gate.threshold_, targets[-1], unreachable


def dev_answers(dev_rows: pd.DataFrame) -> pd.DataFrame:
    """The dev answers the last step is fitted on: every quote verified, a P(yes), and judged right or wrong."""
    verified = dev_rows["verified"].astype(bool) & dev_rows["p_yes"].notna() & dev_rows["right"].notna()
    return dev_rows[verified]


def fit_support(dev_rows: pd.DataFrame, target: float) -> SupportModel:
    """The `lib.assistant.SupportModel` of notebook 18: fitted on `dev_answers(dev_rows)` at precision `target`."""
    answers = dev_answers(dev_rows)
    return SupportModel(target_precision=target).fit(answers["p_yes"], answers["top_score"], answers["margin"],
                                                    answers["right"].astype(bool))


def fit_perplexity_ceiling(perplexities: Sequence[float], correct: Sequence[bool], *,
                           target_precision: float = 0.9) -> float:
    """The highest answer perplexity at which the answers kept are right at least `target_precision` of the time.

    perplexities: shape (n,), one per judged dev answer (NaN where an answer has no tokens,
    which never counts as kept); correct: shape (n,). Fitted as the lowest threshold on the
    token confidence 1 / perplexity with `lib.selective.fit_threshold`, returned as the
    perplexity ceiling 1 / threshold. If no threshold reaches the target it warns
    (`UnreachableTargetWarning`) and the ceiling is below every perplexity.
    """
    values = np.asarray(perplexities, dtype=float)
    if values.shape != np.shape(correct) or values.ndim != 1:
        raise ValueError(f"perplexities {values.shape} and correct {np.shape(correct)} must be 1-D and match")
    if (values[np.isfinite(values)] < 1.0).any():
        raise ValueError("a perplexity is at least 1")
    threshold = fit_threshold(1.0 / values, np.asarray(correct, dtype=bool), target_precision)
    return 1.0 / threshold


# --------------------------------------------------------------------------- the finale's last step


@dataclass(frozen=True)
class FinaleSettings:
    """The finale's assistant (notebook 20): its cost table and how its last step is chosen on dev."""

    cost_table: tuple[tuple[str, float], ...] = (("act_wrong", 15.0), ("ask", 2.0), ("hand_over", 4.0))
    """Minutes: a wrong answer and a hand-over cost what they cost in notebook 17 (15 and 4 minutes of
    staff time); a question back costs the student 2 minutes, to pick a heading and find the answer in
    that section, not 17's half minute (there, picking an intent settles the request). An ASK whose
    headings miss the right section costs the question and the hand-over that follows."""
    folds: int = 5
    """Folds of the cross-fitting that scores each support signal on dev answers it was not fitted on."""
    fold_seed: int = 0
    """Seed of the folds."""
    max_offer: int = 6
    """The most section headings an ASK may offer."""

    @property
    def costs(self) -> dict[str, float]:
        """The cost table as `lib.routing.cost_thresholds` takes it."""
        return dict(self.cost_table)


FINALE_SETTINGS = FinaleSettings()
"""The one set of settings notebook 20 and `fit_cost_rule` use."""

SUPPORT_SIGNALS: tuple[str, ...] = ("P(yes)", "P(yes), Platt", "P(yes), isotonic", "support model")
"""The candidate support signals' names, in the order they are scored (`_new_signal` builds each)."""


def _new_signal(name: str) -> SupportSignal:
    """An unfitted support signal of this name (see `SUPPORT_SIGNALS`)."""
    if name not in SUPPORT_SIGNALS:
        raise ValueError(f"no support signal {name!r}; the signals are {list(SUPPORT_SIGNALS)}")
    if name == "support model":
        return SupportModel(threshold=0.5)  # its threshold is not used: the cost rule sets its own
    calibrators = {"P(yes)": None, "P(yes), Platt": PlattCalibrator(), "P(yes), isotonic": IsotonicCalibrator()}
    return CalibratedPYes(calibrators[name])


def _fitted_signal(name: str, answers: pd.DataFrame) -> SupportSignal:
    signal = _new_signal(name)
    signal.fit(answers["p_yes"], answers["top_score"], answers["margin"], answers["right"].astype(bool))  # type: ignore[attr-defined]
    return signal


def checked_answers(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows the cost rule decides: every quote verified, every citation valid, and a P(yes).

    `rows` are a saved run's (columns verified, citations_valid, p_yes); the others are
    handed over by code before any probability is read.
    """
    passed = rows["verified"].astype(bool) & rows["citations_valid"].fillna(False).astype(bool) & rows["p_yes"].notna()
    return rows[passed]


def cross_fitted_support(answers: pd.DataFrame, settings: FinaleSettings = FINALE_SETTINGS) -> pd.DataFrame:
    """Each support signal's P(right) for each judged answer, from a fit on the other folds.

    answers: judged rows of `checked_answers` (columns p_yes, top_score, margin, right).
    Returns shape (n, 4), one column per `SUPPORT_SIGNALS` name, same index: an honest
    reliability on dev, since no answer is scored by a signal fitted on it. The folds are
    stratified by right/wrong and seeded (`settings.folds`, `settings.fold_seed`).
    """
    from sklearn.model_selection import StratifiedKFold

    right = answers["right"].astype(bool).to_numpy()
    out = pd.DataFrame(index=answers.index, columns=list(SUPPORT_SIGNALS), dtype=float)
    folds = StratifiedKFold(n_splits=settings.folds, shuffle=True, random_state=settings.fold_seed)
    for fit_rows, score_rows in folds.split(np.zeros(len(right)), right):
        fit_on, score_on = answers.iloc[fit_rows], answers.iloc[score_rows]
        for name in SUPPORT_SIGNALS:
            signal = _fitted_signal(name, fit_on)
            out.iloc[score_rows, out.columns.get_loc(name)] = signal.probability(
                score_on["p_yes"], score_on["top_score"], score_on["margin"])
    return out


@dataclass
class FinaleFit:
    """What `fit_cost_rule` chose on dev, and the evidence it chose it on.

    rule: the `CostRule` (signal refitted on every judged dev answer); signal: its name;
    n_offer: headings an ASK offers; candidates: per signal, the cross-fitted Brier score and
    ECE on dev; cross_fitted: `cross_fitted_support`'s table; offers: per number of headings
    k, the thresholds, dev cost and how often an ASK offers the gold section.
    """

    rule: CostRule
    signal: str
    n_offer: int
    candidates: pd.DataFrame
    cross_fitted: pd.DataFrame
    offers: pd.DataFrame


def fit_cost_rule(dev_rows: pd.DataFrame, ranks: pd.Series, *, ask_target: float = ASSISTANT_SETTINGS.ask_target,
                  settings: FinaleSettings = FINALE_SETTINGS) -> FinaleFit:
    """Choose the finale's last step on the judged dev answers that pass the code checks.

    1. The signal: the `SUPPORT_SIGNALS` entry with the lowest cross-fitted Brier score.
    2. For k = 1 .. `settings.max_offer` headings offered: the act and ask thresholds of
       `lib.routing.cost_thresholds` on the cross-fitted P(right), where an ASK helps when
       the gold section is among the k best (`ranks`: the `gold_rank` of `lib.indexes.gold_ranks`
       by question id; NaN, never offered, for a question without a gold section). k is the smallest whose
       ASKs on dev offer the gold section at least `ask_target` of the time (or that asks
       nothing); if none does, `settings.max_offer`.
    3. The signal refitted on every judged dev answer, with those thresholds.
    """
    answers = checked_answers(dev_rows)
    answers = answers[answers["right"].notna()]
    right = answers["right"].astype(bool).to_numpy()
    cross = cross_fitted_support(answers, settings)
    candidates = pd.DataFrame([{"signal": name, "brier": brier(cross[name], right), "ece": ece(cross[name], right)}
                               for name in SUPPORT_SIGNALS]).set_index("signal")
    name = str(candidates["brier"].idxmin())
    confidence = cross[name].to_numpy()
    answer_ranks = ranks.reindex(answers["id"]).to_numpy()
    offers, chosen = [], None
    for k in range(1, settings.max_offer + 1):
        in_options = answer_ranks <= k
        fitted = cost_thresholds(confidence, right, settings.costs, in_options=in_options)
        asked = (confidence >= fitted.hand_over_threshold) & (confidence < fitted.act_threshold)
        helps = float(in_options[asked].mean()) if asked.any() else math.nan
        offers.append({"headings offered": k, "act threshold": fitted.act_threshold,
                       "ask threshold": fitted.hand_over_threshold, "dev cost per answer": fitted.expected_cost,
                       "asked": int(asked.sum()), "ASK offers the gold section": helps})
        if chosen is None and (not asked.any() or helps >= ask_target):
            chosen = (k, fitted)
    if chosen is None:
        chosen = (settings.max_offer, fitted)
    n_offer, thresholds = chosen
    rule = CostRule(_fitted_signal(name, answers), thresholds)
    return FinaleFit(rule, name, n_offer, candidates, cross, pd.DataFrame(offers).set_index("headings offered"))


def decide_rows(rows: pd.DataFrame, rule: CostRule) -> np.ndarray:
    """The finale's decision for each saved row, as `Assistant.decide` makes it with `cost_rule` set.

    rows: a saved run's rows (failed_gate, verified, citations_valid, p_yes, top_score,
    margin). Returns `lib.actions.Action` values as strings, shape (n,): OUT_OF_SCOPE at the
    boundary, HAND_OVER when a quote or citation does not hold, else the cost rule's route.
    """
    decisions = np.full(len(rows), Action.HAND_OVER.value, dtype=object)
    decisions[(rows["failed_gate"] == "boundary").to_numpy()] = Action.OUT_OF_SCOPE.value
    checked = checked_answers(rows[rows["failed_gate"] != "boundary"])
    if len(checked):
        routed = rule.route(checked["p_yes"], checked["top_score"], checked["margin"])
        decisions[rows.index.get_indexer(checked.index)] = [a.value for a in routed]
    return decisions


def build_finale(llm: LLM, dev_rows: pd.DataFrame, embed: Callable[[Sequence[str]], np.ndarray] | None = None,
                 settings: FinaleSettings = FINALE_SETTINGS) -> tuple[AssistantSetup, FinaleFit, pd.Series]:
    """Notebook 20's assistant: notebook 18's (`build_assistant`) with the cost rule in place of the retrieval gate.

    The cost rule is fitted on `dev_rows` (the saved dev run's rows) by `fit_cost_rule`, and the
    assistant offers its `n_offer` headings when it asks. Returns the setup, the fit, and the
    rank of the first gold section of every answerable dev and test question (`lib.indexes.gold_ranks`,
    by question id).
    """
    setup = build_assistant(llm, embed)
    a = setup.assistant
    ranks = gold_ranks(a.scope.index, pd.concat([setup.dev, setup.test])).set_index("id")["gold_rank"]
    fit = fit_cost_rule(dev_rows, ranks, settings=settings)
    setup.assistant = replace(a, cost_rule=fit.rule, n_offer=fit.n_offer)
    return setup, fit, ranks
