"""`make load-test`: the requests it replays, a level of learners against a real server, the report."""
from __future__ import annotations

from setup.load_test import LevelResult, Request, figures, notebook_requests, report, run_level


def test_a_notebooks_requests_come_from_its_recording_and_prefix_calls_are_left_out():
    requests, left_out = notebook_requests("06-grammars")
    assert requests and left_out >= 1  # 06 reads one intent letter after a partial reply
    assert all(not (r.method == "next_token_logprobs" and r.arguments.get("prefix")) for r in requests)
    assert {"chat + grammar", "tokenize"} <= {r.kind for r in requests}


def test_learners_at_once_against_a_real_server_are_all_answered(server_url):
    requests = [Request("tokenize", {"text": "Where is my card?"}, "tokenize"),
                Request("chat", {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2}, "chat")]
    level = run_level(server_url, "qwen2.5-coder-1.5b-instruct", requests, learners=3, seconds=600)
    assert (len(level.latencies["tokenize"]), len(level.latencies["chat"])) == (3, 3)
    assert not level.errors and level.timeouts == 0 and level.not_sent == 0
    assert all(seconds > 0 for seconds in level.all_latencies())


def test_the_report_names_the_largest_level_under_the_p95_limit_with_nothing_lost():
    fast, slow, lossy = LevelResult(1), LevelResult(10), LevelResult(5)
    fast.latencies["chat"] += [1.0, 1.2, 1.4]
    lossy.latencies["chat"] += [1.0, 1.1]
    lossy.not_sent = 3
    slow.latencies["chat"] += [4.0, 9.0, 12.0]
    text = report([fast, lossy, slow], p95_limit=5.0)
    assert text.rstrip().endswith("every request sent: 1 learner(s) at once")
    assert "not even one learner" in report([slow], p95_limit=5.0)


def test_the_figures_name_the_engine_its_settings_and_count_reply_tokens_per_second():
    answered, silent = LevelResult(1, seconds=10.0, reply_tokens=25), LevelResult(5, seconds=4.0)
    answered.latencies["chat"] += [2.0, 3.0]
    silent.errors.append("chat: ServerError: 500")
    engine = figures("llama-server", {"slots": 4, "threads": 1}, [answered, silent], p95_limit=5.0)
    assert (engine["engine"], engine["slots"], engine["learners_held"]) == ("llama-server", 4, 1)
    first, second = engine["levels"]
    assert (first["answered"], first["reply_tokens_per_s"], first["p50_s"]) == (2, 2.5, 2.5)
    assert (second["answered"], second["errors"], second["p95_s"]) == (0, 1, None)  # nothing answered: no p95
