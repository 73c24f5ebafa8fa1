"""The saved runs of notebook 04: every committee case extracted by each of the model's extractors.

One run per extractor of `lib.extraction` (`COMMITTEE_METHODS`), committees-{method}.jsonl: for
each case of data/corpus/committee_cases.jsonl (ten dev, ten held-out test) the members the
model read, whether the reply was valid, its calls, seconds and generated tokens, after a
header with the model and the fingerprint of every prompt, question, grammar and schema the
extractor uses (`committee_prompt_fingerprint`). `run_committee_cases` makes (or resumes) one,
live or from notebook 04's recording; `load_committee_run` reads it back as `CommitteeRun`.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lib.backends.common import library_versions
from lib.backends.protocol import LLM
from lib.datasets import CORPUS_DIR
from lib.extraction import (EVIDENCE_INTRO, EXTRACTION_SYSTEM_PROMPT, NAMES_REQUEST, QUESTIONS_SYSTEM_PROMPT,
                            UNSURE_BELOW, CommitteeExtraction, CommitteeNames, ExtractionResult, department_grammar,
                            extract_committee, extract_committee_by_questions, member_questions)
from lib.grammar import schema_for_model
from lib.hashing import fingerprint
from lib.rules import CommitteeMember
from lib.saved_runs.items import Producer, RunOptions, progress_bar
from lib.saved_runs.store import RESULTS_DIR, ResultsStore, Row, run_command

__all__ = [
    "COMMITTEE_METHODS", "committee_run_name", "committee_run_path", "committee_prompt_fingerprint", "extract_case",
    "run_committee_cases", "CommitteeRun", "load_committee_run", "load_committee_cases", "committee_producer",
]

COMMITTEE_METHODS: tuple[str, ...] = ("one-call", "by-questions", "questions-with-evidence",
                                      "evidence-when-unsure")
"""The extractors a saved run can use: `extract_committee` (all fields in one JSON reply),
`extract_committee_by_questions` (the names, then three closed questions per member), and the
same with the sentences that name the member quoted before every question (`quote_evidence="always"`)
or only before a question whose plain answer was unsure (`quote_evidence="when unsure"`)."""


def committee_run_name(method: str) -> str:
    """The saved run of the committee cases extracted by `method`: committees-{method}."""
    if method not in COMMITTEE_METHODS:
        raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")
    return f"committees-{method}"


def committee_run_path(method: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Where the saved extractions of the committee cases by `method` live."""
    return Path(results_dir) / f"{committee_run_name(method)}.jsonl"


def committee_prompt_fingerprint(method: str) -> str:
    """A hash of everything that shapes `method`'s requests: prompts, questions, grammars, schemas."""
    if method == "one-call":
        return fingerprint({"system": EXTRACTION_SYSTEM_PROMPT, "schema": schema_for_model(CommitteeExtraction)})
    if method == "by-questions":
        return fingerprint({"system": QUESTIONS_SYSTEM_PROMPT, "names": NAMES_REQUEST,
                            "questions": member_questions("{name}"), "department grammar": department_grammar(),
                            "schema": schema_for_model(CommitteeNames)})
    if method == "questions-with-evidence":
        return fingerprint({"system": QUESTIONS_SYSTEM_PROMPT, "names": NAMES_REQUEST, "evidence": EVIDENCE_INTRO,
                            "questions": member_questions("{name}", evidence="{evidence}"),
                            "department grammar": department_grammar(), "schema": schema_for_model(CommitteeNames)})
    if method == "evidence-when-unsure":
        return fingerprint({"system": QUESTIONS_SYSTEM_PROMPT, "names": NAMES_REQUEST, "evidence": EVIDENCE_INTRO,
                            "questions": member_questions("{name}"), "unsure_below": UNSURE_BELOW,
                            "quoted questions": member_questions("{name}", evidence="{evidence}"),
                            "department grammar": department_grammar(), "schema": schema_for_model(CommitteeNames)})
    raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")


