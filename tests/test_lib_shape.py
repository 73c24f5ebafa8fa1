"""The shape of `lib`, kept by tests so that it does not drift back.

* the import graph of `lib` (imports inside functions included) has no cycle, and its longest
  chain of modules, the import tower, is at most `MAX_CHAIN` floors: a module low in the graph
  (`checks`, `intervals`, `calibration`) can be read and tested without the model, the server or
  the saved runs;
* at most `MAX_FUNCTION_IMPORTS` imports of `lib` sit inside functions, each with a comment saying
  why it is not at the top of its module (a cycle, or a heavy library the module's other users need
  not load), and `typing.Any` is used at most `MAX_ANY` times: names say what a value is;
* no `lib` or `setup` module passes `MAX_LINES` lines;
* no public name (class, function, constant) is defined at the top level of two `lib` modules:
  one idea, one owner;
* every `lib` module declares `__all__` holding its public names, and lib/README.md lists them
  and gives each module its floor of the import tower;
* the saved-run command line (`setup/run_saved.py`) is written in one place,
  `lib.saved_runs.store`, and no module maps a run to a script of its own;
* no notebook uses a private `lib` name (`lib.x._y`, `from lib.x import _y`, `A._y` after
  `from lib import x as A`) or pyplot (figures are `matplotlib.figure.Figure`, which a notebook
  displays without global state).

`lib` has packages (`lib/backends/`, `lib/saved_runs/`): a module is named by its dotted path
under lib/ (`saved_runs.questions`), a package by its folder (`saved_runs`, its `__init__.py`).
Each check is a function of source text, so the self-tests below plant a violation in
synthetic source and see the check catch it, without touching `lib`.

`python tests/test_lib_shape.py [LIB_FOLDER]` prints the measures (floors, the longest chain,
function-level imports, uses of Any, modules) of lib/ or of another copy of it (`git archive` an
older commit to compare); `--tower` prints lib/README.md's import-tower table.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]-*.ipynb"))
MAX_CHAIN = 8
"""Most modules on one chain of imports inside `lib` (the import tower's floors), the importing module and the last one imported included."""
MAX_FUNCTION_IMPORTS = 30
"""Most imports of `lib` inside function bodies (each says why in a comment)."""
MAX_ANY = 150
"""Most uses of `typing.Any` in `lib`."""
MAX_LINES = 700


def module_name(path: Path, root: Path) -> str:
    """A lib module's name: its dotted path under `root` (`saved_runs.questions`); a package's
    `__init__.py` is the package (`saved_runs`), lib's own is `__init__`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def lib_sources(root: Path = REPO / "lib") -> dict[str, str]:
    """Source of every module of `lib`, packages included, by module name (`module_name`)."""
    return {module_name(path, root): path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))}


# --------------------------------------------------------------------------- the import graph


def _imported_module(dotted: str, sources: Mapping[str, str]) -> str | None:
    """The module of `sources` that importing `lib.<dotted>` names: the longest prefix that is one."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in sources:
            return ".".join(parts[:end])
    return None


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """The `lib` modules each module imports, anywhere in its source (function bodies included).

    `from lib.a import b` is an import of module `a.b` when it exists, else of `a`; `from lib import x`
    of module `x` when it exists, else of `lib/__init__.py`. Importing a module inside a package
    runs the package's `__init__.py` first, so it is an import of the package too.
    """
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                named |= {alias.name[len("lib."):] for alias in node.names if alias.name.startswith("lib.")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("lib."):
                    base = node.module[len("lib."):]
                    named |= {f"{base}.{alias.name}" for alias in node.names}
                elif node.module == "lib":
                    named |= {alias.name if alias.name in sources else "__init__" for alias in node.names}
        targets: set[str] = set()
        for dotted in named:
            target = "__init__" if dotted == "__init__" else _imported_module(dotted, sources)
            if target is None:
                continue
            targets.add(target)
            parts = target.split(".")
            targets |= {".".join(parts[:end]) for end in range(1, len(parts)) if ".".join(parts[:end]) in sources}
        graph[module] = targets - {module}
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One cycle of the graph as `[a, b, ..., a]`, or `[]` when there is none."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored

    def visit(module: str, path: list[str]) -> list[str]:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target, path + [target])):
                return cycle
        state[module] = "done"
        return []

    for module in sorted(graph):
        if module not in state and (cycle := visit(module, [module])):
            return cycle
    return []


