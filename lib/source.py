"""Show a library function's code in a notebook, without its docstring.

A lesson sometimes wants the learner to read the few lines that do the work. Printing
`inspect.getsource(f)` shows the docstring first, and cutting the text at triple
quotes breaks as soon as a docstring uses the other quote style or a string inside the
body does. `show_code` parses the source and drops exactly the docstring node.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["code_without_docstring", "show_code"]


def code_without_docstring(obj: object) -> str:
    """Source of a function, method or class, dedented, with its own docstring removed.

    Only the docstring of `obj` itself goes; docstrings of methods inside a class stay,
    and so do comments and every other line. Raises TypeError (from `inspect`) for
    objects without Python source, such as built-ins.
    """
    source = textwrap.dedent(inspect.getsource(obj))
    definition = ast.parse(source).body[0]
    body = getattr(definition, "body", None)
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(getattr(body[0], "value", None), ast.Constant) \
            or not isinstance(body[0].value.value, str):
        return source.rstrip() + "\n"
    lines = source.splitlines()
    docstring = body[0]
    del lines[docstring.lineno - 1:docstring.end_lineno]
    return "\n".join(lines).rstrip() + "\n"


def show_code(obj: object) -> None:
    """Print `code_without_docstring` of `obj` (for notebooks)."""
    print(code_without_docstring(obj), end="")