def extract_case(llm: LLM, case: Mapping[str, object], method: str) -> ExtractionResult:
    """Extract one committee case (a line of committee_cases.jsonl) with `method`."""
    if method == "one-call":
        return extract_committee(llm, case["description"], case["home_department"])
    if method == "by-questions":
        return extract_committee_by_questions(llm, case["description"])
    if method == "questions-with-evidence":
        return extract_committee_by_questions(llm, case["description"], quote_evidence="always")
    if method == "evidence-when-unsure":
        return extract_committee_by_questions(llm, case["description"], quote_evidence="when unsure")
    raise ValueError(f"method must be one of {COMMITTEE_METHODS}, got {method!r}")


_COMMITTEE_ROW_FIELDS: tuple[str, ...] = ("case", "ok", "errors", "members", "calls", "seconds", "generated_tokens")
"""The fields of one case's line in a saved committee run."""


def _committee_store(method: str, results_dir: Path = RESULTS_DIR) -> ResultsStore:
    """The store of `method`'s saved run: rows by case id."""
    return ResultsStore(committee_run_path(method, results_dir), run_command(committee_run_name(method), Path(results_dir)),
                        {"row": _COMMITTEE_ROW_FIELDS}, key="case", key_type=str,
                        names={"method": method})


def run_committee_cases(llm: LLM, method: str, cases: Sequence[Mapping[str, object]], *, mode: str = "live",
                        results_dir: Path = RESULTS_DIR, progress: bool = True) -> Path:
    """Extract every case with `method` and append one JSON line per case to the saved run.

    Resumable: cases already in the file are skipped, so an interrupted run continues where
    it stopped. A new file starts with a header naming the model, the prompt fingerprint, the
    `mode` its answers came from ("live", or "replay": a notebook's recording), library versions
    and the command that makes it. The file is written by its `lib.saved_runs.store.ResultsStore`:
    resuming a file whose model or fingerprint differs raises instead of mixing two runs, a file
    with rows but no header is refused, and a last line cut short by a kill is removed (with a warning).
    """
    store = _committee_store(method, results_dir)
    header = {"model": llm.identity, "backend": llm.backend_name, "fingerprint": committee_prompt_fingerprint(method),
              "command": store.command, "method": method, "mode": mode, "versions": library_versions(),
              "date": datetime.date.today().isoformat()}
    with store.writing(header, checked=("model", "fingerprint")) as (content, append):
        todo = [case for case in cases if case["id"] not in content.rows]
        bar = progress_bar(len(cases), len(cases) - len(todo), f"committees {method}", progress)
        for case in todo:
            result = extract_case(llm, case, method)
            append({"kind": "row", "case": case["id"], "ok": result.ok, "errors": list(result.errors),
                    "members": None if result.members is None else [m.model_dump() for m in result.members],
                    "calls": len(result.completions),
                    "seconds": round(sum(c.seconds for c in result.completions), 2),
                    "generated_tokens": sum(c.completion_tokens for c in result.completions)})
            bar.update(1)
        bar.close()
    return store.path


@dataclass(frozen=True)
class CommitteeRun:
    """A saved run read back: its header, and per case id the extracted members (None: failed)."""

    header: Row
    members: dict[str, list[CommitteeMember] | None]
    rows: dict[str, Row]


def load_committee_run(method: str, results_dir: Path = RESULTS_DIR) -> CommitteeRun:
    """Read the saved extractions of `method`; FileNotFoundError naming the command that makes them when there are none."""
    store = _committee_store(method, results_dir)
    content = store.read()
    if content.header is None or not content.rows:
        raise FileNotFoundError(f"{store.path} does not exist or holds no rows; make it with `{store.command}`")
    members = {case: None if row["members"] is None else [CommitteeMember(**m) for m in row["members"]]
               for case, row in content.rows.items()}
    return CommitteeRun(content.header, members, content.rows)


def load_committee_cases() -> list[Row]:
    """The committee cases of data/corpus/committee_cases.jsonl, dev and test: id, split, description,
    home_department, the gold members and the expected verdict."""
    lines = (CORPUS_DIR / "committee_cases.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def committee_producer(method: str) -> Producer:
    """The producer of `method`'s saved run: every committee case extracted by the options' model."""
    def produce(options: RunOptions) -> Path:
        return run_committee_cases(options.model(), method, load_committee_cases(), mode=options.mode,
                                   results_dir=options.results_dir, progress=options.progress)

    return produce