def longest_chains(graph: Mapping[str, set[str]]) -> dict[str, list[str]]:
    """For each module of an acyclic graph, its longest path of imports `[module, ..., last imported]`."""
    longest: dict[str, list[str]] = {}

    def chain(module: str) -> list[str]:
        if module not in longest:
            below = [chain(target) for target in sorted(graph[module])]
            longest[module] = [module] + max(below, key=len, default=[])
        return longest[module]

    return {module: chain(module) for module in sorted(graph)}


def longest_chain(graph: Mapping[str, set[str]]) -> list[str]:
    """The longest path of imports of an acyclic graph."""
    return max(longest_chains(graph).values(), key=len, default=[])


def test_lib_imports_have_no_cycle_and_a_short_longest_chain():
    graph = import_graph(lib_sources())
    cycle = find_cycle(graph)
    assert not cycle, f"lib has an import cycle: {' -> '.join(cycle)}; move the shared name below both modules"
    chain = longest_chain(graph)
    assert len(chain) <= MAX_CHAIN, (
        f"lib's longest import chain has {len(chain)} modules (at most {MAX_CHAIN}): {' -> '.join(chain)}; "
        "move what the top module needs to a module lower down")


def test_calibration_maths_sits_near_the_bottom():
    chain = longest_chains(import_graph(lib_sources()))["calibration"]
    assert len(chain) <= 2, f"calibration should import only lib.checks, not: {' -> '.join(chain)}"


GRAPH_CASES = {
    "a cycle through a function-level import": (
        {"a": "from lib.b import f\n", "b": "def g():\n    from lib.a import h\n"}, ["a", "b", "a"], None),
    "a cycle through `from lib import module`": (
        {"a": "from lib import b\n", "b": "import lib.c\n", "c": "from lib import a\n"}, ["a", "b", "c", "a"], None),
    "a chain of nine modules": (
        {f"m{i}": f"from lib.m{i + 1} import x\n" for i in range(8)} | {"m8": "x = 1\n"}, [], 9),
    "no cycle, a chain of three": (
        {"a": "import numpy\nfrom lib.b import f\n", "b": "from lib.c import g\nfrom lib import h\n",
         "c": "import os\n", "__init__": ""}, [], 3),
    "a module in a package, and its package": (
        {"a": "from lib.p.q import f\n", "p": "", "p.q": "from lib.p import r\n", "p.r": "from lib.s import y\n",
         "s": ""}, [], 4),
}


@pytest.mark.parametrize("case", GRAPH_CASES, ids=list(GRAPH_CASES))
def test_graph_checks_catch_a_planted_cycle_or_long_chain(case):
    sources, cycle, chain_length = GRAPH_CASES[case]
    graph = import_graph(sources)
    assert find_cycle(graph) == cycle
    if chain_length is not None:
        assert len(longest_chain(graph)) == chain_length
    if chain_length == 9:
        assert len(longest_chain(graph)) > MAX_CHAIN  # the real test would refuse this lib


def test_a_package_module_imports_its_package_and_sibling():
    graph = import_graph(GRAPH_CASES["a module in a package, and its package"][0])
    assert graph == {"a": {"p", "p.q"}, "p": set(), "p.q": {"p", "p.r"}, "p.r": {"s"}, "s": set()}


# --------------------------------------------------------------------------- imports inside functions, and Any


