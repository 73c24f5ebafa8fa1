"""The two gates that run before any generation, and the routes they send a question down.

Notebook 02 builds them on the indexes of `lib.indexes`:

1. **Scope**: what the gates look at, `Scope(index, example_questions)`: a `DenseIndex`
   over the corpus and the in-scope example questions, embedded with the index's `embed`.
2. **Gate features**: a *boundary* score (best cosine to in-scope example questions,
   `boundary_scores`) and *retrieval confidence* (top score and its margin to the
   runner-up, `retrieval_features`).
3. **Thresholds** are fitted on dev data (`lib.selective.Gate` on the boundary score, with the
   workbook's one fitter `lib.selective.fit_threshold`, and `RetrievalGate` on the pair), never
   chosen by eye; `roc_points` and `precision_recall_intervals` show what they cost.
4. **Routing**: `route_many` sends each question down one of three paths, named with the
   course's one action vocabulary `lib.actions.Action`: ACT (answer from the retrieved
   sections, citing them; the original design's GROUNDED), ASK (in scope, but retrieval is
   not convincing; LOW_CONFIDENCE) or OUT_OF_SCOPE (the boundary fails; FALLBACK), with the
   numbers that decided it.

Embeddings are not computed here: `boundary_scores` takes an `embed` callable (`lib.indexes.Embed`),
and a `Scope` uses its index's, so any embedder works (the course's `get_llm().embed`, or a small
fake in tests). Vectors are re-normalised to unit length on the way in, so a dot product is
always a cosine similarity.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from lib.checks import require_fitted
from lib.datasets import QUESTION_TYPES
from lib.intervals import binomial_interval
from lib.indexes import DenseIndex, Embed, Hit, SearchIndex, distinct_units, unit_rows
from lib.actions import Action
from lib.selective import TARGET_TOLERANCE, Gate, ThresholdEstimator, threshold_curve

__all__ = [
    "Scope",
    "boundary_scores",
    "retrieval_features",
    "RetrievalGate",
    "roc_points",
    "precision_recall_intervals",
    "GATE_ROUTES",
    "ROUTE_MESSAGES",
    "RoutingVerdict",
    "route_many",
    "gate_tradeoff",
]


@dataclass(frozen=True)
class Scope:
    """What the gates look at: the index the retrieval gate searches, and the in-scope examples of the boundary.

    Args:
        index: a `DenseIndex` over the corpus (its scores are the cosines the gates are fitted on).
        example_questions: the in-scope examples, as texts or as their embeddings
            (`shape (m, dim)`, to embed them once and reuse), made with `index.embed`.
    """

    index: DenseIndex
    example_questions: Sequence[str] | np.ndarray

    @property
    def embed(self) -> Embed:
        """The embedder of the index, used for the questions and the examples too."""
        return self.index.embed


# --------------------------------------------------------------------------- gate features


def boundary_scores(
    questions: Sequence[str], example_questions: Sequence[str] | np.ndarray, embed: Embed
) -> np.ndarray:
    """Best cosine similarity of each question to any in-scope example question.

    Args:
        questions: n questions.
        example_questions: m in-scope examples, as texts, or as their embeddings
            (`shape (m, dim)`, to embed them once and reuse).
        embed: the embedder (the same one for both sides).

    Returns:
        `shape (n,)`, values in [-1, 1]. An example identical to a question scores 1:
        keep evaluation questions out of the examples.
    """
    questions = list(questions)
    if len(example_questions) == 0:
        raise ValueError("example_questions is empty: the boundary needs in-scope examples")
    if not questions:
        return np.zeros(0)
    if isinstance(example_questions, np.ndarray):
        e = unit_rows(example_questions, example_questions.shape[0], "boundary_scores")
    else:
        e = unit_rows(embed(list(example_questions)), len(example_questions), "boundary_scores")
    q = unit_rows(embed(questions), len(questions), "boundary_scores")
    return (q @ e.T).max(axis=1)


def _questions_list(questions: pd.DataFrame | Sequence[str]) -> list[str]:
    if isinstance(questions, pd.DataFrame):
        return questions["question"].tolist()
    if isinstance(questions, str):
        raise TypeError("questions must be a list of strings or a DataFrame, not one string")
    return list(questions)


def _features_from_hits(hits: Sequence[Hit]) -> dict:
    """Top score, and the runner-up: the best hit sharing no section with the top hit."""
    if not hits:
        return dict(top_score=np.nan, runner_up_score=np.nan, margin=np.nan,
                    top_chunk_id=None, top_section_id=None, runner_up_section_id=None)
    top = hits[0]
    top_sections = set(top.chunk.section_ids)
    runner = next((h for h in hits[1:] if not top_sections & set(h.chunk.section_ids)), None)
    return dict(
        top_score=top.score,
        runner_up_score=runner.score if runner else np.nan,
        margin=top.score - runner.score if runner else np.inf,
        top_chunk_id=top.chunk.id,
        top_section_id=top.chunk.section_id,
        runner_up_section_id=runner.chunk.section_id if runner else None,
    )


def retrieval_features(index: SearchIndex, questions: pd.DataFrame | Sequence[str]) -> pd.DataFrame:
    """The retrieval-confidence numbers for each question.

    Columns: question, top_score, runner_up_score, margin (= top - runner-up),
    top_chunk_id, top_section_id, runner_up_section_id.

    The runner-up is the best chunk that shares no section with the top chunk, not
    simply the second hit. Two chunks of the same section agree with each other: a
    small gap between them says nothing about doubt. The margin should measure
    whether a *different* part of the corpus is about as good an answer, which is what
    an ambiguous or unanswerable question looks like.

    Edge cases: no hits (BM25, no shared word) gives NaN scores; no competitor at all
    gives runner_up_score NaN and margin +inf (nothing competes with the top chunk).
    Row order (and index, for a DataFrame) follows `questions`.
    """
    texts = _questions_list(questions)
    all_hits = index.search_many(texts, k=len(index.chunks)) if texts else []
    frame = pd.DataFrame([dict(question=q, **_features_from_hits(h)) for q, h in zip(texts, all_hits)],
                         columns=["question", "top_score", "runner_up_score", "margin",
                                  "top_chunk_id", "top_section_id", "runner_up_section_id"])
    if isinstance(questions, pd.DataFrame):
        frame.index = questions.index
    return frame


# --------------------------------------------------------------------------- thresholds


def _as_bool(positive, n: int, who: str, name: str = "positive") -> np.ndarray:
    p = np.asarray(positive)
    if p.shape != (n,):
        raise ValueError(f"{who}: {name} must have shape ({n},) like scores, got {p.shape}")
    return p.astype(bool)


@dataclass
class RetrievalGate(ThresholdEstimator):
    """Retrieval confidence: pass when top_score >= `score_threshold_` AND margin >= `margin_threshold_`.

    The fitting rule (`fit`): try every pair (score threshold, margin threshold) with
    values taken from the dev data, plus "no margin requirement" (-inf); keep the pairs
    whose precision on dev reaches `target_precision` (`lib.selective.target_reached`'s rule);
    choose the one with the highest recall, then the highest precision, then the smallest
    margin threshold, then the smallest score threshold. This maximises recall subject to the
    precision target, and the margin is only used when it buys something on dev. With two
    thresholds and a small dev set this can overfit: report precision and recall on test.

    Why not `lib.selective.fit_threshold` once per margin threshold: for one score it returns
    the lowest qualifying threshold, which has the highest recall but, among thresholds of equal
    recall, not the highest precision, the second key here; the pair search ranks all pairs at once.

    The threshold API of `lib.selective.ThresholdEstimator`: `score_threshold` and `margin_threshold`
    (both or neither) fix the pair instead of searching for it (the pair search is its own rule, so it
    takes no `fitter`). Attributes after `fit`:
    `score_threshold_`, `margin_threshold_`, `reached_` (whether the pair reaches the target on
    dev; when no pair does, the score threshold is `inf` and the gate accepts nothing), the dev
    scores of the pair in use, `dev_precision_` (NaN when it accepts nothing) and
    `dev_recall_`, and `fitted_on_`.
    """

    target_precision: float = 0.95
    score_threshold: float | None = None
    margin_threshold: float | None = None

    def fit(self, features: pd.DataFrame, correct) -> "RetrievalGate":
        """Fit both thresholds on dev features (`retrieval_features` output) and labels.

        Args:
            features: DataFrame with columns top_score and margin.
            correct: bools of `shape (n,)`: True where the corpus supports an answer
                (e.g. type == "answerable"; or stricter: answerable and the top chunk
                is a gold section).
        """
        top = features["top_score"].to_numpy(dtype=np.float64)
        margin = features["margin"].to_numpy(dtype=np.float64)
        pos = _as_bool(correct, len(top), "RetrievalGate.fit", "correct")
        self.check_parameters()
        if (self.score_threshold is None) != (self.margin_threshold is None):
            raise ValueError("RetrievalGate: give both score_threshold and margin_threshold, or neither to fit them")
        if self.score_threshold is not None:
            self.score_threshold_, self.margin_threshold_ = float(self.score_threshold), float(self.margin_threshold)
        else:
            self.score_threshold_, self.margin_threshold_ = self._search(top, margin, pos)
        accepted = self.predict(features)
        self.dev_precision_ = float(pos[accepted].mean()) if accepted.any() else math.nan
        self.dev_recall_ = float((accepted & pos).sum() / max(int(pos.sum()), 1))
        self.measure(accepted, pos)
        return self

    def _search(self, top: np.ndarray, margin: np.ndarray, pos: np.ndarray) -> tuple[float, float]:
        """The pair of thresholds the fitting rule chooses, or `(inf, -inf)` when no pair reaches the target."""
        if not np.isfinite(top).any():
            raise ValueError("RetrievalGate.fit: top_score has no finite value")
        score_grid = np.unique(top[np.isfinite(top)])
        margin_grid = np.r_[-np.inf, np.unique(margin[np.isfinite(margin)])]
        with np.errstate(invalid="ignore"):
            pass_score = top[None, :] >= score_grid[:, None]        # [S, n]
            pass_margin = margin[None, :] >= margin_grid[:, None]    # [M, n] (+inf margin passes)
        accepted = pass_score.astype(np.int64) @ pass_margin.T.astype(np.int64)  # [S, M]
        true_pos = (pass_score & pos).astype(np.int64) @ pass_margin.T.astype(np.int64)
        n_pos = max(int(pos.sum()), 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(accepted > 0, true_pos / np.maximum(accepted, 1), 0.0)
        recall = true_pos / n_pos
        ok = (accepted > 0) & (precision >= self.target_precision - TARGET_TOLERANCE)
        if not ok.any():
            return math.inf, -math.inf
        si, mi = np.nonzero(ok)
        # Sort keys: recall desc, precision desc, margin threshold asc, score threshold asc.
        best = np.lexsort((score_grid[si], margin_grid[mi], -precision[si, mi], -recall[si, mi]))[0]
        return float(score_grid[si[best]]), float(margin_grid[mi[best]])

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        """Bool array: True where top_score >= `score_threshold_` and margin >= `margin_threshold_`."""
        require_fitted(self, "score_threshold_", "predict")
        top = features["top_score"].to_numpy(dtype=np.float64)
        margin = features["margin"].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            return (top >= self.score_threshold_) & (margin >= self.margin_threshold_)

    def failed_check(self, top_score: float, margin: float) -> str | None:
        """Which check a single row fails first: "retrieval_score", "retrieval_margin" or None."""
        require_fitted(self, "score_threshold_", "failed_check")
        if not top_score >= self.score_threshold_:  # also catches NaN
            return "retrieval_score"
        if not margin >= self.margin_threshold_:
            return "retrieval_margin"
        return None


def roc_points(scores, positive) -> pd.DataFrame:
    """Every operating point of the decision "score >= threshold", for ROC and precision plots.

    Returns a DataFrame with one row per threshold: first +inf (accept nothing), then the
    rows of `lib.selective.threshold_curve`, down to the lowest score (accept everything);
    columns threshold, tpr (recall), fpr, precision (NaN when nothing is accepted),
    accepted (count). NaN scores are never accepted. Needs at least one positive and one
    negative.
    """
    s = np.asarray(scores, dtype=np.float64)
    p = _as_bool(positive, len(s), "roc_points")
    n_pos, n_neg = int(p.sum()), int((~p).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"roc_points needs both classes; got {n_pos} positive, {n_neg} negative")
    curve = threshold_curve(s, p)
    accepted = np.r_[0, curve["count"].to_numpy()]
    tp = np.rint(np.r_[0.0, (curve["accuracy"] * curve["count"]).to_numpy()])
    fp = accepted - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(accepted > 0, tp / np.maximum(accepted, 1), np.nan)
    return pd.DataFrame({"threshold": np.r_[np.inf, curve["threshold"].to_numpy()], "tpr": tp / n_pos,
                         "fpr": fp / n_neg, "precision": precision, "accepted": accepted})


def precision_recall_intervals(pred, positive, level: float = 0.95) -> pd.DataFrame:
    """Precision and recall of a bool decision, with exact binomial intervals.

    Each metric is a proportion: precision is the share of the accepted rows that were
    right, recall the share of the positive rows that were accepted. Their intervals are
    `lib.intervals.binomial_interval`, exact for any count: 7 accepted rows all right give
    precision 1 with the interval [0.590, 1], where a bootstrap would collapse to [1, 1].

    Args:
        pred: bools of `shape (m,)`, True = the gate accepted.
        positive: bools of `shape (m,)`, True = accepting was right.
        level: interval coverage in (0, 1).

    Returns:
        DataFrame indexed by metric ("precision", "recall") with columns value, low,
        high, and support (accepted rows for precision, positive rows for recall).
        All NaN for a metric whose support is 0.
    """
    pr = np.asarray(pred).astype(bool)
    ps = _as_bool(positive, len(pr), "precision_recall_intervals")
    rows = {}
    for name, outcomes in (("precision", ps[pr]), ("recall", pr[ps])):
        if len(outcomes) == 0:
            value = low = high = math.nan
        else:
            value, low, high = binomial_interval(int(outcomes.sum()), len(outcomes), level)
        rows[name] = dict(value=value, low=low, high=high, support=len(outcomes))
    return pd.DataFrame.from_dict(rows, orient="index")


# --------------------------------------------------------------------------- routing


GATE_ROUTES: tuple[Action, ...] = (Action.ACT, Action.ASK, Action.OUT_OF_SCOPE)
"""The three paths the gates can send a question down, in table order."""

ROUTE_MESSAGES = {
    Action.ACT: "Answer from the corpus, citing the sources listed.",
    Action.ASK: "The corpus does not clearly support an answer to this question.",
    Action.OUT_OF_SCOPE: "Outside what the corpus covers: any answer is NOT from the corpus and has no citations.",
}
"""What the user is told on each of the three paths a question can take before any generation."""


@dataclass(frozen=True)
class RoutingVerdict:
    """The route for one question and every number that decided it.

    failed_gate is the first check that failed, in pipeline order: "boundary",
    "retrieval_score", "retrieval_margin", or None (ACT). `sources` are section ids,
    non-empty only for ACT. Retrieval numbers are computed even when the boundary
    fails, so a trace always shows all of them. `ranked_sections` holds (section id,
    heading) of every section in retrieval order, best first, each once: what a
    clarifying question can offer, without searching again.
    """

    question: str
    route: Action
    boundary_score: float
    boundary_threshold: float
    top_score: float
    runner_up_score: float
    margin: float
    score_threshold: float
    margin_threshold: float
    failed_gate: str | None
    top_section_id: str | None
    runner_up_section_id: str | None
    sources: tuple[str, ...] = field(default=())
    ranked_sections: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def message(self) -> str:
        """What the assistant tells the user about this route."""
        return ROUTE_MESSAGES[self.route]

    def explain(self) -> str:
        """One line: the route, and the numbers against their thresholds."""
        return (
            f"{self.route.value}: boundary {self.boundary_score:.3f} (>= {self.boundary_threshold:.3f}?), "
            f"top {self.top_score:.3f} (>= {self.score_threshold:.3f}?), runner-up {self.runner_up_score:.3f}, "
            f"margin {self.margin:.3f} (>= {self.margin_threshold:.3f}?)"
            + (f"; failed: {self.failed_gate}" if self.failed_gate else f"; sources: {', '.join(self.sources)}")
        )


def route_many(
    questions: Sequence[str],
    boundary_gate: Gate,
    retrieval_gate: RetrievalGate,
    scope: Scope,
    *,
    n_sources: int = 3,
) -> list[RoutingVerdict]:
    """Decide the path of each question, before any generation; the questions are embedded in one batch.

    1. Boundary: best cosine to the in-scope examples below `boundary_gate.threshold_`
       -> OUT_OF_SCOPE (answer, if at all, clearly labelled as not from the corpus).
    2. Retrieval confidence: top score below `retrieval_gate.score_threshold_`, or margin
       to the runner-up (best chunk of another section) below its threshold
       -> ASK (say the corpus does not support an answer).
    3. Otherwise ACT, with the first `n_sources` distinct sections as sources.

    `scope` holds the index searched and the in-scope examples (`Scope`).
    """
    require_fitted(boundary_gate, "threshold_", "route_many")
    require_fitted(retrieval_gate, "score_threshold_", "route_many")
    questions = _questions_list(questions)
    index = scope.index
    b_scores = boundary_scores(questions, scope.example_questions, scope.embed) if questions else np.zeros(0)
    all_hits = index.search_many(questions, k=len(index.chunks)) if questions else []
    verdicts = []
    for q, b, hits in zip(questions, b_scores, all_hits):
        f = _features_from_hits(hits)
        if not b >= boundary_gate.threshold_:
            failed = "boundary"
        else:
            failed = retrieval_gate.failed_check(f["top_score"], f["margin"])
        route = (Action.OUT_OF_SCOPE if failed == "boundary" else
                 Action.ASK if failed else Action.ACT)
        sources: tuple[str, ...] = ()
        if route is Action.ACT:
            sources = tuple(dict.fromkeys(h.chunk.section_id for h in distinct_units(hits)))[:n_sources]
        verdicts.append(RoutingVerdict(
            question=q, route=route,
            boundary_score=float(b), boundary_threshold=boundary_gate.threshold_,
            top_score=f["top_score"], runner_up_score=f["runner_up_score"], margin=f["margin"],
            score_threshold=retrieval_gate.score_threshold_, margin_threshold=retrieval_gate.margin_threshold_,
            failed_gate=failed, top_section_id=f["top_section_id"],
            runner_up_section_id=f["runner_up_section_id"], sources=sources,
            ranked_sections=_ranked_sections(hits),
        ))
    return verdicts


def gate_tradeoff(question_types: Sequence[str], boundary_passed, features: pd.DataFrame,
                  score_threshold: float, margin_threshold: float) -> tuple[pd.Series, pd.DataFrame]:
    """What the two gates decide on labelled questions when the retrieval thresholds are moved.

    The computation behind the threshold sliders of notebook 02: the boundary's verdicts
    stay fixed, the retrieval gate is `RetrievalGate` with the given thresholds.

    Args:
        question_types: `shape (n,)`, each "answerable", "unanswerable" or "out_of_scope".
        boundary_passed: bools of `shape (n,)`, the boundary gate's verdicts.
        features: `retrieval_features` of the questions that passed the boundary, in
            their order (`sum(boundary_passed)` rows, columns top_score and margin).
        score_threshold, margin_threshold: the retrieval gate's two thresholds.

    Returns:
        (summary, routes). summary: grounded (count), precision (the answerable share of
        ACT, NaN when nothing is grounded) and recall (the ACT share of the
        answerable questions past the boundary), as for the fitted gates. routes: counts
        of question type (rows, QUESTION_TYPES order) by route (columns act, ask, out_of_scope).
    """
    types = np.asarray(list(question_types), dtype=object)
    passed = _as_bool(boundary_passed, len(types), "gate_tradeoff")
    if len(features) != int(passed.sum()):
        raise ValueError(f"gate_tradeoff: {len(features)} feature rows for {int(passed.sum())} questions "
                         "past the boundary")
    unknown = set(types) - set(QUESTION_TYPES)
    if unknown:
        raise ValueError(f"gate_tradeoff: unknown question types {sorted(unknown)}; use {QUESTION_TYPES}")
    answerable = types[passed] == "answerable"
    grounded = RetrievalGate(score_threshold=score_threshold, margin_threshold=margin_threshold).fit(
        features, answerable).predict(features)
    routes = np.full(len(types), Action.OUT_OF_SCOPE.value, dtype=object)
    routes[passed] = np.where(grounded, Action.ACT.value, Action.ASK.value)
    summary = pd.Series({
        "grounded": int(grounded.sum()),
        "precision": float(answerable[grounded].mean()) if grounded.any() else math.nan,
        "recall": float(grounded[answerable].mean()) if answerable.any() else math.nan,
    })
    table = pd.crosstab(pd.Series(types, name="type"), pd.Series(routes, name="route")).reindex(
        index=list(QUESTION_TYPES), columns=[a.value for a in GATE_ROUTES], fill_value=0)
    return summary, table


def _ranked_sections(hits: Sequence[Hit]) -> tuple[tuple[str, str], ...]:
    """(section id, heading) of each section among `hits`, in hit order, first occurrence only."""
    ranked: dict[str, str] = {}
    for hit in hits:
        ranked.setdefault(hit.chunk.section_id, hit.chunk.heading)
    return tuple(ranked.items())
