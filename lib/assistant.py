"""The assembled assistant: every check of the workbook in one traced pipeline over the Part I corpus.

A question goes through four steps, cheapest first, and the first one that fails decides:

1. **boundary** (`lib.selective.Gate` on `boundary_scores`): is the question like the
   in-scope examples at all? If not -> OUT_OF_SCOPE.
2. **retrieval** (`lib.retrieval.RetrievalGate` on the top score and its margin to the
   runner-up section): does one section clearly match? If not, the assistant does not
   guess. When something is close (top score >= the `ask_gate` threshold) -> ASK: a
   clarifying question offering the headings of the best sections. When nothing is
   close -> HAND_OVER.
3. **grounded answer** (`lib.grounding.grounded_answer`): the model answers from the
   best sections with quotes, and code verifies every quote (`lib.quotes`). An answer
   without quotes, or with any quote that is not in the sections -> HAND_OVER. Each quote
   is then a citation, numbered [1], [2] by the order the sections were shown
   (`lib.citations`); a citation of a section that was not shown, or whose quote is not in
   the section it cites -> HAND_OVER.
4. **answerability** (`answerability_probability`): the model is asked "Does the context
   contain the answer to the question?" and its next-token probabilities of "yes" and
   "no" are renormalised (`lib.logprobs.renormalize`) into P(yes). P(yes) >= the fitted
   threshold -> ACT; below -> HAND_OVER. With a `SupportModel` (`Assistant.support`), its
   P(right) from P(yes), the top retrieval score and the margin is compared with its own
   threshold instead.

Every generated answer also carries its token confidence, printed in its trace
(`Trace.answer_perplexity`: the perplexity of the tokens that wrote the answer field, from
the completion the model returned, and `Trace.weakest_token_logprob`, the least certain of
those tokens; notebook 07 measures that they separate right from wrong short answers). It is a
signal only unless `perplexity_ceiling` is set (fitted on dev with `fit_perplexity_ceiling` of
`lib.assistant_fitting`): then an answer that would be given but is above the ceiling -> ASK.

So the decision rules are:

- out of scope at the boundary -> OUT_OF_SCOPE;
- retrieval gate fails -> ASK (offer the top sections' headings) if the top score clears
  the ask threshold, else HAND_OVER (nothing is close);
- answer with every quote verified, every citation valid and answerability >= threshold -> ACT
  (the answer with its citations), unless its perplexity is above `perplexity_ceiling` (infinite
  unless fitted) -> ASK;
- otherwise -> HAND_OVER.

Every reply other than ACT starts with `lib.citations.FALLBACK_BANNER` and cites nothing.

Every threshold is fitted on the dev questions, never on test, by `lib.assistant_fitting`:
the two gates with `fit_gates` (the same fitting as notebook 02), the ask threshold with
`fit_ask_gate`, the answerability threshold with `fit_answerability_gate` on dev traces, and the
finale's `CostRule` (notebook 20: a calibrated P(right) -> ACT, ASK or HAND_OVER by thresholds from
costs, in place of the retrieval gate and that threshold) with `fit_cost_rule`.

Each question produces a `Trace`: every step's verdict and numbers, the decision, and the reply
the user would see; `Trace.render()` (also `str(trace)`) gives plain text, `_repr_html_` a table.
Model calls happen only for questions that pass both gates (with a cost rule, the boundary): one
grounded answer (two calls if its JSON must be retried) and, when its quotes are verified, one probe.
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from sklearn.exceptions import NotFittedError

from lib import retrieval as R
from lib.checks import check_positive_int, require_fitted
from lib.citations import CitedAnswer, cite, fallback_reply
from lib.grounding import (DEFAULT_MAX_TOKENS, GroundingResult, answer_field_logprobs, grounded_answer,
                            grounding_messages)
from lib.backends.protocol import LLM, Message
from lib.logprobs import perplexity, renormalize
from lib.quotes import render_verdicts
from lib.actions import Action
from lib.routing import CostThresholds, route_by_thresholds
from lib.selective import Gate, ThresholdEstimator, ThresholdFitter
from lib.text import matches_gold

if TYPE_CHECKING:
    from lib.calibration import IsotonicCalibrator, PlattCalibrator

__all__ = [
    "DECISIONS",
    "Step",
    "Trace",
    "Answerability",
    "ANSWERABILITY_SYSTEM_PROMPT",
    "ANSWERABILITY_QUESTION",
    "answerability_messages",
    "answerability_probability",
    "quotes_verified",
    "SupportModel",
    "CalibratedPYes",
    "SupportSignal",
    "CostRule",
    "Assistant",
    "answer_is_right",
    "decision_table",
    "Pending",
    "PENDING",
    "OUT_OF_SCOPE_REPLY",
    "HAND_OVER_REPLY",
]


DECISIONS: tuple[str, ...] = tuple(a.value for a in Action)
"""The assistant's decisions, in table order: `lib.actions.Action`'s values. ACT is a grounded
answer with verified quotes, ASK a clarifying question offering the best sections, OUT_OF_SCOPE
a question not about what the corpus covers, HAND_OVER a question passed to a person."""
class Pending(str, Enum):
    """The decision of a trace that reached the last step before the answerability threshold was fitted.

    A value of its own rather than None: it is no `Action` (nothing would be done with the
    question yet), and a table of decisions shows it as a column of its own.
    """

    PENDING = "PENDING"


PENDING = Pending.PENDING
"""The one `Pending` value."""

ANSWERABILITY_SYSTEM_PROMPT = (
    "You check whether the given sections of the Quillmere Institute of Technology's documents "
    "contain the answer to a question. Reply with one word: yes or no."
)
"""Instructions for the answerability probe."""

ANSWERABILITY_QUESTION = "Does the context contain the answer to the question?"
"""The probe's question, asked after the sections and the user's question."""

_YES_NO_TOKENS = ("yes", "no", "Yes", "No")

OUT_OF_SCOPE_REPLY = ("That is outside what I can answer: I only know the Quillmere Institute's graduate "
                      "handbook, FAQ and help-desk pages.")
HAND_OVER_REPLY = "I can't answer that reliably from the documents; I am passing your question to the graduate office."


# --------------------------------------------------------------------------- the answerability probe


@dataclass(frozen=True)
class Answerability:
    """The probe's verdict: P(yes) among {yes, no}, and the probability it put elsewhere.

    `probability` is NaN when neither "yes" nor "no" was visible (a server's top-k can
    miss both): unknown, never guessed. `scores` holds the raw log-probabilities read.
    """

    probability: float
    off_label_mass: float
    scores: dict[str, float] = field(default_factory=dict)


def answerability_messages(question: str, sections: Mapping[str, str]) -> list[Message]:
    """The probe's chat: its own instructions, then the sections and question exactly as the
    grounded answer shows them (`lib.grounding.grounding_messages`), then `ANSWERABILITY_QUESTION`.
    """
    shown = grounding_messages(question, sections)[1]["content"]
    return [{"role": "system", "content": ANSWERABILITY_SYSTEM_PROMPT},
            {"role": "user", "content": f"{shown}\n\n{ANSWERABILITY_QUESTION} Reply yes or no."}]


def answerability_probability(llm: LLM, question: str, sections: Mapping[str, str]) -> Answerability:
    """P("yes") to "Does the context contain the answer to the question?", renormalised over yes/no.

    One forward pass (`llm.next_token_logprobs` with `score_tokens`), no generation. The
    log-probabilities of "yes"/"Yes" and "no"/"No" are lower-cased and passed to
    `lib.logprobs.renormalize`, which sums the two spellings of each answer and returns
    the share of "yes" among the two, plus the off-label mass (probability on any other
    first token: a sign the model wanted to say something else).
    """
    result = llm.next_token_logprobs(answerability_messages(question, sections), top_k=0,
                                     score_tokens=_YES_NO_TOKENS)
    scores = {token: float(logprob) for token, logprob in result.scores.items()}
    probabilities, off_label = renormalize([(token.lower(), lp) for token, lp in scores.items()], ("yes", "no"))
    probability = probabilities.get("yes", 0.0) if probabilities else math.nan
    return Answerability(float(probability), float(off_label), scores)


def quotes_verified(result: GroundingResult | None) -> bool:
    """True when the grounded answer exists, has at least one quote, and every quote was found.

    An answer with no quotes supports nothing (it is how the model says "the sections do
    not answer this"); one failed quote is enough to distrust the whole answer.
    """
    return result is not None and result.ok and len(result.verdicts) > 0 and all(v.ok for v in result.verdicts)


# --------------------------------------------------------------------------- the last step's model


class SupportModel(ThresholdEstimator):
    """The model's own "supported" flag combined with the retrieval scores into one probability that an answer is right.

    The grounded-answer agent of *Agentic AI from Zero* (project 2) trusts an answer when its
    retrieval score clears a fixed threshold and the model flags the answer as supported. Here
    both are numbers: P(yes) from the answerability probe, and the top retrieval score and its
    margin to the runner-up. A logistic regression (standardised features, scikit-learn's
    default L2 penalty) maps the three to P(right), fitted on judged dev answers; the threshold
    on P(right) is fitted on the same answers at `target_precision` by `fitter` (by default
    `lib.selective.fit_threshold`), or fixed by `threshold` (the threshold API of `lib.selective.ThresholdEstimator`).

    With a `SupportModel` the assistant's last step asks `accepts` instead of comparing P(yes)
    with the answerability threshold; the gates before it are unchanged (replacing the fixed
    retrieval gate too would send many more questions to the model, each a generation).

    Fitted attributes: `coef_` shape (3,) (per standard deviation of P(yes), top score,
    margin), `intercept_`, `threshold_`, `reached_` (whether the answers it accepts on dev reach
    the target; when no threshold does, `threshold_` is `inf`: the model accepts nothing) and
    `fitted_on_`. Used before `fit`, it raises sklearn's `NotFittedError`.
    """

    def __init__(self, target_precision: float = 0.9, threshold: float | None = None,
                 fitter: ThresholdFitter | None = None) -> None:
        self.target_precision = target_precision
        self.threshold = threshold
        self.fitter = fitter

    def fit(self, p_yes: Sequence[float], top_score: Sequence[float], margin: Sequence[float],
            correct: Sequence[bool]) -> "SupportModel":
        """Fit on dev answers: each shape (n,), `correct` True where the answer was judged right."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.check_parameters()
        features = self._features(p_yes, top_score, margin)
        labels = np.asarray(correct, dtype=bool)
        if labels.shape != (len(features),) or not np.isfinite(features).all():
            raise ValueError("SupportModel.fit: need finite features and one label per answer")
        if len(set(labels.tolist())) < 2:
            raise ValueError("SupportModel.fit: needs both right and wrong answers")
        self.pipeline_ = make_pipeline(StandardScaler(), LogisticRegression()).fit(features, labels)
        regression = self.pipeline_[-1]
        self.coef_ = regression.coef_[0].copy()
        self.intercept_ = float(regression.intercept_[0])
        probability = self.probability(p_yes, top_score, margin)
        self.threshold_ = self.threshold_for(probability, labels, self.threshold)
        self.measure(probability >= self.threshold_, labels)
        return self

    @staticmethod
    def _features(p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        return np.column_stack([np.asarray(x, dtype=float).reshape(-1) for x in (p_yes, top_score, margin)])

    def probability(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        """P(right), shape (n,); NaN where P(yes) is NaN (no probe: nothing to combine)."""
        require_fitted(self, "pipeline_", "probability")
        features = self._features(p_yes, top_score, margin)
        out = np.full(len(features), math.nan)
        known = np.isfinite(features).all(axis=1)
        if known.any():
            out[known] = self.pipeline_.predict_proba(features[known])[:, 1]
        return out

    def accepts(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        """Bool, shape (n,): P(right) >= the threshold (NaN never passes)."""
        require_fitted(self, "threshold_", "accepts")
        with np.errstate(invalid="ignore"):
            return self.probability(p_yes, top_score, margin) >= self.threshold_


class SupportSignal(Protocol):
    """Anything that turns an answer's P(yes), top retrieval score and margin into P(right), shape (n,)."""

    def probability(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray: ...


class CalibratedPYes:
    """P(yes) alone as the probability that an answer is right, through a calibrator of `lib.calibration`.

    With `calibrator=None` P(yes) is taken as it is; with a `lib.calibration.PlattCalibrator` or
    `IsotonicCalibrator` it is mapped to the accuracy dev answers had at that P(yes). The
    retrieval scores are accepted (a `SupportSignal`, like `SupportModel`) and ignored.
    """

    def __init__(self, calibrator: PlattCalibrator | IsotonicCalibrator | None = None) -> None:
        self.calibrator = calibrator

    def fit(self, p_yes: Sequence[float], top_score: Sequence[float], margin: Sequence[float],
            correct: Sequence[bool]) -> "CalibratedPYes":
        """Fit the calibrator on dev answers (each shape (n,)); without a calibrator there is nothing to fit."""
        if self.calibrator is not None:
            self.calibrator.fit(np.asarray(p_yes, dtype=float), np.asarray(correct, dtype=bool))
        return self

    def probability(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        """P(right), shape (n,): the calibrated P(yes); NaN where P(yes) is NaN."""
        values = np.asarray(p_yes, dtype=float).reshape(-1)
        out = np.full(values.shape, math.nan)
        known = np.isfinite(values)
        if known.any():
            out[known] = values[known] if self.calibrator is None else self.calibrator.predict(values[known])
        return out


@dataclass(frozen=True)
class CostRule:
    """The finale's last step: one calibrated P(right) per answer and two thresholds on it, chosen from costs.

    `signal` maps (P(yes), top score, margin) to P(right) (a fitted `SupportSignal`); `thresholds`
    come from `lib.routing.cost_thresholds` on dev: P(right) at or above `act_threshold` -> ACT, at
    or above `hand_over_threshold` -> ASK (offer the best sections' headings), below -> HAND_OVER.
    It decides only answers whose quotes and citations code has verified; the rest are handed over.
    """

    signal: SupportSignal
    thresholds: CostThresholds

    def probability(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        """P(right), shape (n,), from the signal."""
        return self.signal.probability(p_yes, top_score, margin)

    def route(self, p_yes: ArrayLike, top_score: ArrayLike, margin: ArrayLike) -> np.ndarray:
        """`lib.actions.Action` per answer, shape (n,), by the two thresholds (`route_by_thresholds`)."""
        return route_by_thresholds(self.probability(p_yes, top_score, margin),
                                   self.thresholds.act_threshold, self.thresholds.hand_over_threshold)


# --------------------------------------------------------------------------- the trace


@dataclass(frozen=True)
class Step:
    """One step of the pipeline: its verdict and the numbers behind it.

    `passed` is True/False, or None when the step did not decide (an earlier step did).
    `numbers` maps names to values (scores and their thresholds); a skipped retrieval step
    still shows its numbers, which are computed for every question. `note` is one line of
    explanation for people.
    """

    name: str
    passed: bool | None
    numbers: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def verdict(self) -> str:
        """"pass", "fail" or "skipped"."""
        return "skipped" if self.passed is None else ("pass" if self.passed else "fail")


def _fmt(value: object) -> str:
    if isinstance(value, (float, np.floating)):
        return "nan" if math.isnan(value) else ("inf" if math.isinf(value) else f"{value:.3f}")
    return str(value)


@dataclass(frozen=True, repr=False)
class Trace:
    """Everything the assistant did with one question, and why.

    `decision` is `PENDING` only while the answerability threshold is not fitted yet and the
    question got that far (see `Assistant.decide`). `reply` is what the user would see.
    `routing` holds the gate numbers (`lib.retrieval.RoutingVerdict`), `offered` the
    (section id, heading) pairs an ASK offers, `grounding` the grounded answer with its
    quote verdicts (None if not asked), `answerability` the probe (None if not asked),
    `shown_sections` the ids of the sections the model was shown, in order (what [1], [2] number).
    """

    question: str
    decision: Action | Pending
    reply: str
    steps: tuple[Step, ...]
    routing: R.RoutingVerdict
    why: str = ""
    offered: tuple[tuple[str, str], ...] = ()
    grounding: GroundingResult | None = None
    answerability: Answerability | None = None
    shown_sections: tuple[str, ...] = ()

    @property
    def answer(self) -> str | None:
        """The grounded answer's text, if the model produced one."""
        return self.grounding.answer.answer if self.grounding is not None and self.grounding.ok else None

    @property
    def citations(self) -> CitedAnswer | None:
        """The answer with its quotes as numbered citations of the sections shown (`lib.citations.cite`), if any answer."""
        if self.answer is None:
            return None
        return cite(self.answer, self.grounding.verdicts, self.shown_sections)

    @property
    def answer_perplexity(self) -> float | None:
        """Perplexity of the answer field's tokens (1 = certain); None without an answer or without tokens.

        Its inverse, the geometric mean of the token probabilities, is notebook 07's token confidence.
        """
        return self.step("grounded answer").numbers.get("answer perplexity")

    @property
    def weakest_token_logprob(self) -> float | None:
        """The lowest log-probability among the answer field's tokens (0 = certain); None as for `answer_perplexity`.

        Perplexity averages; one unsure token (a digit of a date) shows here among certain ones.
        """
        return self.step("grounded answer").numbers.get("weakest token logprob")

    @property
    def decision_name(self) -> str:
        """The decision's name: an `Action`'s value, or "PENDING" while the answerability threshold is not fitted."""
        return self.decision.value

    def step(self, name: str) -> Step:
        """The step called `name` ("boundary", "retrieval", "grounded answer", "citations" or "answerability")."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(f"no step {name!r}; steps: {[s.name for s in self.steps]}")

    def render(self) -> str:
        """Plain text: the question, one line per step with its numbers, the quotes, the decision and reply."""
        lines = [f"Q: {self.question}"]
        for s in self.steps:
            numbers = ", ".join(f"{k} {_fmt(v)}" for k, v in s.numbers.items())
            lines.append(f"  [{s.verdict:^7}] {s.name:<16} {numbers}" + (f"  ({s.note})" if s.note else ""))
            if s.name == "grounded answer" and self.grounding is not None and self.grounding.ok:
                lines.extend("      " + line for line in render_verdicts(self.grounding.verdicts).splitlines())
            if s.name == "citations" and self.citations is not None:
                lines.extend(f"      {problem}" for problem in self.citations.problems)
        lines.append(f"  => {self.decision_name} ({self.why}): {self.reply}")
        return "\n".join(lines)

    __str__ = render
    __repr__ = render  # the dataclass repr would dump every token of the model's reply

    def _repr_html_(self) -> str:
        """The same trace as a small HTML table (for notebooks)."""
        colour = {"pass": "#1a7f37", "fail": "#cf222e", "skipped": "#6e7781"}
        rows = []
        for s in self.steps:
            numbers = "<br>".join(f"{html.escape(k)} <code>{html.escape(_fmt(v))}</code>" for k, v in s.numbers.items())
            rows.append(f'<tr><td>{html.escape(s.name)}</td><td style="color:{colour[s.verdict]};font-weight:bold">'
                        f"{s.verdict}</td><td>{numbers}</td><td>{html.escape(s.note)}</td></tr>")
        return (f"<p><b>Q:</b> {html.escape(self.question)}</p><table><tr><th>step</th><th>verdict</th>"
                f"<th>numbers</th><th>note</th></tr>{''.join(rows)}</table>"
                f"<pre>{html.escape(render_verdicts(self.grounding.verdicts)) if self.grounding and self.grounding.ok else ''}</pre>"
                f"<p><b>{self.decision_name}</b> ({html.escape(self.why)}): {html.escape(self.reply)}</p>")


# --------------------------------------------------------------------------- the pipeline


@dataclass
class Assistant:
    """The pipeline with its fitted thresholds; `run(question)` returns a `Trace`.

    Args:
        llm: the model (anything with `chat` and `next_token_logprobs`, see `lib.backends.protocol.LLM`).
        scope: the gates' `lib.retrieval.Scope`: a `DenseIndex` over heading chunks (its cosines
            are what the gates were fitted on) and the in-scope examples for the boundary (texts,
            embedded once here, or their embeddings).
        sections: section id -> section text, the texts the model is shown.
        boundary_gate, retrieval_gate: fitted on dev (`lib.assistant_fitting.fit_gates`).
        ask_gate: fitted on dev (`lib.assistant_fitting.fit_ask_gate`): top score at or above its
            threshold -> ASK.
        answerability_threshold: fitted on dev traces (the `threshold_` of
            `lib.assistant_fitting.fit_answerability_gate`); NaN until then, and questions that
            reach the last step get decision `PENDING`.
        n_sources: sections shown to the model; n_offer: headings offered by ASK;
        max_tokens: budget of the grounded answer (retried once with twice as many if cut off).
        perplexity_ceiling: fitted on dev (`lib.assistant_fitting.fit_perplexity_ceiling`): an
            answer whose perplexity is above it -> ASK instead of ACT. Infinite (never used) unless set; an answer
            without tokens is never turned into ASK.
        support: a fitted `SupportModel`; when set, the last step accepts an answer when the
            model's P(right) clears its threshold, in place of the answerability threshold.
        cost_rule: a fitted `CostRule` (the finale's assistant, notebook 20); when set, the
            retrieval gate no longer decides: every question past the boundary is answered and
            probed, and an answer whose quotes and citations hold is routed by its calibrated
            P(right) to ACT, ASK or HAND_OVER. The other thresholds are then not used.
    """

    llm: LLM
    scope: R.Scope
    sections: Mapping[str, str]
    boundary_gate: Gate
    retrieval_gate: R.RetrievalGate
    ask_gate: Gate
    answerability_threshold: float = math.nan
    n_sources: int = 3
    n_offer: int = 3
    max_tokens: int = DEFAULT_MAX_TOKENS
    perplexity_ceiling: float = math.inf
    support: SupportModel | None = None
    cost_rule: CostRule | None = None

    def __post_init__(self) -> None:
        examples = self.scope.example_questions
        if isinstance(examples, (list, tuple)):
            self.scope = replace(self.scope, example_questions=np.asarray(self.scope.embed(list(examples))))
        for name, value in (("n_sources", self.n_sources), ("n_offer", self.n_offer), ("max_tokens", self.max_tokens)):
            check_positive_int(value, name)
        if not hasattr(self.ask_gate, "threshold_"):
            raise NotFittedError("Assistant: fit ask_gate on dev first (lib.assistant_fitting.fit_ask_gate)")

    # -- evidence

    def run(self, question: str, *, answer_past_boundary: bool = False) -> Trace:
        """Take one question through the pipeline (model calls only if both gates pass).

        With `answer_past_boundary` the model also answers (and is probed) when only the
        boundary passed: the decision still follows the gates, but the trace carries the
        answer and P(yes) a fit on dev needs over the whole range of retrieval scores.
        """
        return self.run_many([question], answer_past_boundary=answer_past_boundary)[0]

    def run_many(self, questions: Sequence[str] | pd.DataFrame, *,
                 answer_past_boundary: bool = False) -> list[Trace]:
        """`run` for many questions; the gates are computed in one batch."""
        texts = questions["question"].tolist() if isinstance(questions, pd.DataFrame) else list(questions)
        verdicts = R.route_many(texts, self.boundary_gate, self.retrieval_gate, self.scope, n_sources=self.n_sources)
        return [self._run_one(v, answer_past_boundary) for v in verdicts]

    def shown_sections(self, verdict: R.RoutingVerdict) -> dict[str, str]:
        """The sections the model is shown for a routed question, in retrieval order: the
        verdict's sources, or the best `n_sources` ranked sections when the retrieval gate failed."""
        ids = verdict.sources or tuple(sid for sid, _ in verdict.ranked_sections[: self.n_sources])
        return {sid: self.sections[sid] for sid in ids}

    def _run_one(self, verdict: R.RoutingVerdict, answer_past_boundary: bool = False) -> Trace:
        boundary = Step("boundary", verdict.failed_gate != "boundary",
                        {"best similarity": verdict.boundary_score, "threshold": verdict.boundary_threshold},
                        "like the in-scope examples" if verdict.failed_gate != "boundary" else "unlike every in-scope example")
        retrieval_ran = verdict.failed_gate != "boundary"
        retrieval = Step("retrieval", (verdict.failed_gate is None) if retrieval_ran else None,
                         {"top": verdict.top_score, "top threshold": verdict.score_threshold,
                          "margin": verdict.margin, "margin threshold": verdict.margin_threshold,
                          "ask threshold": self.ask_gate.threshold_},
                         f"top section {verdict.top_section_id}, runner-up {verdict.runner_up_section_id}")
        offered = verdict.ranked_sections[: self.n_offer]
        grounding: GroundingResult | None = None
        probe: Answerability | None = None
        answer_anyway = answer_past_boundary or self.cost_rule is not None
        if verdict.failed_gate is None or (answer_anyway and verdict.failed_gate != "boundary"):
            shown = self.shown_sections(verdict)
            grounding = grounded_answer(self.llm, verdict.question, shown, max_tokens=self.max_tokens)
            verified = quotes_verified(grounding)
            n_quotes = len(grounding.verdicts)
            note = ("no valid answer: " + "; ".join(grounding.errors) if not grounding.ok else
                    "no quotes" if n_quotes == 0 else
                    "every quote verified" if verified else "a quote is not in the sections")
            numbers = {"sections shown": len(shown), "quotes": n_quotes, "verified": grounding.n_verified,
                       "attempts": len(grounding.completions)}
            answer_logprobs = answer_field_logprobs(grounding.completion) if grounding.ok else []
            if answer_logprobs:  # the third layer's numbers, always shown (a backend without token log-probabilities has none)
                numbers |= {"answer perplexity": perplexity(answer_logprobs), "weakest token logprob": min(answer_logprobs)}
            grounded = Step("grounded answer", verified, numbers, note)
            if verified:
                probe = answerability_probability(self.llm, verdict.question, shown)
        else:
            grounded = Step("grounded answer", None, {}, "not asked: a gate failed")
        trace = Trace(verdict.question, PENDING, "", (boundary, retrieval, grounded), verdict,
                      offered=offered, grounding=grounding, answerability=probe,
                      shown_sections=tuple(shown) if grounding is not None else ())
        cited = trace.citations
        if cited is None:
            citations = Step("citations", None, {}, "no answer to cite")
        else:
            citations = Step("citations", cited.valid, {"citations": len(cited.citations), "valid": cited.n_valid},
                             "every citation is a section shown, and its quote is in it" if cited.valid else
                             "no citation" if not cited.citations else "a citation does not hold")
        return self.decide(replace(trace, steps=(boundary, retrieval, grounded, citations)))

    # -- the decision

    def decide(self, trace: Trace) -> Trace:
        """Apply the decision rules to a trace's numbers (with this assistant's current thresholds).

        Cheap and model-free, so dev traces can be decided again after the answerability
        threshold is fitted on them. Returns a new trace with the answerability step, the
        decision, the rule that fired (`why`) and the reply.
        """
        v = trace.routing
        steps = [s for s in trace.steps if s.name != "answerability"]
        if self.cost_rule is not None:
            return self._decide_by_costs(trace, steps, self.cost_rule)
        threshold = self.answerability_threshold if self.support is None else self.support.threshold_
        probe = trace.answerability
        accepted = False
        if probe is None:
            steps.append(Step("answerability", None, {}, "not asked: an earlier step decided"))
        elif self.support is None:
            passed = None if math.isnan(threshold) else bool(probe.probability >= threshold)
            accepted = bool(passed)
            steps.append(Step("answerability", passed,
                              {"P(yes)": probe.probability, "threshold": threshold, "off-label mass": probe.off_label_mass},
                              f'"{ANSWERABILITY_QUESTION}"' + (" (threshold not fitted yet)" if passed is None else "")))
        else:
            p_right = float(self.support.probability(probe.probability, v.top_score, v.margin)[0])
            accepted = bool(p_right >= threshold)
            steps.append(Step("answerability", accepted,
                              {"P(yes)": probe.probability, "P(right)": p_right, "threshold": threshold},
                              "P(right) from P(yes), the top score and the margin (support model)"))
        if v.failed_gate == "boundary":
            decision, reply, why = Action.OUT_OF_SCOPE, fallback_reply(OUT_OF_SCOPE_REPLY), "boundary failed"
        elif v.failed_gate is not None:
            if v.top_score >= self.ask_gate.threshold_:
                decision, why = Action.ASK, "retrieval unsure, but sections are close"
                reply = _ask_reply(trace, "I'm not sure which part of the documents you mean.")
            else:
                decision, reply, why = Action.HAND_OVER, fallback_reply(HAND_OVER_REPLY), "retrieval failed and nothing is close"
        elif (failed := _failed_check(trace)) is not None:
            decision, reply, why = Action.HAND_OVER, fallback_reply(HAND_OVER_REPLY), failed
        elif math.isnan(threshold):
            decision, reply, why = PENDING, "(pending: fit the answerability threshold)", "threshold not fitted"
        elif accepted and trace.answer_perplexity is not None and trace.answer_perplexity > self.perplexity_ceiling:
            decision, why = Action.ASK, "answerable, but the answer's perplexity is above the ceiling"
            reply = _ask_reply(trace, "I'm not sure I have this right.")
        elif accepted:
            decision, why = Action.ACT, "verified quotes and answerable"
            reply = trace.citations.render()
        else:
            decision, reply, why = Action.HAND_OVER, fallback_reply(HAND_OVER_REPLY), "answerability below threshold"
        return replace(trace, decision=decision, reply=reply, steps=tuple(steps), why=why)

    def _decide_by_costs(self, trace: Trace, steps: list[Step], rule: CostRule) -> Trace:
        """The finale's rules: boundary, then the code checks, then the cost rule on the calibrated P(right)."""
        v, probe = trace.routing, trace.answerability
        steps = [replace(s, passed=None, note="not a gate here: every question inside the boundary gets a drafted answer")
                 if s.name == "retrieval" and v.failed_gate != "boundary" else s for s in steps]
        action: Action | None = None
        if probe is None:
            steps.append(Step("answerability", None, {}, "not asked: an earlier step decided"))
        else:
            p_right = float(rule.probability(probe.probability, v.top_score, v.margin)[0])
            if math.isfinite(p_right):
                action = rule.route(probe.probability, v.top_score, v.margin)[0]
            steps.append(Step("answerability", None if action is None else action == Action.ACT,
                              {"P(yes)": probe.probability, "P(right)": p_right,
                               "act threshold": rule.thresholds.act_threshold,
                               "ask threshold": rule.thresholds.hand_over_threshold},
                              "calibrated P(right), thresholds chosen from costs"))
        if v.failed_gate == "boundary":
            decision, reply, why = Action.OUT_OF_SCOPE, fallback_reply(OUT_OF_SCOPE_REPLY), "boundary failed"
        elif (failed := _failed_check(trace)) is not None:
            decision, reply, why = Action.HAND_OVER, fallback_reply(HAND_OVER_REPLY), failed
        elif action == Action.ACT:
            decision, reply, why = Action.ACT, trace.citations.render(), "P(right) at or above the act threshold"
        elif action == Action.ASK:
            decision, why = Action.ASK, "P(right) between the ask and act thresholds"
            reply = _ask_reply(trace, "I'm not sure I have this right.")
        else:
            decision, reply, why = Action.HAND_OVER, fallback_reply(HAND_OVER_REPLY), "P(right) below the ask threshold"
        return replace(trace, decision=decision, reply=reply, steps=tuple(steps), why=why)


def _failed_check(trace: Trace) -> str | None:
    """Why code hands an answer over before any probability is read (a quote or a citation); None when both hold."""
    return ("quotes missing or not verified" if not quotes_verified(trace.grounding) else
            None if trace.citations.valid else "a citation does not hold")


def _ask_reply(trace: Trace, opening: str) -> str:
    """An ASK's reply behind the banner: `opening`, then the offered sections' headings as a question."""
    headings = "; ".join(f"({i}) {heading}" for i, (_, heading) in enumerate(trace.offered, start=1))
    return fallback_reply(f"{opening} Is your question about: {headings}?")


# --------------------------------------------------------------------------- judging and tables


def answer_is_right(trace: Trace | str | None, question_type: str, gold: str | None, *, max_gold_words: int = 4,
                    ) -> bool | None:
    """Whether an answer (a trace's, or the answer's text) is right, judged by a rule; None when the rule cannot judge.

    - The question is not answerable (unanswerable or out of scope): any answer is wrong.
    - Answerable with a short gold answer (at most `max_gold_words` words): right when
      `lib.text.matches_gold(answer, gold)`: the normalised gold occurs in the
      normalised answer as whole words ("48 credits in total" matches "48 credits"; "three
      weeks" matches "3 weeks"; "at least four" does not match "four or more").
    - Answerable with a longer or missing gold answer, or no answer text: None (not judged).
    """
    if question_type != "answerable":
        return False
    answer = trace.answer if isinstance(trace, Trace) else trace
    if answer is None or not isinstance(gold, str) or not gold.strip() or len(gold.split()) > max_gold_words:
        return None
    return matches_gold(answer, gold)


def decision_table(traces: Sequence[Trace | str], question_types: Sequence[str]) -> pd.DataFrame:
    """Counts of decisions by question type: rows answerable / unanswerable / out_of_scope, columns the decisions.

    `traces` holds traces or their decision names (as a saved run keeps them).
    """
    if len(traces) != len(question_types):
        raise ValueError(f"traces ({len(traces)}) and question_types ({len(question_types)}) differ in length")
    frame = pd.DataFrame({"type": list(question_types),
                          "decision": [t if isinstance(t, str) else t.decision_name for t in traces]})
    columns = list(DECISIONS) + ([PENDING.value] if (frame["decision"] == PENDING.value).any() else [])
    table = pd.crosstab(frame["type"], frame["decision"]).reindex(
        index=["answerable", "unanswerable", "out_of_scope"], columns=columns, fill_value=0)
    return table.rename_axis(index="question type", columns="decision")