def function_level_imports(source: str) -> list[tuple[int, str, bool]]:
    """`(line, statement, says_why)` of each import of `lib` inside a function body; `says_why`: a
    comment stands on the statement's lines or on the line just above it, or the function's
    docstring says why its names are "imported here" (for a function a notebook shows with
    `lib.source.show_code`, which shows comments but not the docstring)."""
    lines = source.splitlines()
    found: list[tuple[int, str, bool]] = []

    def is_lib_import(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(alias.name == "lib" or alias.name.startswith("lib.") for alias in node.names)
        return (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None
                and (node.module == "lib" or node.module.startswith("lib.")))

    def visit(node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if function is not None and is_lib_import(child):
                span = lines[child.lineno - 1: child.end_lineno]
                above = lines[child.lineno - 2].strip() if child.lineno > 1 else ""
                docstring = ast.get_docstring(function) if not isinstance(function, ast.Lambda) else None
                found.append((child.lineno, " ".join(line.strip() for line in span),
                              any("#" in line for line in span) or above.startswith("#")
                              or "imported here" in " ".join((docstring or "").split())))
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else function)

    visit(ast.parse(source), None)
    return found


def any_uses(source: str) -> int:
    """How many times a module names `typing.Any` (`Any`, `typing.Any`), annotations included."""
    tree = ast.parse(source)
    return (sum(isinstance(node, ast.Name) and node.id == "Any" for node in ast.walk(tree))
            + sum(isinstance(node, ast.Attribute) and node.attr == "Any" and isinstance(node.value, ast.Name)
                  and node.value.id == "typing" for node in ast.walk(tree)))


def test_few_lib_imports_inside_functions_and_each_says_why():
    found = {(module, line): (statement, why) for module, source in lib_sources().items()
             for line, statement, why in function_level_imports(source)}
    silent = [f"lib/{module.replace('.', '/')}: line {line}: {statement}"
              for (module, line), (statement, why) in sorted(found.items()) if not why]
    assert not silent, f"imports inside functions without a comment saying why: {silent}"
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} imports of lib inside functions (at most {MAX_FUNCTION_IMPORTS}): move them to the top "
        "of their module unless a cycle or a heavy library keeps them there")


def test_any_is_rare():
    uses = {module: any_uses(source) for module, source in lib_sources().items()}
    assert sum(uses.values()) <= MAX_ANY, (
        f"lib uses typing.Any {sum(uses.values())} times (at most {MAX_ANY}); the most: "
        f"{sorted(uses.items(), key=lambda item: -item[1])[:5]}: name the type (the LLM protocol, a dataclass)")


FUNCTION_IMPORT_CASES = {
    "a top-level import is not counted": ("from lib.a import b\n\ndef f():\n    return b\n", []),
    "a silent import in a function": ("def f():\n    from lib.a import b\n    return b\n",
                                      [(2, "from lib.a import b", False)]),
    "a comment above or beside says why": (
        "def f():\n    # a cycle: lib.a imports this module\n    from lib.a import b\n"
        "    import lib.c  # heavy: torch\n    import numpy\n",
        [(3, "from lib.a import b", True), (4, "import lib.c  # heavy: torch", True)]),
    "a method and a lambda's body count": ("class C:\n    def m(self):\n        import lib.x\n",
                                           [(3, "import lib.x", False)]),
    "a docstring saying why, for code a notebook shows": (
        'def f():\n    """Shown in a notebook: `b` is imported here, so the reader sees where it comes from."""\n'
        "    from lib.a import b\n", [(3, "from lib.a import b", True)]),
}


@pytest.mark.parametrize("case", FUNCTION_IMPORT_CASES, ids=list(FUNCTION_IMPORT_CASES))
def test_function_import_check_finds_planted_imports(case):
    source, expected = FUNCTION_IMPORT_CASES[case]
    assert function_level_imports(source) == expected


def test_any_count_reads_annotations_and_typing_any():
    source = "import typing\nfrom typing import Any\nx: Any = 1\ndef f(a: typing.Any) -> dict[str, Any]: ...\n"
    assert any_uses(source) == 3


