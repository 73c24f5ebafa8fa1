"""Fitting the assistant on dev: its settings, its gates and thresholds, and the assistant built with them.

Every threshold of `lib.assistant.Assistant` is fitted on the dev questions, never on test:
the boundary and retrieval gates with `fit_gates` (the same fitting as notebook 02), the ask
threshold with `fit_ask_gate`, the answerability threshold with `fit_answerability_gate` on
dev traces (or their saved P(yes), `fit_answerability` trying the targets in order), the last
step's `SupportModel` with `fit_support` on the judged dev answers (`dev_answers`), and the
perplexity ceiling with `fit_perplexity_ceiling`.

`ASSISTANT_SETTINGS` holds the assistant's settings once (sections shown, headings offered,
answer budget, the dev targets): notebook 16 and the saved runs of `lib.question_runs` both
read them, and `build_assistant` builds the assistant exactly as the notebook does.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from lib import retrieval as R
from lib.assistant import Assistant, SupportModel, Trace
from lib.datasets import gold_section_ids, load_corpus, load_questions, load_scope_examples
from lib.indexes import DenseIndex, chunk_by_heading
from lib.llm import LLM
from lib.selective import fit_threshold

__all__ = [
    "AssistantSettings", "ASSISTANT_SETTINGS", "fit_gates", "fit_ask_gate", "fit_answerability_gate",
    "fit_answerability", "dev_answers", "fit_support", "fit_perplexity_ceiling", "AssistantSetup",
    "build_assistant",
]


@dataclass(frozen=True)
class AssistantSettings:
    """The assistant of notebook 16: what it shows and offers, and the targets its thresholds are fitted to on dev."""

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
"""The one set of settings notebook 16 and its saved runs use."""


def fit_gates(
    dev: pd.DataFrame,
    scope: R.Scope,
    *,
    boundary_target: float = 0.95,
    retrieval_target: float = 0.90,
) -> tuple[R.Gate, R.RetrievalGate]:
    """Fit the boundary and retrieval gates on dev questions, as notebook 02 does.

    Boundary: `Gate(boundary_target)` on `boundary_scores`, positive = type is not
    out_of_scope. Retrieval: `RetrievalGate(retrieval_target)` on the `retrieval_features`
    of the dev questions that pass the boundary, positive = type is answerable.

    Args:
        dev: the dev questions (columns question, type). Never pass test questions.
        scope: the index and the in-scope examples the gates look at.
    """
    b = R.boundary_scores(dev["question"], scope.example_questions, scope.embed)
    boundary_gate = R.Gate(target_precision=boundary_target).fit(b, (dev["type"] != "out_of_scope").to_numpy())
    inside = dev[boundary_gate.predict(b)]
    features = R.retrieval_features(scope.index, inside)
    retrieval_gate = R.RetrievalGate(target_precision=retrieval_target).fit(
        features, (inside["type"] == "answerable").to_numpy())
    return boundary_gate, retrieval_gate


def fit_ask_gate(
    dev: pd.DataFrame,
    boundary_gate: R.Gate,
    retrieval_gate: R.RetrievalGate,
    scope: R.Scope,
    *,
    n_offer: int = 3,
    target_precision: float = 0.8,
) -> R.Gate:
    """The threshold on the top retrieval score above which a failed retrieval gate means ASK.

    Fitted on the dev questions that pass the boundary but fail the retrieval gate (the
    only ones the rule applies to). Positive = asking would help: the question is
    answerable and one of its gold sections is among the `n_offer` headings offered.
    The threshold is the lowest top score whose ASK precision on dev reaches
    `target_precision` (`lib.retrieval.Gate`); below it nothing is close -> HAND_OVER.
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
    return R.Gate(target_precision=target_precision).fit(top, helps)


def fit_answerability_gate(traces: Sequence[Trace | float], correct: Sequence[bool], *,
                           target_precision: float = 0.9) -> R.Gate:
    """The gate on P(yes) above which ACT is right at least `target_precision` of the time on dev.

    Uses only the traces the threshold decides: those whose grounded answer had every
    quote verified (and so got an answerability probability). `traces` may also hold the
    P(yes) values themselves (as a saved run keeps them; NaN where no probe was asked).
    `correct[i]` says whether trace i's answer is right (see `answer_is_right`; unjudged rows
    should be left out beforehand). Returns the fitted `lib.retrieval.Gate`: its `threshold_`
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
    return R.Gate(target_precision=target_precision).fit(np.array(scores), np.array(right))


@dataclass
class AssistantSetup:
    """Notebook 16's assistant with every gate fitted on dev, and the questions it is measured on."""

    assistant: Assistant
    dev: pd.DataFrame
    test: pd.DataFrame
    dev_fit: pd.DataFrame


def build_assistant(llm: LLM) -> AssistantSetup:
    """Fit the three gates on dev and build the assistant exactly as notebook 16 does (threshold not fitted).

    `dev_fit` holds every dev question that passes the boundary, in a seeded random order: the
    saved dev run answers each of them whatever the retrieval gate says, so that P(yes) and
    the retrieval scores can be fitted together over their whole range.
    """
    s = ASSISTANT_SETTINGS
    sections = load_corpus()
    dev, test = load_questions("dev"), load_questions("test")
    scope = R.Scope(DenseIndex(chunk_by_heading(sections), llm.embed), llm.embed(load_scope_examples()))
    boundary, retrieval = fit_gates(dev, scope, boundary_target=s.boundary_target, retrieval_target=s.retrieval_target)
    ask = fit_ask_gate(dev, boundary, retrieval, scope, n_offer=s.n_offer, target_precision=s.ask_target)
    assistant = Assistant(llm=llm, scope=scope, sections={x.id: x.text for x in sections},
                          boundary_gate=boundary, retrieval_gate=retrieval, ask_gate=ask,
                          n_sources=s.n_sources, n_offer=s.n_offer, max_tokens=s.max_tokens)
    routes = R.route_many(dev["question"], boundary, retrieval, scope)
    inside = dev[[v.failed_gate != "boundary" for v in routes]]
    dev_fit = inside.sample(frac=1.0, random_state=s.dev_fit_seed)
    return AssistantSetup(assistant, dev, test, dev_fit)


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
    """The `lib.assistant.SupportModel` of notebook 16: fitted on `dev_answers(dev_rows)` at precision `target`."""
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
