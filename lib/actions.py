"""The one vocabulary of actions: what the system does with a request, in every decision of the course.

`Action` (act, ask, out_of_scope, hand_over) is what the routers of `lib.routing`, the gates of
`lib.retrieval`, the scope decision of `lib.out_of_scope` and the assistant decide, and what
`lib.plots` colours. It sits at the bottom of `lib` so that each of them can name it.
"""
from __future__ import annotations

from enum import Enum

__all__ = ["Action"]


class Action(str, Enum):
    """What the system does with one request: the one vocabulary of every decision in the course.

    Compares equal to its string value ("act", ...). ACT carries out the request (an intent's
    action, or an answer from the corpus); ASK puts a clarifying question to the user;
    OUT_OF_SCOPE says the request is outside what the system covers; HAND_OVER passes it to a
    person. The routers here use ACT, ASK and HAND_OVER; the retrieval gates of Part I and the
    assistant also use OUT_OF_SCOPE.
    """

    ACT = "act"
    ASK = "ask"
    OUT_OF_SCOPE = "out_of_scope"
    HAND_OVER = "hand_over"

    def __str__(self) -> str:
        """Print as the plain value ("act"), also in pandas tables and f-strings."""
        return self.value