# --------------------------------------------------------------------------- module sizes


def oversized(sources: Mapping[str, str], limit: int = MAX_LINES) -> dict[str, int]:
    """The modules longer than `limit` lines, with their line counts."""
    return {name: len(source.splitlines()) for name, source in sources.items() if len(source.splitlines()) > limit}


def test_no_lib_or_setup_module_passes_700_lines():
    sources = {str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
               for folder in ("lib", "setup") for path in sorted((REPO / folder).rglob("*.py"))}
    assert not oversized(sources), f"modules over {MAX_LINES} lines (split them by idea): {oversized(sources)}"


@pytest.mark.parametrize(("lines", "flagged"), [(MAX_LINES, False), (MAX_LINES + 1, True)])
def test_size_check_flags_one_line_too_many(lines, flagged):
    assert bool(oversized({"big": "x = 1\n" * lines})) is flagged


# --------------------------------------------------------------------------- one owner per public name


def public_definitions(source: str) -> set[str]:
    """Public names a module defines at its top level: classes, functions and assigned constants."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for assigned in node.targets for target in ast.walk(assigned)
                      if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def defined_twice(sources: Mapping[str, str]) -> dict[str, list[str]]:
    """Public names defined at the top level of more than one module, with those modules."""
    owners: dict[str, list[str]] = {}
    for module, source in sorted(sources.items()):
        for name in public_definitions(source):
            owners.setdefault(name, []).append(module)
    return {name: modules for name, modules in sorted(owners.items()) if len(modules) > 1}


def test_every_public_name_has_one_owner():
    twice = defined_twice(lib_sources())
    assert not twice, f"public names defined in two lib modules (keep one, import it in the other): {twice}"


OWNER_CASES = {
    "a constant in two modules": ({"a": "TYPES = (1, 2)\n", "b": "TYPES = (1, 2)\n"}, {"TYPES": ["a", "b"]}),
    "a function and a class of one name": ({"a": "def Gate(): ...\n", "b": "class Gate: ...\n"}, {"Gate": ["a", "b"]}),
    "an annotated constant": ({"a": "LIMIT: int = 3\n", "b": "LIMIT = 3\n"}, {"LIMIT": ["a", "b"]}),
    "private names and imports are not definitions": (
        {"a": "_cache = {}\nfrom lib.b import TYPES\n", "b": "_cache = {}\nTYPES = ()\n"}, {}),
}


@pytest.mark.parametrize("case", OWNER_CASES, ids=list(OWNER_CASES))
def test_owner_check_catches_a_planted_second_definition(case):
    sources, expected = OWNER_CASES[case]
    assert defined_twice(sources) == expected


# --------------------------------------------------------------------------- what notebooks may use


def code_cells(path: Path) -> list[tuple[int, str]]:
    """`(index, source)` of each code cell, IPython magics and shell lines blanked so `ast` can parse it."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                          for line in "".join(cell["source"]).splitlines()))
            for i, cell in enumerate(cells) if cell["cell_type"] == "code"]


HEX_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")
"""A colour a notebook would write by hand; its colours come from lib.plots, so the same thing has the
same colour in every notebook (black and greys for reference lines are written by name)."""


