"""The OpenAI-compatible backend: any server with OpenAI's /v1/chat/completions.

llama.cpp's llama-server, llama-cpp-python's server, Ollama's /v1, vLLM and OpenAI itself
answer the same requests. `OpenAICompatibleLLM` offers the API of `lib.backends.protocol.LLM` over HTTP;
every way a server can fail raises `ServerUnavailableError` (nothing answers) or `ServerError`
(an unusable answer), naming the URL, and what a server cannot do raises
`lib.backends.protocol.CapabilityError` saying what to use instead.
"""
from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlparse

from lib.backends.common import LocalMethods, check_generation_args, library_versions
from lib.backends.protocol import (CapabilityError, Completion, JsonSchema, Message, NextTokenLogprobs, TokenLogprob,
                                   neutralise_template_tokens, validate_messages)
from lib.settings import DEFAULT_SERVER_TOP_LOGPROBS, check_api_key, check_base_url, timeout_setting

__all__ = [
    "ServerUnavailableError", "ServerError", "BASE_DEADLINE_S", "SLOWEST_READING_CHARS_PER_S",
    "SLOWEST_WRITING_TOKENS_PER_S", "MAX_REPLY_BYTES", "sized_deadline", "OpenAICompatibleLLM",
]


class ServerUnavailableError(RuntimeError):
    """The OpenAI-compatible server did not answer; the message names the URL and how to start one."""


class ServerError(RuntimeError):
    """The server answered, but not with a usable reply (an error status, a body that is not a chat
    completion, a broken connection, no answer within the deadline); the message names the URL
    and what was wrong."""


BASE_DEADLINE_S = 30.0
"""Seconds every server request may take before the work its size adds: starting, queueing
behind another learner's request, the network."""
SLOWEST_READING_CHARS_PER_S = 50.0
"""The slowest prompt reading the default deadline allows for: about 12 tokens a second, a
2-core laptop serving a few learners at once (this machine alone reads about 20 times faster)."""
SLOWEST_WRITING_TOKENS_PER_S = 2.0
"""The slowest writing the default deadline allows for, in reply tokens a second."""
MAX_REPLY_BYTES = 8 * 1024 * 1024
"""The largest answer read from a server: a 4,096-token reply with 20 candidates per token is
about 5 MB; a bigger one is a server gone wrong, refused before it fills the memory."""


def sized_deadline(prompt_chars: int, max_tokens: int = 0) -> float:
    """The default deadline in seconds for a request that sends `prompt_chars` characters and may
    write `max_tokens` tokens: BASE_DEADLINE_S plus the time the slowest hardware the workbook
    allows for needs to read and write that much.

    A full-list decision (a 77-intent prompt of about 7,000 characters, a few reply tokens) gets
    about three minutes; a short question about 35 s. A stuck server is still reported within
    minutes, and nothing answering at all is reported at once.
    """
    return BASE_DEADLINE_S + prompt_chars / SLOWEST_READING_CHARS_PER_S + max_tokens / SLOWEST_WRITING_TOKENS_PER_S


@dataclass(frozen=True)
class _Reply:
    """A server's whole answer: status, body text, and the URL it came from (for error messages)."""

    url: str
    status: int
    text: str

    def json(self) -> Any:
        if not self.text.strip():
            raise ServerError(f"{self.url} answered {self.status} with an empty body, not JSON: the server stopped "
                              "before answering, or is not an OpenAI-compatible server")
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as error:
            raise ServerError(f"{self.url} answered {self.status} with a body that is not JSON ({error}): "
                              f"{self.text[:300]!r}") from None


_REFUSED_CAPABILITY = re.compile(r"logits_all|logprobs?\b[^.]{0,80}\b(not supported|unsupported|not available|"
                                 r"not enabled|disabled)|(not support|does not support|cannot return)[^.]{0,80}logprobs",
                                 re.IGNORECASE)
"""How servers say they cannot return token log-probabilities (llama_cpp.server without --logits_all,
vLLM and others); any other error that merely mentions logprobs is the server's own error."""


def _completion_problem(body: Any) -> str | None:
    """What keeps `body` from being an OpenAI chat completion, or None when it is one."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return "no choices"
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return "choices[0] has no message"
    if not isinstance(choice["message"].get("content") or "", str):
        return "choices[0].message.content is not text"
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    for item in content or []:
        if not (isinstance(item, dict) and isinstance(item.get("token"), str)
                and isinstance(item.get("logprob"), (int, float))):
            return "a token of choices[0].logprobs.content has no token text or no logprob number"
        for candidate in item.get("top_logprobs") or []:
            if not (isinstance(candidate, dict) and isinstance(candidate.get("token"), str)
                    and isinstance(candidate.get("logprob"), (int, float))):
                return "a top_logprobs candidate has no token text or no logprob number"
        for logprob in (item["logprob"], *(candidate["logprob"] for candidate in item.get("top_logprobs") or [])):
            if isinstance(logprob, bool) or not (math.isfinite(logprob) and logprob <= _LOGPROB_ROUNDING):
                return (f"token {item['token']!r} has the logprob {logprob!r}; a log-probability is a finite number "
                        "at most 0 (a probability at most 1)")
    return None


_LOGPROB_ROUNDING = 1e-6
"""How far above 0 a log-probability may be from a server's float rounding."""


