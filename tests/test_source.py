"""code_without_docstring drops exactly the docstring and keeps every other line."""
import pytest

from lib.source import code_without_docstring
from lib.selective import oracle_aurc


def documented(x: int) -> int:
    '''Single-quoted docstring
    over two lines, with """ inside.'''
    text = """a string in the body stays"""  # and this comment
    return x + len(text)


def undocumented(x):
    return x


class Holder:
    """Class docstring."""

    def method(self):
        """Method docstring."""
        return 1


def test_function_docstring_removed_body_kept():
    code = code_without_docstring(documented)
    assert "Single-quoted docstring" not in code and "over two lines" not in code
    assert 'text = """a string in the body stays"""  # and this comment' in code
    assert code.startswith("def documented(x: int) -> int:\n")
    assert code.endswith("return x + len(text)\n")


def test_without_docstring_unchanged():
    assert code_without_docstring(undocumented) == "def undocumented(x):\n    return x\n"


def test_method_is_dedented_and_class_keeps_method_docstrings():
    assert code_without_docstring(Holder.method) == "def method(self):\n    return 1\n"
    code = code_without_docstring(Holder)
    assert "Class docstring" not in code and "Method docstring" in code


def test_library_function():
    code = code_without_docstring(oracle_aurc)
    assert code.startswith("def oracle_aurc(") and "lowest AURC" not in code and "return float(risk.mean())" in code


def test_builtin_has_no_source():
    with pytest.raises(TypeError):
        code_without_docstring(len)