def notebook_code_problems(source: str) -> list[str]:
    """Private `lib` names, pyplot and hand-written colours in one code cell's source."""
    tree = ast.parse(source)
    problems: list[str] = []
    lib_modules: set[str] = set()  # local names bound to lib or a lib module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("matplotlib.pyplot"):
                    problems.append(f"pyplot: import {alias.name}")
                if alias.name == "lib" or alias.name.startswith("lib."):
                    lib_modules.add(alias.asname or alias.name.split(".")[0])
                    problems += [f"private lib name: {alias.name}" for part in alias.name.split(".") if part.startswith("_")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "matplotlib" and any(alias.name == "pyplot" for alias in node.names):
                problems.append("pyplot: from matplotlib import pyplot")
            if node.module.startswith("matplotlib.pyplot"):
                problems.append(f"pyplot: from {node.module} import ...")
            if node.module == "lib" or node.module.startswith("lib."):
                problems += [f"private lib name: {node.module}.{alias.name}" for alias in node.names
                             if alias.name.startswith("_") or any(p.startswith("_") for p in node.module.split("."))]
                if node.module == "lib":
                    lib_modules |= {alias.asname or alias.name for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in lib_modules:
                problems.append(f"private lib name: {ast.unparse(node)}")
        if isinstance(node, ast.Name) and node.id == "plt":
            problems.append("pyplot: plt")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and HEX_COLOUR.fullmatch(node.value):
            problems.append(f"colour written by hand: {node.value!r} (use lib.plots' colours)")
    return sorted(set(problems))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_use_public_lib_names_and_no_pyplot(path):
    problems = [f"cell {i}: {problem}" for i, source in code_cells(path) for problem in notebook_code_problems(source)]
    assert not problems, (
        f"{path.name}: {problems}; use lib's public names (ask for one in lib if it is missing) and "
        "matplotlib.figure.Figure instead of pyplot, and lib.plots' colours")


NOTEBOOK_CASES = {
    "from lib.x import _y": ("from lib.calibration import ece, _bin_edges\n", ["private lib name: lib.calibration._bin_edges"]),
    "lib.x._y": ("import lib.calibration\nlib.calibration._bin_edges(x, 3, 'uniform')\n",
                 ["private lib name: lib.calibration._bin_edges"]),
    "an aliased module's private name": ("from lib import assistant as A\nA._stage(1)\n",
                                         ["private lib name: A._stage"]),
    "import matplotlib.pyplot": ("import matplotlib.pyplot as plt\nplt.plot([1])\n",
                                 ["pyplot: import matplotlib.pyplot", "pyplot: plt"]),
    "from matplotlib import pyplot": ("from matplotlib import pyplot\n", ["pyplot: from matplotlib import pyplot"]),
    "a colour written by hand": ('ax.plot(x, y, color="#1f77b4")\n',
                                 ["colour written by hand: '#1f77b4' (use lib.plots' colours)"]),
    "public names, Figure, dunders and other private names pass": (
        "from matplotlib.figure import Figure\nfrom lib import assistant as A\nimport pandas as pd\n"
        "A.Assistant.__doc__\npd._libs\nfig = Figure()\n", []),
}


@pytest.mark.parametrize("case", NOTEBOOK_CASES, ids=list(NOTEBOOK_CASES))
def test_notebook_check_catches_a_planted_private_name_or_pyplot(case):
    source, expected = NOTEBOOK_CASES[case]
    assert notebook_code_problems(source) == expected


# --------------------------------------------------------------------------- __all__ and lib/README.md

LIB_PATHS = {module_name(path, REPO / "lib"): path for path in sorted((REPO / "lib").rglob("*.py"))}
LIB_MODULES = sorted(LIB_PATHS)


def declared_all(source: str) -> list[str] | None:
    """The names listed in a module's top-level `__all__`, or None when it has none."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__"
                and node.value is not None):
            return list(ast.literal_eval(node.value))  # `__all__: list[str] = []`, a package that only groups modules
    return None


def all_problems(source: str) -> list[str]:
    """What is wrong with a module's `__all__`: missing, naming what the module lacks, or leaving a public name out."""
    names = declared_all(source)
    if names is None:
        return ["no __all__"]
    tree = ast.parse(source)
    bound = public_definitions(source) | {alias.asname or alias.name.split(".")[0] for node in tree.body
                                          if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    problems = [f"__all__ names {name!r}, which the module does not define" for name in names if name not in bound]
    problems += [f"__all__ lists {name!r} twice" for name in sorted({n for n in names if names.count(n) > 1})]
    problems += [f"public {name!r} is not in __all__ (add it, or rename it _{name})"
                 for name in sorted(public_definitions(source) - set(names))]
    return problems


def readme_names(readme: str) -> dict[str, list[str]]:
    """The public names lib/README.md lists per module (`- `module`: `a`, `b``), `lib` read as `__init__`."""
    listed = {}
    for module, names in re.findall(r"^- `([\w.]+)`: (.*)$", readme.split("## Public names", 1)[-1], re.MULTILINE):
        listed["__init__" if module == "lib" else module] = re.findall(r"`(\w+)`", names)
    return listed


@pytest.mark.parametrize("module", LIB_MODULES)
def test_every_module_declares_all_of_its_public_names(module):
    problems = all_problems(LIB_PATHS[module].read_text(encoding="utf-8"))
    assert not problems, f"{LIB_PATHS[module].relative_to(REPO)}: {problems}"


@pytest.mark.parametrize("module", LIB_MODULES)
def test_readme_lists_each_modules_public_names(module):
    listed = readme_names((REPO / "lib" / "README.md").read_text(encoding="utf-8"))
    declared = declared_all(LIB_PATHS[module].read_text(encoding="utf-8"))
    assert declared is not None, f"{LIB_PATHS[module].relative_to(REPO)} has no __all__"
    assert listed.get(module) == declared, (
        f"lib/README.md's line for {module} lists {listed.get(module)}, its __all__ is {declared}: "
        "make the README's '## Public names' line match __all__")


ALL_CASES = {
    "no __all__": ("def f(): ...\n", ["no __all__"]),
    "a public name left out": ('__all__ = ["f"]\ndef f(): ...\nLIMIT = 3\n',
                               ["public 'LIMIT' is not in __all__ (add it, or rename it _LIMIT)"]),
    "a name the module lacks": ('__all__ = ["f", "g"]\ndef f(): ...\n',
                                ["__all__ names 'g', which the module does not define"]),
    "a complete __all__ with a re-export": ('from lib.x import g\n__all__ = ["f", "g"]\ndef f(): ...\n_x = 1\n', []),
}


@pytest.mark.parametrize("case", ALL_CASES, ids=list(ALL_CASES))
def test_all_check_catches_a_planted_gap(case):
    source, expected = ALL_CASES[case]
    assert all_problems(source) == expected


def test_readme_parser_reads_what_the_real_test_compares():
    readme = "# x\n| `a` | prose `c` |\n## Public names\n\n- `lib`: `get_llm`\n- `a`: `f`, `G`\n- `p.q`: `h`\n"
    assert readme_names(readme) == {"__init__": ["get_llm"], "a": ["f", "G"], "p.q": ["h"]}


def readme_floors(readme: str) -> dict[str, int]:
    """The floor lib/README.md's import-tower table gives each module (`| 3 | `a`, `b.c` |`), `lib` read as `__init__`."""
    tower = readme.split("## The import tower", 1)[-1].split("\n## ", 1)[0]
    return {("__init__" if module == "lib" else module): int(floor)
            for floor, modules in re.findall(r"^\| (\d+) \| (.*) \|$", tower, re.MULTILINE)
            for module in re.findall(r"`([\w.]+)`", modules)}


def test_readme_tower_gives_each_module_its_floor():
    floors = {module: len(chain) for module, chain in longest_chains(import_graph(lib_sources())).items()}
    listed = readme_floors((REPO / "lib" / "README.md").read_text(encoding="utf-8"))
    wrong = {module: (listed.get(module), floor) for module, floor in floors.items() if listed.get(module) != floor}
    assert not wrong and set(listed) <= set(floors), (
        f"lib/README.md's import tower is out of date (module: (listed, measured)): {wrong}, "
        f"not modules: {sorted(set(listed) - set(floors))}; `python tests/test_lib_shape.py --tower` prints the table")


def test_readme_tower_parser_reads_the_table_only():
    readme = "## The import tower\n\n| Floor | Modules |\n| --- | --- |\n| 1 | `lib`, `a.b` |\n| 2 | `c` |\n\n## Next\n| 3 | `d` |\n"
    assert readme_floors(readme) == {"__init__": 1, "a.b": 1, "c": 2}


SAVED_RUN_COMMAND = re.compile(r"setup/(?:run_saved|run_results|run_question_runs|run_asking|run_committees|run_tools|drift)\.py")
"""The saved-run command (and the scripts it replaced), which only `lib.saved_runs.store` writes out."""


def command_strings(source: str) -> list[str]:
    """The string literals of `source` that name a saved-run script, docstrings left out (they may show it)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and SAVED_RUN_COMMAND.search(node.value)]


def test_the_saved_run_command_is_written_in_one_place():
    writers = {str(path.relative_to(REPO)): found for folder in ("lib", "setup") for path in sorted((REPO / folder).rglob("*.py"))
               if (found := command_strings(path.read_text(encoding="utf-8")))}
    assert list(writers) == ["lib/saved_runs/store.py"], (
        f"the saved-run command line is written in {writers}: use lib.saved_runs.store.run_command (or RUN_SCRIPT)")
    assert not [name for name in ("run_results", "run_question_runs", "run_asking", "run_committees", "run_tools", "drift")
                if (REPO / "setup" / f"{name}.py").exists()], "one command makes every saved run: setup/run_saved.py"


def test_command_check_skips_docstrings_and_finds_literals():
    source = ('"""Run `python setup/run_saved.py`."""\ndef f():\n    """setup/run_saved.py"""\n'
              '    return f"python setup/run_results.py --task {1}"\nX = "setup/run_saved.py --list"\n')
    assert sorted(command_strings(source)) == ["python setup/run_results.py --task ", "setup/run_saved.py --list"]


# --------------------------------------------------------------------------- pinned dependencies fail, never skip


def test_no_test_skips_when_a_dependency_is_missing():
    skipping = [f"{path.name}:{number}" for path in sorted((REPO / "tests").glob("*.py")) if path.name != Path(__file__).name
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "importorskip(" in line]
    assert not skipping, (f"{skipping}: importorskip turns a broken install of a pinned dependency into a quiet skip; "
                          "use conftest.require_installed, which fails and says how to reinstall")


def test_a_missing_pinned_dependency_fails_and_says_how_to_reinstall():
    from conftest import require_installed

    with pytest.raises(pytest.fail.Exception, match=r"no_such_workbook_module is pinned .* `make setup`"):
        require_installed("no_such_workbook_module")


# --------------------------------------------------------------------------- the measures, printed


def measures(root: Path = REPO / "lib") -> dict[str, object]:
    """The shape of the lib at `root`: modules, floors and the longest chain, imports inside
    functions (and how many say why), and uses of Any."""
    sources = lib_sources(root)
    chain = longest_chain(import_graph(sources))
    imports = [why for source in sources.values() for _, _, why in function_level_imports(source)]
    return {"modules": len(sources), "floors": len(chain), "longest chain": " -> ".join(chain),
            "function-level lib imports": len(imports), "of them saying why": sum(imports),
            "uses of Any": sum(any_uses(source) for source in sources.values())}


def tower_table(root: Path = REPO / "lib") -> str:
    """lib/README.md's import-tower table of the lib at `root`: the modules on each floor."""
    floors: dict[int, list[str]] = {}
    for module, chain in longest_chains(import_graph(lib_sources(root))).items():
        floors.setdefault(len(chain), []).append("lib" if module == "__init__" else module)
    return "\n".join(["| Floor | Modules |", "| --- | --- |"] + [
        f"| {floor} | " + ", ".join(f"`{module}`" for module in sorted(modules)) + " |" for floor, modules in sorted(floors.items())])


if __name__ == "__main__":
    arguments = [argument for argument in sys.argv[1:] if argument != "--tower"]
    folder = Path(arguments[0]) if arguments else REPO / "lib"
    if "--tower" in sys.argv[1:]:
        print(tower_table(folder))
    else:
        for name, value in measures(folder).items():
            print(f"{name}: {value}")