def _watch(opened: list[socket.socket]) -> Any:
    """An httpcore trace hook that adds to `opened` the socket each new connection of the request opens."""
    def trace(event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            opened.append(info["return_value"].get_extra_info("socket"))
    return trace


def _shut(opened: list[socket.socket]) -> None:
    """Shut the request's connections (its deadline passed): the read waiting on one returns at once.
    httpx has no deadline for a whole request, only for each read, which a trickle never reaches."""
    for connection in opened:
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass


class OpenAICompatibleLLM(LocalMethods):
    """Any server with OpenAI's /v1/chat/completions: llama-server, llama-cpp-python, Ollama, vLLM, OpenAI.

    Every request has one deadline for the whole exchange, not a limit per read: `timeout`
    seconds when given, else $WORKBOOK_TIMEOUT, else `sized_deadline` of the request (so a
    full-list decision needs no setting). A server that trickles a byte every few seconds is
    stopped once the deadline has passed (at most one read later).
    Every way a server can fail raises ServerUnavailableError (nothing answers) or
    ServerError (an unusable answer), naming the URL.
    """

    backend_name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_top_logprobs: int = DEFAULT_SERVER_TOP_LOGPROBS, timeout: float | None = None) -> None:
        import httpx

        self._httpx = httpx
        self.base_url = check_base_url(base_url, "base_url").rstrip("/")
        self.model = model
        self.max_top_logprobs = max_top_logprobs
        self.timeout = timeout_setting() if timeout is None else timeout
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        api_key = check_api_key(api_key, "api_key")
        self._api_key = api_key  # only to redact it from the server's words (`_redacted`)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # follow_redirects=False (httpx's default, said here on purpose): the Authorization header must
        # reach no other host than base_url's; a redirect is reported instead (`_request`). No kept-alive
        # connections: each request opens its own, which `_request`'s deadline can close (`_watch`).
        self._client = httpx.Client(headers=headers, follow_redirects=False,
                                    limits=httpx.Limits(max_keepalive_connections=0))
        self._schema_style = "json_schema"
        self._is_openai = urlparse(self.base_url).hostname == "api.openai.com"

    @property
    def identity(self) -> str:
        return f"openai:{self.model}"

    def _redacted(self, text: str) -> str:
        """`text` (a server's answer, an error) with the API key replaced by [API key]: a server that
        echoes the request's headers must not put the key into an error message."""
        return text.replace(self._api_key, "[API key]") if self._api_key else text

    def _root_url(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def _request(self, method: str, url: str, payload: dict | None = None, *, size_chars: int = 0,
                 max_tokens: int = 0) -> _Reply:
        """Send one request and read the whole answer before the deadline (`self.timeout`, or
        `sized_deadline(size_chars, max_tokens)` when no fixed one is set)."""
        httpx = self._httpx
        seconds = self.timeout if self.timeout is not None else sized_deadline(size_chars, max_tokens)
        deadline = time.monotonic() + seconds
        why = ("WORKBOOK_TIMEOUT" if self.timeout is not None
               else "the default deadline for a request of this size; WORKBOOK_TIMEOUT sets a fixed one")
        late = ServerError(f"{url} did not finish answering within {seconds:g} s ({why}); the server is "
                           "overloaded or stuck. Raise WORKBOOK_TIMEOUT for slow hardware")
        opened: list[socket.socket] = []
        watchdog = threading.Timer(seconds, _shut, args=(opened,))  # stops a server that trickles even its headers
        watchdog.daemon = True
        watchdog.start()
        too_big = ServerError(f"{url} answered with more than {MAX_REPLY_BYTES // 2**20} MB, the most a chat "
                              "completion needs; the server is not answering as an OpenAI-compatible server does")
        try:
            with self._client.stream(method, url, json=payload, timeout=seconds,
                                     extensions={"trace": _watch(opened)}) as response:
                if response.is_redirect:
                    where = self._redacted(response.headers.get("location", "")[:200])
                    raise ServerError(f"{url}: the server redirected ({response.status_code}) to {where!r}; the "
                                      "workbook does not follow redirects, so the API key reaches no other host. "
                                      "Set WORKBOOK_BASE_URL to the address that answers")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
                    raise too_big
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_REPLY_BYTES:
                        raise too_big
                    if time.monotonic() > deadline:
                        raise late
                text = body.decode(response.encoding or "utf-8", errors="replace")
                return _Reply(url, response.status_code, self._redacted(text))
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ServerUnavailableError(
                f"no answer from the model server at {self.base_url} ({type(error).__name__}). Start one, "
                "e.g. `python -m llama_cpp.server --model .cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "
                "--host 127.0.0.1 --port 8080 --model_alias qwen2.5-coder-1.5b-instruct --n_ctx 4096 --logits_all true` "
                "and set WORKBOOK_BASE_URL="
                "http://127.0.0.1:8080/v1, or unset WORKBOOK_BACKEND to use the embedded model."
            ) from None
        except httpx.TimeoutException:
            raise late from None
        except httpx.TransportError as error:
            if time.monotonic() > deadline:  # the watchdog closed the connection
                raise late from None
            raise ServerError(f"{url}: the server closed or broke the connection before its answer was complete "
                              f"({type(error).__name__}: {self._redacted(str(error))})") from None
        finally:
            watchdog.cancel()

    def _post_json(self, url: str, payload: dict) -> Any:
        reply = self._request("POST", url, payload)
        if reply.status >= 400:
            raise ServerError(f"{url} answered {reply.status}: {reply.text[:500]}")
        return reply.json()

    def info(self) -> dict[str, object]:
        """The embedded backend's keys where a server reports them, else None: a server does not
        say which file it loaded, its size or its parameters, and only llama-server reports its
        context (on /props); plus the server's URL and the model ids it serves."""
        url = f"{self.base_url}/models"
        reply = self._request("GET", url)
        listing = None
        if reply.status < 400:
            try:
                listing = json.loads(reply.text)
            except json.JSONDecodeError:
                pass
        models = listing.get("data") if isinstance(listing, dict) else None
        if not (isinstance(models, list) and all(isinstance(m, dict) and "id" in m for m in models)):
            raise ServerError(f"{url} answered {reply.status} without a model list ({reply.text[:200]!r}): this is "
                              "not an OpenAI-compatible server, or WORKBOOK_BASE_URL misses its /v1")
        return {"backend": self.backend_name, "model": self.model, "base_url": self.base_url,
                "server_models": [m["id"] for m in models], "file": None, "file_bytes": None, "sha256": None,
                "licence": None, "parameters": None, "context_tokens": self._reported_context(), "threads": None,
                "versions": library_versions()}

    def _reported_context(self) -> int | None:
        """The context size llama-server reports on /props, or None from a server without it."""
        reply = self._request("GET", f"{self._root_url()}/props")
        try:
            settings = json.loads(reply.text).get("default_generation_settings") if reply.status < 400 else None
        except (json.JSONDecodeError, AttributeError):
            return None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None

    def _schema_format(self, schema: dict) -> dict:
        if self._schema_style == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        return {"type": "json_object", "schema": schema}

    def chat(self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0,
             seed: int | None = None, grammar: str | None = None,
             json_schema: JsonSchema | None = None, top_logprobs: int = 0) -> Completion:
        messages = validate_messages(messages)
        check_generation_args(max_tokens, temperature, top_logprobs, grammar, json_schema)
        if top_logprobs > self.max_top_logprobs:
            raise CapabilityError(
                f"this server gives at most {self.max_top_logprobs} top candidates per token; ask for fewer, "
                "raise WORKBOOK_MAX_TOP_LOGPROBS if your server allows more, or use the embedded backend")
        if grammar is not None and self._is_openai:
            raise CapabilityError("OpenAI's API has no GBNF grammar; pass json_schema= (structured outputs) "
                                  "or use the embedded backend or a llama.cpp server")
        messages = [{"role": m["role"], "content": neutralise_template_tokens(m["content"])} for m in messages]
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                   "temperature": temperature, "logprobs": True}
        # At least one candidate: llama_cpp.server sends no token log-probabilities at all without
        # top_logprobs, and the chosen tokens' own log-probabilities are part of every completion.
        payload["top_logprobs"] = max(top_logprobs, 1)
        if seed is not None:
            payload["seed"] = seed
        if grammar is not None:
            payload["grammar"] = grammar
        start = time.perf_counter()
        url = f"{self.base_url}/chat/completions"
        if json_schema is not None:
            payload["response_format"] = self._schema_format(json_schema)
        size = sum(len(m["content"]) for m in messages) + len(grammar or "") + len(json.dumps(json_schema or ""))
        response = self._request("POST", url, payload, size_chars=size, max_tokens=max_tokens)
        if json_schema is not None and response.status >= 400 and "response_format" in response.text:
            self._schema_style = "json_object" if self._schema_style == "json_schema" else "json_schema"
            payload["response_format"] = self._schema_format(json_schema)
            response = self._request("POST", url, payload, size_chars=size, max_tokens=max_tokens)
        if response.status >= 400:
            if _REFUSED_CAPABILITY.search(response.text):
                raise CapabilityError(f"{url} refused token logprobs ({response.text[:300]}). Start "
                                      "llama_cpp.server with --logits_all true, or use the embedded backend")
            raise ServerError(f"{url} answered {response.status}: {response.text[:500]}")
        body = response.json()
        seconds = time.perf_counter() - start
        problem = _completion_problem(body)
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        counts = [usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)]
        if problem is None and not all(isinstance(count, int) for count in counts):
            problem = "usage holds token counts that are not integers"
        if problem is not None:
            raise ServerError(f"{url} answered JSON that is not a chat completion ({problem}): {response.text[:300]}")
        choice = body["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        steps = tuple(
            TokenLogprob(item["token"], float(item["logprob"]),
                         tuple(sorted(((c["token"], float(c["logprob"])) for c in item.get("top_logprobs") or []),
                                      key=lambda pair: -pair[1]))[:top_logprobs])
            for item in content
        )
        text = choice["message"].get("content") or ""
        if top_logprobs and (any(not step.top for step in steps) or text and not steps):
            sent = "none" if not steps else "tokens without any"
            raise ServerError(f"the server at {self.base_url} returned no logprobs: {url} was asked for the top "
                              f"{top_logprobs} candidates of each token and sent {sent}, so no probability can be "
                              "read from its reply. Use a server that supports logprobs (llama_cpp.server with "
                              "--logits_all true) or the embedded backend")
        return Completion(text, choice.get("finish_reason") or "stop",
                          int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", len(steps))),
                          seconds, steps)

    def next_token_logprobs(self, messages: Sequence[Message], *, prefix: str = "", top_k: int = 20,
                            score_tokens: Sequence[str] = ()) -> NextTokenLogprobs:
        if prefix:
            raise CapabilityError("a chat server cannot continue a partial assistant reply (prefix=...); use "
                                  "chat(..., grammar=..., top_logprobs=k) and read the step you need from "
                                  "its tokens, or use the embedded backend")
        # `score_tokens` are looked up among as many candidates as the server gives (a server has no
        # way to score a token outside them); `top` keeps the `top_k` the caller asked for.
        asked = max(top_k, self.max_top_logprobs) if score_tokens else top_k
        completion = self.chat(messages, max_tokens=1, top_logprobs=asked)
        candidates = completion.tokens[0].top if completion.tokens else ()
        seen = dict(candidates)
        scores = {text: seen[text] for text in score_tokens if text in seen}
        return NextTokenLogprobs(candidates[:top_k], scores, completion.seconds)

    def tokenize(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        root = self._root_url()
        url = f"{root}/tokenize"
        response = self._request("POST", url, {"content": text, "with_pieces": True}, size_chars=len(text))
        if response.status < 400:  # llama-server
            return [item["piece"] if isinstance(item, dict) else str(item) for item in self._token_list(response)]
        url = f"{root}/extras/tokenize"
        response = self._request("POST", url, {"input": text}, size_chars=len(text))
        if response.status < 400:  # llama-cpp-python's server: ids only, so each is turned back into its text
            tokens = self._token_list(response)
            pieces = [self._post_json(f"{root}/extras/detokenize", {"tokens": [token]}) for token in tokens]
            if not all(isinstance(piece, dict) and isinstance(piece.get("text"), str) for piece in pieces):
                raise ServerError(f"{root}/extras/detokenize answered without a text")
            return [piece["text"] for piece in pieces]
        raise CapabilityError(f"the server at {self.base_url} offers no tokenizer endpoint; use the embedded "
                              "backend's tokenize")

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` costs, in one request whatever its length (`tokenize` needs one
        request per token on llama-cpp-python's server)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        root = self._root_url()
        response = self._request("POST", f"{root}/tokenize", {"content": text}, size_chars=len(text))
        if response.status < 400:  # llama-server
            return len(self._token_list(response))
        url = f"{root}/extras/tokenize/count"
        response = self._request("POST", url, {"input": text}, size_chars=len(text))
        if response.status < 400:  # llama-cpp-python's server
            count = response.json().get("count") if isinstance(response.json(), dict) else None
            if not isinstance(count, int):
                raise ServerError(f"{url} answered without a token count: {response.text[:300]}")
            return count
        raise CapabilityError(f"the server at {self.base_url} offers no tokenizer endpoint; use the embedded "
                              "backend's count_tokens")

    @staticmethod
    def _token_list(response: _Reply) -> list:
        body = response.json()
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise ServerError(f"{response.url} answered without a token list: {response.text[:300]}")
        return tokens
