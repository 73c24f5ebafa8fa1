"""The saved runs behind the tool-calling notebook (05), and how a conversation is scored.

Three runs, each made live by `python setup/run_saved.py --run NAME` (part of `make results`):

- `tools-conversations`: every committee case, the ten dev cases of notebook 04 first and then the
  held-out cases of `data/corpus/tool_cases.jsonl`, run through `lib.tools.run_tools` with the
  grammar, a simulated student who answers a question only with the case's `user_reply`, and the
  case's first turn generated once more without the grammar (to count free turns that parse);
- `tools-search-queries`: the dev split's answerable handbook questions, each turned by the model
  into one `search_handbook` query, to compare with searching for the question itself;
- `tools-asking-first`: the held-out committee and missing-fact cases again, with the loop's first
  turn narrowed to a question (`first_allowed=["ask_user"]`).

A row keeps each turn's text, the tool results and the seconds; `conversation_from_row` reads the
turns again with `lib.tools.parse_action`, so a saved conversation renders and scores like a live one.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from lib.datasets import CORPUS_DIR, load_corpus, load_questions
from lib.extraction import compare_extraction
from lib.hashing import fingerprint
from lib.indexes import DenseIndex, Embed, SearchIndex, chunk_by_heading
from lib.backends.protocol import LLM
from lib.saved_runs.items import Prepared
from lib.saved_runs.store import Row
from lib.rules import CommitteeMember, department_key
from lib.tools import (ASK_USER, MAX_STEPS, TOOL_MAX_TOKENS, Conversation, Tool, ToolStep, action_schema,
                       check_committee_tool, code_verdict, parse_action, relay_errors, run_tools,
                       search_handbook_tool, tools_system_prompt)

__all__ = [
    "CONVERSATIONS_RUN", "SEARCH_QUERIES_RUN", "ASKING_FIRST_RUN", "asks_about", "FREE_TURN_MAX_TOKENS", "NO_MORE_DETAILS", "load_tool_cases",
    "handbook_index", "course_tools", "simulated_user", "conversation_row", "conversation_from_row", "score_conversation", "TOOL_RUNS",
]

CONVERSATIONS_RUN = "tools-conversations"
SEARCH_QUERIES_RUN = "tools-search-queries"
ASKING_FIRST_RUN = "tools-asking-first"
FREE_TURN_MAX_TOKENS = 300
"""The free first turn's budget: a five-member check_committee call fits; a free turn that goes on
after its object (a made-up tool result, a second call) is cut there, and the first object is read."""
NO_MORE_DETAILS = "I have told you everything I know."
"""The simulated student's answer to a question about a case with no missing fact."""


def load_tool_cases() -> list[Row]:
    """Notebook 04's ten dev cases, as tool cases, then the held-out cases of `tool_cases.jsonl`.

    Every case has id, split ("dev" or "test"), kind ("committee", "missing-fact",
    "rule-question"), message, home_department, members (gold, complete), missing (None, or
    the member, field, gold question and the student's reply), expected_ok,
    expected_violations, expected_tool, section_ids and answer (rule questions).
    """
    dev = [json.loads(line) for line in (CORPUS_DIR / "committee_cases.jsonl").read_text(encoding="utf-8").splitlines()]
    held_out = [json.loads(line) for line in (CORPUS_DIR / "tool_cases.jsonl").read_text(encoding="utf-8").splitlines()]
    as_tool_case = [{"id": case["id"], "split": "dev", "kind": "committee", "message": case["description"],
                     "home_department": case["home_department"], "members": case["members"], "missing": None,
                     "expected_ok": case["expected_ok"], "expected_violations": case["expected_violations"],
                     "expected_tool": "check_committee", "section_ids": [], "answer": None}
                    for case in dev if case["split"] == "dev"]
    return as_tool_case + held_out


def handbook_index(embed: Embed) -> DenseIndex:
    """The course's index: the corpus chunked by heading, embedded by `embed` (as notebook 02 builds it)."""
    return DenseIndex(chunk_by_heading(load_corpus()), embed)


def course_tools(index: SearchIndex) -> list[Tool]:
    """The two tools the model may call: handbook search over `index`, and the committee checker."""
    return [search_handbook_tool(index), check_committee_tool()]


def simulated_user(case: Row) -> Callable[[str], str]:
    """The student of `case`: any question gets the case's `user_reply`, or `NO_MORE_DETAILS`."""
    reply = case["missing"]["user_reply"] if case.get("missing") else NO_MORE_DETAILS
    return lambda question: reply


def conversation_row(conversation: Conversation) -> Row:
    """A conversation as JSON: each turn's text, tool, result, seconds and tokens, and the outcome."""
    return {"outcome": conversation.outcome, "seconds": round(conversation.seconds, 2),
            "steps": [{"text": step.text, "tool": step.action.tool, "error": step.action.error, "result": step.result,
                       "seconds": round(step.seconds, 2), "tokens": step.tokens} for step in conversation.steps]}


def conversation_from_row(row: Row, case: Row, tools: Sequence[Tool]) -> Conversation:
    """The saved conversation of `case` again, each turn's text parsed as the loop parsed it."""
    system = tools_system_prompt(tools)
    steps = [ToolStep(step["text"], parse_action(step["text"], tools), step["result"], step["seconds"], step["tokens"])
             for step in row["steps"]]
    return Conversation([{"role": "system", "content": system}, {"role": "user", "content": case["message"]}],
                        steps, row["outcome"])


