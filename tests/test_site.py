"""The course site's build (setup/site.py) on tiny examples: the table of contents from the README,
links rewritten for the site, math as MathML, no asset from the network, and the checks of a built
site. `make site` builds the real site and `make site-smoke` reads it in a browser."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import require_installed
from setup import site
from setup.site_smoke import markdown_text, search_term

PAGES = {"README.md", "notebooks/00-setup.ipynb", "notebooks/01-grounding.ipynb", "notebooks/10-semantic-entropy.ipynb"}

README = """# A course

| part | notebooks |
|---|---|
| 0 · setup | [`00-setup`](notebooks/00-setup.ipynb) (35 min) |
| I · first | [`02-b`](notebooks/02-b.ipynb) (10 min), [`01-a`](notebooks/01-a.ipynb), [again](notebooks/02-b.ipynb) |
| II · gone | [`09-missing`](notebooks/09-missing.ipynb) |

| part | notebooks |
|---|---|
| later table | [`03-c`](notebooks/03-c.ipynb) |
"""


# --------------------------------------------------------------------------- the course's order

def test_parts_follow_the_readme_table_and_no_notebook_is_lost():
    notebooks = ["notebooks/00-setup.ipynb", "notebooks/01-a.ipynb", "notebooks/02-b.ipynb", "notebooks/03-c.ipynb"]
    assert site.course_parts(README, notebooks) == [
        ("0 · setup", ["notebooks/00-setup.ipynb"]),
        ("I · first", ["notebooks/02-b.ipynb", "notebooks/01-a.ipynb"]),  # the README's order, once each
        (site.OTHER_PART, ["notebooks/03-c.ipynb"]),  # only the first course table counts
    ]


def test_the_real_readme_lists_every_notebook_once():
    notebooks = [p.relative_to(site.REPO).as_posix() for p in sorted(site.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]
    parts = site.course_parts(site.README.read_text(encoding="utf-8"), notebooks)
    listed = [path for _, paths in parts for path in paths]
    assert sorted(listed) == notebooks and len(listed) == len(set(listed))
    assert site.OTHER_PART not in [part for part, _ in parts]
    assert len(parts) >= 4 and parts[0][1][0] == "notebooks/00-setup.ipynb"


def test_nav_titles_come_from_each_notebooks_first_heading():
    notebook = {"cells": [{"cell_type": "markdown", "source": ["[← back](x.ipynb)\n", "\n", "# 01 · A title\n"]},
                          {"cell_type": "markdown", "source": "# a later heading"}]}
    assert site.notebook_title(notebook, "01-a") == "01 · A title"
    assert site.notebook_title({"cells": [{"cell_type": "code", "source": "# a comment"}]}, "01-a") == "01-a"
    nav = site.site_nav([("I · first", ["notebooks/01-a.ipynb"])], {"notebooks/01-a.ipynb": "01 · A title"})
    assert nav == [{"Home": "index.md"}, {"I · first": [{"01 · A title": "notebooks/01-a.ipynb"}]}]


# --------------------------------------------------------------------------- links

def test_links_between_notebooks_and_to_the_readme_point_at_pages():
    here = "notebooks/00-setup.ipynb"
    assert site.site_link("01-grounding.ipynb", here, PAGES, "") == "01-grounding.html"
    assert site.site_link("../README.md", here, PAGES, "") == "../index.html"
    assert site.site_link("./01-grounding.ipynb?x=1", here, PAGES, "") == "01-grounding.html"
    # JupyterLab's heading anchors become mkdocs-jupyter's ids, in links to other pages and within one
    assert (site.site_link("10-semantic-entropy.ipynb#A-monotone-calibrator-can-change-AUROC", here, PAGES, "")
            == "10-semantic-entropy.html#a-monotone-calibrator-can-change-auroc")
    assert site.site_link("#Does-confidence-separate%3F", here, PAGES, "") == "#does-confidence-separate"
    for unchanged in ("https://arxiv.org/abs/2302.09664", "mailto:a@b.org", "#", "../../outside.md"):
        assert site.site_link(unchanged, here, PAGES, "") == unchanged


def test_links_to_other_repository_files_go_to_the_repository():
    here = "notebooks/00-setup.ipynb"
    url = "https://example.org/course/blob/main/"
    assert site.site_link("../data/README.md#Licence", here, PAGES, url) == \
        "https://example.org/course/blob/main/data/README.md#Licence"
    # without a repository URL: from build/site/notebooks/ back to the file in this checkout
    assert site.site_link("../data/README.md", here, PAGES, "") == "../../../data/README.md"
    assert site.site_link("data/README.md", "README.md", PAGES, "") == "../../data/README.md"


def test_readme_links_to_pages_are_left_to_mkdocs():
    markdown = ("[a](notebooks/00-setup.ipynb) [b](notebooks/10-semantic-entropy.ipynb#Clustering-by-Meaning) "
                "[c](lib/README.md) [d](https://example.org/x.md)")
    assert site.markdown_links(markdown, "README.md", PAGES, "https://example.org/r/blob/main") == (
        "[a](notebooks/00-setup.ipynb) [b](notebooks/10-semantic-entropy.ipynb#clustering-by-meaning) "
        "[c](https://example.org/r/blob/main/lib/README.md) [d](https://example.org/x.md)")


def test_html_links_are_rewritten_with_their_escaping():
    page = '<p><a class="x" href="01-grounding.ipynb#Two-%26-Three">next</a> <a href="https://a.org/?a=1&amp;b=2">x</a></p>'
    assert site.html_links(page, "notebooks/00-setup.ipynb", PAGES, "") == (
        '<p><a class="x" href="01-grounding.html#two-three">next</a> <a href="https://a.org/?a=1&amp;b=2">x</a></p>')


# --------------------------------------------------------------------------- math

def markdown_cell(text: str) -> str:
    return f'<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown jp-MarkdownOutput" data-mime-type="text/markdown">{text}</div>'


def test_math_in_markdown_cells_becomes_mathml_and_prices_stay_text():
    require_installed("latex2mathml")
    page = (markdown_cell('<p>$$\\mathrm{ECE} = \\sum_b \\frac{n_b}{n}$$</p><p>so $x^2$ grows; '
                          '"$100" and "$1,000" sit apart, and $5 or $6 too.</p><div><code>$a$</code></div>')
            + '<div class="jp-OutputArea-output"><p>$y$</p></div>')
    rendered = site.render_math(page)
    assert rendered.count("<math") == 2
    assert '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in rendered
    assert '"$100" and "$1,000" sit apart, and $5 or $6 too.' in rendered
    assert "<code>$a$</code>" in rendered and "<p>$y$</p>" in rendered  # code and outputs untouched


# --------------------------------------------------------------------------- nothing from the network

NBCONVERT_HEAD = """<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe">
</script>"""


def test_the_cdn_scripts_mkdocs_jupyter_writes_are_removed():
    loaders = ("<!-- Load mathjax -->\n" + NBCONVERT_HEAD + "\n<script type=\"text/x-mathjax-config\">init_mathjax()</script>\n"
               "<!-- End of mathjax configuration -->\n"
               '<script type="module">\nconst mermaid = (await import("https://cdnjs.cloudflare.com/mermaid.mjs"));'
               "\n</script>\n<script>\n(function() { function addWidgetsRenderer() {"
               " s.src = 'https://cdn.jsdelivr.net/npm/@jupyter-widgets/html-manager@*/dist/embed-amd.js'; } })();"
               "\n</script>\n")
    page = loaders + "<p>kept</p>"
    assert len(site.remote_references(page)) >= 3
    cleaned = site.without_remote_loaders(page)
    assert cleaned.strip() == "<p>kept</p>" and site.remote_references(cleaned) == []


def test_remote_assets_are_found_and_links_and_namespaces_pass():
    assert site.remote_references('<a href="https://arxiv.org/abs/1">paper</a><svg xmlns="http://www.w3.org/2000/svg">'
                                  '<math xmlns="http://www.w3.org/1998/Math/MathML"></math>') == []
    for asset in ('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">',
                  '<img alt="x" src="//example.org/a.png">', "<style>@import url('https://example.org/a.css');</style>",
                  "<style>body { background: url(http://example.org/a.png) }</style>",
                  '<script defer src="https://example.org/require.js"></script>',
                  '<div class="jp-Mermaid"><pre class="mermaid">graph LR; a --> b</pre></div>'):
        assert site.remote_references(asset), asset


def test_the_site_configuration_keeps_everything_local():
    config = yaml.safe_load(site.CONFIG.read_text(encoding="utf-8"))
    assert config["theme"]["font"] is False  # else Material links Google Fonts
    assert "repo_url" not in config  # else Material's script asks GitHub's API for the repository's stars
    plugins = {next(iter(p)) if isinstance(p, dict) else p: p for p in config["plugins"]}
    assert "offline" not in plugins  # Material's offline plugin adds a polyfill script from unpkg.com
    assert plugins["mkdocs-jupyter"]["mkdocs-jupyter"]["execute"] is False


# --------------------------------------------------------------------------- the built site's checks

def test_broken_links_and_anchors_are_found(tmp_path: Path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "index.html").write_text('<a href="notebooks/a.html#s-1">a</a><a href="notebooks/b.html">b</a>'
                                         '<a href="https://example.org/">x</a><a href="#top">top</a><h1 id="top">t</h1>')
    (tmp_path / "notebooks" / "a.html").write_text('<h2 id="s-1">s</h2><a href="../index.html#nowhere">home</a>'
                                                   '<img src="../missing.png">')
    (tmp_path / "404.html").write_text('<a href="/assets/x.css">ignored</a>')
    assert site.broken_links(tmp_path) == ["index.html: notebooks/b.html (no such file)",
                                           "notebooks/a.html: ../index.html#nowhere (no such anchor)",
                                           "notebooks/a.html: ../missing.png (no such file)"]


def test_outputs_and_images_are_counted_alike_in_the_notebook_and_the_page():
    notebook = {"cells": [{"cell_type": "markdown", "source": "x"},
                          {"cell_type": "code", "outputs": [{"output_type": "stream", "text": "a"},
                                                            {"output_type": "display_data",
                                                             "data": {"image/png": "AAAA", "text/plain": "<Figure>"}}]}]}
    page = ('<div class="jp-OutputArea-child"><pre>a</pre></div><div class="jp-OutputArea-child jp-OutputArea-executeResult">'
            '<img src="data:image/png;base64,AAAA"></div>')
    assert site.stored_outputs(notebook) == site.shown_outputs(page) == (2, 1)


def test_the_large_notebook_stylesheet_moves_to_one_shared_file(tmp_path: Path):
    css = ".jp-Cell { color: red }\n" * 2000
    page = f'<style type="text/css">\n{css}</style><p>x</p><style type="text/css">.small {{}}</style>'
    moved = site.shared_stylesheets(page, "notebooks/a.html", tmp_path)
    again = site.shared_stylesheets(page, "notebooks/b.html", tmp_path)
    assert moved == again and moved.startswith('<link rel="stylesheet" href="../assets/stylesheets/notebook-')
    assert moved.endswith('<p>x</p><style type="text/css">.small {}</style>')
    [written] = (tmp_path / "assets" / "stylesheets").iterdir()
    assert written.read_text() == css.strip()


def test_the_browser_tests_search_word_is_in_that_notebook_only():
    notebooks = [p.relative_to(site.REPO).as_posix() for p in sorted(site.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]
    target = notebooks[7]
    term = search_term(target, notebooks)
    assert term in markdown_text(json.loads((site.REPO / target).read_text(encoding="utf-8"))).lower()
    assert not any(term in (site.REPO / other).read_text(encoding="utf-8").lower() for other in notebooks if other != target)