def score_conversation(conversation: Conversation, case: Row) -> Row:
    """What one conversation got right, as the notebook's table counts it.

    first_tool: the first action's tool; right_tool: it is the case's `expected_tool` (for a
    missing fact: `ask_user`); asked / invented: a missing fact was asked for before the first
    check, or the checker was called without asking; needless_ask: a question in a case with
    nothing missing; checked_right: the last check's verdict and violated rules equal the gold
    ones; fields_right / fields: its members' facts against the gold facts (as notebook 04
    compares them); home_right: it names the student's home department; relay_errors: the model's final verdict against the check it ran (empty when
    they agree); code_relay_errors: the same for the code-written verdict.
    """
    calls = conversation.calls
    first_tool = calls[0].action.tool if calls else (conversation.steps[0].action.tool if conversation.steps else None)
    missing = case.get("missing") is not None
    tools_in_order = [step.action.tool for step in calls]
    first_check = tools_in_order.index("check_committee") if "check_committee" in tools_in_order else None
    asked_before_check = ASK_USER in tools_in_order[:first_check]
    check = conversation.last_check()
    row: Row = {
        "id": case["id"], "split": case["split"], "kind": case["kind"], "outcome": conversation.outcome,
        "first_tool": first_tool,
        "right_tool": first_tool == (ASK_USER if missing else case["expected_tool"]),
        "asked": missing and asked_before_check, "invented": missing and first_check is not None and not asked_before_check,
        "needless_ask": not missing and ASK_USER in tools_in_order, "checked": check is not None,
        "seconds": conversation.seconds, "turns": len(conversation.steps),
    }
    if case["kind"] != "rule-question":
        members = [CommitteeMember(**member) for member in case["members"]]
        found = check.action.arguments.members if check is not None else []
        comparison = compare_extraction(found, members)
        row |= {"checked_right": check is not None and check.result["violated_rules"] == case["expected_violations"],
                "fields_right": comparison.fields_right if check else 0, "fields": len(members) * 4,
                "home_right": check is not None and department_key(check.action.arguments.home_department)
                == department_key(case["home_department"])}
    checked = check.result if check is not None else None
    row["relay_errors"] = relay_errors(conversation.final, checked)
    row["code_relay_errors"] = relay_errors(code_verdict(conversation), checked)
    return row


def _conversations_run(llm: LLM, results_dir: Path) -> Prepared:
    tools = course_tools(handbook_index(llm.embed))
    system = tools_system_prompt(tools)
    schema = action_schema(tools)
    items = load_tool_cases()

    def compute(i: int, case: Row) -> Row:
        conversation = run_tools(llm, case["message"], tools, system=system, user=simulated_user(case))
        free = llm.chat(conversation.messages, max_tokens=FREE_TURN_MAX_TOKENS)
        parsed = parse_action(free.text, tools)
        return {"id": case["id"], **conversation_row(conversation),
                "free_first": {"text": free.text, "tool": parsed.tool, "error": parsed.error,
                               "seconds": round(free.seconds, 2), "tokens": free.completion_tokens}}

    settings = {"system": fingerprint(system), "schema": fingerprint(schema), "max_steps": MAX_STEPS,
                "max_tokens": TOOL_MAX_TOKENS, "free_max_tokens": FREE_TURN_MAX_TOKENS, "cases": fingerprint(items)}
    return items, compute, settings


def _search_queries_run(llm: LLM, results_dir: Path) -> Prepared:
    tools = course_tools(handbook_index(llm.embed))
    system = tools_system_prompt(tools)
    questions = load_questions()
    items = questions[(questions["split"] == "dev") & (questions["type"] == "answerable")].sort_values("id")
    items = [{"id": row.id, "question": row.question} for row in items.itertuples()]

    def compute(i: int, item: Row) -> Row:
        conversation = run_tools(llm, item["question"], tools, system=system, max_steps=1, allowed=["search_handbook"])
        step = conversation.steps[0]
        return {"id": item["id"], "query": step.action.arguments.query if step.action.ok else None,
                "seconds": round(step.seconds, 2)}

    return items, compute, {"system": fingerprint(system), "allowed": ["search_handbook"], "items": fingerprint(items)}


def _asking_first_run(llm: LLM, results_dir: Path) -> Prepared:
    tools = course_tools(handbook_index(llm.embed))
    system = tools_system_prompt(tools)
    items = [case for case in load_tool_cases() if case["split"] == "test" and case["kind"] != "rule-question"]

    def compute(i: int, case: Row) -> Row:
        conversation = run_tools(llm, case["message"], tools, system=system, user=simulated_user(case),
                                 first_allowed=[ASK_USER])
        return {"id": case["id"], **conversation_row(conversation)}

    settings = {"system": fingerprint(system), "first_allowed": [ASK_USER], "max_steps": MAX_STEPS,
                "max_tokens": TOOL_MAX_TOKENS, "cases": fingerprint(items)}
    return items, compute, settings


_FIELD_WORDS = {"is_tenured_or_emeritus": ("tenur", "emerit"), "has_faculty_appointment": ("faculty", "appointment",
                "postdoc", "lecturer", "professor"), "primary_department": ("department",), "is_advisor": ("advis",)}


def asks_about(question: str, missing: Row) -> bool:
    """Whether `question` names the missing member (by surname) and the missing fact (by a word for it).

    A screen by words, so "Is Dr. Strand tenured?" passes and "Is Dr. Strand a professor of Geography?"
    does not (for tenure); a person reading the questions is the judge of the borderline ones.
    """
    folded = question.casefold()
    surname = missing["member"].split()[-1].casefold()
    return surname in folded and any(word in folded for word in _FIELD_WORDS[missing["field"]])


TOOL_RUNS = {CONVERSATIONS_RUN: _conversations_run, SEARCH_QUERIES_RUN: _search_queries_run,
             ASKING_FIRST_RUN: _asking_first_run}
"""How each saved run is prepared (`lib.saved_runs.items.item_producer` makes its producer): its items,
the function that computes a row, and the settings its header keeps."""
