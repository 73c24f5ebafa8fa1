"""The course as a static, read-only site in build/site/ (`make site`), built offline.

    python setup/site.py                                   # source links: the .ipynb beside each page
    python setup/site.py --repo-url https://github.com/OWNER/REPO/blob/main   # ... or in the repository

Every notebook becomes a page with its committed outputs and figures (nothing is executed), the
README becomes the home page, and the table of contents follows the README's course table (its
parts and their notebooks, in that order), so a renumbered or a new notebook needs only the README's
table it already has. Material for MkDocs gives previous/next links and search; mkdocs-jupyter
converts the notebooks. Each notebook page says where its source is and how to run it live.

Nothing is fetched from the network, at build time or when a page is read: the theme's fonts are
off (the browser's own fonts), MathJax is replaced by MathML rendered here (latex2mathml), and the
script tags that mkdocs-jupyter adds for CDN copies of MathJax, mermaid and the widget renderer
are removed. After the build, the site is checked: no page or stylesheet loads anything from
another host, every relative link and anchor resolves, and every notebook page shows as many
outputs and images as the notebook stores. Any failure stops the build with the list.

Steps: stage README.md (as index.md) and the notebooks in build/site-docs/, write the full mkdocs
configuration (mkdocs.yml plus what is derived here) to build/site-mkdocs.yml, run `mkdocs
build`, check build/site/. This file is also the build's mkdocs hook module: mkdocs loads it by
path and calls the on_page_* functions at the bottom. SOURCE_DATE_EPOCH is set to the last
commit's time (unless already set), so the sitemap's dates do not change from build to build.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "mkdocs.yml"
README = REPO / "README.md"
NOTEBOOKS = REPO / "notebooks"
BUILD = REPO / "build"
DOCS = BUILD / "site-docs"      # the staged sources
GENERATED = BUILD / "site-mkdocs.yml"  # the whole configuration (mkdocs wants it beside docs_dir, not in it)
SITE = BUILD / "site"
CACHE = BUILD / "site-cache"    # mkdocs-jupyter's converted pages, keyed by each notebook's bytes

HOME_SOURCE = "README.md"
HOME_PAGE = "index.html"
OTHER_PART = "other notebooks"  # notebooks the README's table does not list (the build says which)

# ----------------------------------------------------------------------------- the course's order


def notebook_title(notebook: dict, fallback: str) -> str:
    """The text of the notebook's first level-1 heading (`# 05 · Tool calls`), else `fallback`."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def course_parts(readme: str, notebooks: list[str]) -> list[tuple[str, list[str]]]:
    """The README's course table as (part, notebook paths) in its order, e.g.
    ("I · answers you can check", ["notebooks/01-grounding.ipynb", ...]).

    The table is the one whose header's first cell is `part`; each row's first cell names the part
    and its links to `notebooks/NN-....ipynb` give the notebooks, in order. `notebooks` are the
    notebook paths that exist: a link to a missing one is left out, and existing ones that no row
    lists form a last part, OTHER_PART, so none is ever missing from the site."""
    parts: list[tuple[str, list[str]]] = []
    in_table = False
    for line in readme.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if not cells:
            if in_table:
                break
            continue
        if not in_table:
            in_table = cells[0].lower() == "part"
            continue
        if set(cells[0]) <= set("-: "):
            continue  # the separator row
        links = re.findall(r"\]\((notebooks/[^)#\s]+\.ipynb)", " ".join(cells[1:]))
        listed = [path for path in dict.fromkeys(links) if path in notebooks]
        if listed:
            parts.append((cells[0], listed))
    seen = {path for _, paths in parts for path in paths}
    unlisted = [path for path in notebooks if path not in seen]
    if unlisted:
        parts.append((OTHER_PART, unlisted))
    return parts


def site_nav(parts: list[tuple[str, list[str]]], titles: dict[str, str]) -> list[dict]:
    """mkdocs's `nav`: the home page, then one section per part with its notebooks' titles."""
    return [{"Home": "index.md"}] + [{part: [{titles[path]: path} for path in paths]} for part, paths in parts]


def page_of(source: str) -> str:
    """The site page of a repository file: README.md -> index.html, notebooks/x.ipynb -> notebooks/x.html."""
    return HOME_PAGE if source == HOME_SOURCE else posixpath.splitext(source)[0] + ".html"


# ----------------------------------------------------------------------------- links


def notebook_anchor(fragment: str) -> str:
    """The id mkdocs-jupyter gives a heading, from JupyterLab's anchor for it.

    JupyterLab links a heading as its text with spaces turned into hyphens (`#A-monotone-calibrator`);
    mkdocs-jupyter's ids are its slug of the same text (`a-monotone-calibrator`)."""
    from mkdocs_jupyter.utils import slugify

    return slugify(unquote(fragment).replace("-", " "))


def resolve(href: str, source: str) -> tuple[str, str] | None:
    """(repository path, fragment) that a relative link in `source` points to; None for a link that
    leaves the repository's files alone (a URL with a scheme or host, a bare `#fragment`, `mailto:`)."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    target = posixpath.normpath(posixpath.join(posixpath.dirname(source), unquote(parts.path)))
    return (None if target.startswith("../") or target == ".." else (target, parts.fragment))


def repository_link(target: str, source: str, repo_url: str) -> str:
    """A link to a repository file that is not a page: under `repo_url` when given, else relative
    from the page in build/site/ to the file in this checkout (works when read from the checkout)."""
    if repo_url:
        return f"{repo_url.rstrip('/')}/{target}"
    here = posixpath.dirname(posixpath.join(SITE.relative_to(REPO).as_posix(), page_of(source)))
    return posixpath.relpath(target, here)


def site_link(href: str, source: str, pages: set[str], repo_url: str) -> str:
    """`href` as written in `source` (a notebook's markdown), rewritten for the site.

    A link to a page's source (`05-tool-calls.ipynb`, `../README.md`) becomes the page
    (`05-tool-calls.html`, `../index.html`), a JupyterLab heading anchor becomes the page's id, a link
    to another repository file becomes `repository_link`, and anything else stays as it is."""
    if href.startswith("#") and len(href) > 1 and source.endswith(".ipynb"):
        return "#" + notebook_anchor(href[1:])
    resolved = resolve(href, source)
    if resolved is None:
        return href
    target, fragment = resolved
    if target not in pages:
        link = repository_link(target, source, repo_url)
        return f"{link}#{fragment}" if fragment else link
    link = posixpath.relpath(page_of(target), posixpath.dirname(page_of(source)))
    if fragment:
        link += "#" + (notebook_anchor(fragment) if target.endswith(".ipynb") else fragment)
    return link


MARKDOWN_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
HTML_LINK = re.compile(r'(<a\b[^>]*?\bhref=")([^"]*)(")')


def markdown_links(markdown: str, source: str, pages: set[str], repo_url: str) -> str:
    """The README's links for mkdocs: mkdocs turns links to pages into the pages itself, so only a
    notebook heading anchor is fixed and a link to another repository file becomes `repository_link`."""
    def rewrite(match: re.Match) -> str:
        resolved = resolve(match[2], source)
        if resolved is None:
            return match[0]
        target, fragment = resolved
        if target in pages:
            if fragment and target.endswith(".ipynb"):
                return f"{match[1]}{match[2].split('#', 1)[0]}#{notebook_anchor(fragment)}{match[3]}"
            return match[0]
        link = repository_link(target, source, repo_url)
        return f"{match[1]}{link}{'#' + fragment if fragment else ''}{match[3]}"

    return MARKDOWN_LINK.sub(rewrite, markdown)


def html_links(page_html: str, source: str, pages: set[str], repo_url: str) -> str:
    """Every `<a href>` of a converted notebook, rewritten by `site_link` (mkdocs leaves them as written)."""
    return HTML_LINK.sub(lambda m: m[1] + html.escape(site_link(html.unescape(m[2]), source, pages, repo_url))
                         + m[3], page_html)


# ----------------------------------------------------------------------------- math and CDN scripts

# nbconvert leaves math in markdown cells as text for MathJax. It is rendered here as MathML, which
# browsers draw themselves. A single `$` opens inline math only before a non-space and closes it only
# after a non-space and before a non-digit (pandoc's rule), so "$100" and "$1,000" stay prices.
MATH = re.compile(r"\$\$(?P<display>.+?)\$\$"
                  r"|\\\[(?P<display2>.+?)\\\]"
                  r"|\\\((?P<inline2>.+?)\\\)"
                  r"|(?<![\\$\w])\$(?=[^\s$])(?P<inline>(?:[^$\n\\]|\\.|\n(?!\n))+?)(?<![\s\\])\$(?!\d)",
                  re.DOTALL)
MARKDOWN_CELL = re.compile(r'<div\b[^>]*\bclass="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>')
TAG = re.compile(r"(<[^>]*>)")
VERBATIM = ("code", "pre", "script", "style", "math")


def latex_to_mathml(latex: str, display: bool) -> str:
    from latex2mathml.converter import convert

    return convert(latex.strip(), display="block" if display else "inline")


def math_in_text(text: str) -> str:
    """Text (HTML-escaped, as nbconvert writes it) with its math replaced by MathML."""
    def render(match: re.Match) -> str:
        display = match["display"] is not None or match["display2"] is not None
        latex = next(group for group in (match["display"], match["display2"], match["inline2"], match["inline"])
                     if group is not None)
        try:
            return latex_to_mathml(html.unescape(latex), display)
        except Exception as error:  # latex2mathml raises its own errors on LaTeX it does not know
            print(f"[site] math left as written ({type(error).__name__}: {error}): {latex[:80]!r}", flush=True)
            return match[0]

    return MATH.sub(render, text).replace("\\$", "$")


def render_math(page_html: str) -> str:
    """The math of every markdown cell as MathML; code, outputs and verbatim text are left alone."""
    out, depth, verbatim = [], 0, 0  # depth: open <div>s inside the current markdown cell (0: outside)
    for token in TAG.split(page_html):
        if token.startswith("<"):
            name = re.match(r"</?\s*([a-zA-Z0-9]+)", token)
            name = name[1].lower() if name else ""
            closing = token.startswith("</")
            if depth == 0 and MARKDOWN_CELL.match(token):
                depth = 1
            elif depth and name == "div":
                depth += -1 if closing else (0 if token.endswith("/>") else 1)
            elif depth and name in VERBATIM:
                verbatim += -1 if closing else 1
            out.append(token)
        else:
            out.append(math_in_text(token) if depth and not verbatim else token)
    return "".join(out)


# The script tags mkdocs-jupyter's template always writes, each of which loads from a CDN: MathJax
# (replaced by MathML above), mermaid (the course has no mermaid diagram, and the checks below stop
# one: Material's own script would fetch mermaid for it) and the ipywidgets renderer (stored widgets
# then show their text; they are live in JupyterLab only).
REMOTE_LOADERS = (
    re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL),
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*?</script>', re.DOTALL),
    re.compile(r"<script>(?:(?!</script>).)*?addWidgetsRenderer(?:(?!</script>).)*?</script>", re.DOTALL),
)


def without_remote_loaders(page_html: str) -> str:
    for pattern in REMOTE_LOADERS:
        page_html = pattern.sub("", page_html)
    return page_html


# mkdocs-jupyter inlines JupyterLab's stylesheet (about 570 kB) into every notebook page. It goes to
# one file instead, named by its content, which the browser then loads once for all the pages.
INLINE_STYLE = re.compile(r'<style type="text/css">(.*?)</style>', re.DOTALL)
LARGE = 20_000  # characters: only JupyterLab's stylesheet is this long


def shared_stylesheets(page_html: str, page_url: str, site_dir: Path) -> str:
    """The page with each large inline `<style>` replaced by a link to assets/stylesheets/notebook-<hash>.css."""
    def move(match: re.Match) -> str:
        css = match[1].strip()
        if len(css) < LARGE:
            return match[0]
        name = f"assets/stylesheets/notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
        path = site_dir / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(css, encoding="utf-8")
        return f'<link rel="stylesheet" href="{posixpath.relpath(name, posixpath.dirname(page_url))}">'

    return INLINE_STYLE.sub(move, page_html)


# ----------------------------------------------------------------------------- each notebook page


def source_note(source: str, repo_url: str) -> str:
    """The box under a notebook page's title: where its source is and how to run it live."""
    name = posixpath.basename(source)
    if repo_url:
        where = (f'<a href="{html.escape(repository_link(source, source, repo_url))}"><code>{source}</code></a> '
                 f'in the repository (or <a href="{name}" download>download the notebook</a>)')
    else:
        where = f'<a href="{name}" download><code>{source}</code></a> (the notebook with these outputs)'
    return (
        '<div class="admonition info course-source">\n'
        '<p class="admonition-title">A read-only page: the notebook\'s stored outputs, not re-executed</p>\n'
        f"<p>Source: {where}. To run it live, clone the repository and run <code>make run</code> (every "
        "notebook live against the embedded model) or <code>make test</code> (every notebook replayed from its "
        "recordings); both install what is missing first. <code>make lab</code> opens the notebooks in "
        "JupyterLab, to change and re-run cells.</p>\n</div>\n")


def notebook_page(page_html: str, source: str, pages: set[str], repo_url: str) -> str:
    """A converted notebook as the site shows it: local assets only, site links, MathML, the source note."""
    page_html = render_math(html_links(without_remote_loaders(page_html), source, pages, repo_url))
    note = source_note(source, repo_url)
    end_of_title = page_html.find("</h1>")
    if end_of_title < 0:
        return note + page_html
    cut = end_of_title + len("</h1>")
    return page_html[:cut] + "\n" + note + page_html[cut:]


# ----------------------------------------------------------------------------- mkdocs hooks


def _course(config) -> tuple[set[str], str]:
    extra = config["extra"]
    return set(extra["course_pages"]), extra.get("repository_url") or ""


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "index.md":
        pages, repo_url = _course(config)
        return markdown_links(markdown, HOME_SOURCE, pages, repo_url)
    return markdown


def on_page_content(html_content, page, config, files):
    if page.file.src_uri.endswith(".ipynb"):
        pages, repo_url = _course(config)
        page_html = notebook_page(html_content, page.file.src_uri, pages, repo_url)
        return shared_stylesheets(page_html, page.file.url, Path(config["site_dir"]))
    return html_content


# ----------------------------------------------------------------------------- checks of the built site

CDN_HOSTS = ("fonts.googleapis.com", "fonts.gstatic.com", "unpkg.com", "cdn.jsdelivr.net", "cdnjs.cloudflare.com",
             "cdn.mathjax.org", "code.jquery.com", "polyfill.io", "cdn.plot.ly", "requirejs.org")
REMOTE = r"""["']?\s*(?:https?:)?//"""
REMOTE_ASSET = re.compile(
    r"<(?:script|link|img|iframe|source|audio|video|embed|track|object|input|image|use)\b[^>]*?"
    rf"\s(?:src|href|srcset|data|poster|xlink:href)\s*=\s*{REMOTE}"
    rf"|url\(\s*{REMOTE}|@import\s+(?:url\()?{REMOTE}|\bimport\(\s*{REMOTE}|importScripts\(\s*{REMOTE}",
    re.IGNORECASE)


# Material's script (assets/javascripts/bundle.*.js) fetches mermaid from unpkg.com for each page that
# has one of these; its other remote fetches need options mkdocs.yml leaves out (repo_url) or a browser
# older than ResizeObserver (2020).
MERMAID = re.compile(r'<pre\b[^>]*\bclass="[^"]*\bmermaid\b')


def remote_references(text: str) -> list[str]:
    """Whatever in an HTML page or stylesheet would load from another host when it is shown (a
    script, stylesheet, font, image, frame or import by URL, a mermaid diagram), and any mention of
    a CDN's host. Links a reader clicks (`<a href="https://...">`) and XML namespaces load nothing
    and pass."""
    found = [match[0][:160] for match in REMOTE_ASSET.finditer(text)]
    found += [f"mentions {host}" for host in CDN_HOSTS if host in text]
    if MERMAID.search(text):
        found.append("a mermaid diagram (the theme's script loads mermaid from unpkg.com)")
    return found


ATTRIBUTE = re.compile(r"""\s(?:href|src)=["']([^"']*)["']""")
ID = re.compile(r"""\sid=["']([^"']+)["']""")


def broken_links(site: Path) -> list[str]:
    """Relative links and sources of every page that name a missing file or anchor (404.html, whose
    links assume the site's root URL, is left out)."""
    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            ids[path] = set(ID.findall(path.read_text(encoding="utf-8"))) if path.suffix == ".html" else set()
        return ids[path]

    problems = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue
        for href in ATTRIBUTE.findall(page.read_text(encoding="utf-8")):
            href = html.unescape(href)
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("//"):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            name = page.relative_to(site)
            if not target.exists():
                problems.append(f"{name}: {href} (no such file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in ids_of(target):
                problems.append(f"{name}: {href} (no such anchor)")
    return problems


def stored_outputs(notebook: dict) -> tuple[int, int]:
    """(outputs, images) a notebook stores: every output of every code cell, and those with an image."""
    outputs = [output for cell in notebook["cells"] if cell["cell_type"] == "code" for output in cell.get("outputs", [])]
    images = [output for output in outputs if any(kind.startswith("image/") for kind in output.get("data", {}))]
    return len(outputs), len(images)


def shown_outputs(page_html: str) -> tuple[int, int]:
    """(outputs, images) a built notebook page shows."""
    return (len(re.findall(r'class="jp-OutputArea-child\b', page_html)),
            len(re.findall(r'<img\b[^>]*\bsrc="data:image/', page_html)))


def check_site(site: Path, notebooks: list[str]) -> list[str]:
    problems = []
    for path in sorted([*site.rglob("*.html"), *site.rglob("*.css")]):
        problems += [f"{path.relative_to(site)}: loads from the network: {ref}"
                     for ref in remote_references(path.read_text(encoding="utf-8"))]
    problems += broken_links(site)
    for source in notebooks:
        page = site / page_of(source)
        if not page.exists():
            problems.append(f"{source}: no page {page.relative_to(site)}")
            continue
        stored = stored_outputs(json.loads((REPO / source).read_text(encoding="utf-8")))
        shown = shown_outputs(page.read_text(encoding="utf-8"))
        if stored != shown:
            problems.append(f"{page_of(source)}: shows {shown[0]} outputs and {shown[1]} images, "
                            f"the notebook stores {stored[0]} and {stored[1]}")
    return problems


# ----------------------------------------------------------------------------- the build


def configuration(notebooks: list[str], repo_url: str | None) -> dict:
    """mkdocs.yml with what is derived from the repository: paths, the course's nav, the hooks."""
    import yaml

    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    titles = {path: notebook_title(json.loads((REPO / path).read_text(encoding="utf-8")), Path(path).stem)
              for path in notebooks}
    parts = course_parts(README.read_text(encoding="utf-8"), notebooks)
    if parts and parts[-1][0] == OTHER_PART:
        print(f"[site] not in the README's course table, listed last: {', '.join(parts[-1][1])}", flush=True)
    config.update(docs_dir=str(DOCS), site_dir=str(SITE), nav=site_nav(parts, titles), hooks=[str(Path(__file__))])
    extra = config.setdefault("extra", {})
    extra["course_pages"] = [HOME_SOURCE, *notebooks]
    if repo_url is not None:
        extra["repository_url"] = repo_url
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocs-jupyter" in plugin:
            plugin["mkdocs-jupyter"]["cache_dir"] = str(CACHE)
    return config


def stage(notebooks: list[str]) -> None:
    """build/site-docs/: README.md as index.md and copies of the notebooks (mkdocs reads one folder)."""
    shutil.rmtree(DOCS, ignore_errors=True)
    (DOCS / "notebooks").mkdir(parents=True)
    shutil.copyfile(README, DOCS / "index.md")
    for path in notebooks:
        shutil.copyfile(REPO / path, DOCS / path)


def last_commit_time() -> str | None:
    result = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


def build(repo_url: str | None = None) -> list[str]:
    """Build build/site/ and return the problems the checks found (empty when it is sound)."""
    import yaml

    notebooks = [path.relative_to(REPO).as_posix() for path in sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]
    stage(notebooks)
    generated = GENERATED
    generated.write_text(yaml.safe_dump(configuration(notebooks, repo_url), sort_keys=False, allow_unicode=True),
                         encoding="utf-8")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about its successor, printed on every build
    if "SOURCE_DATE_EPOCH" not in env and (commit_time := last_commit_time()):
        env["SOURCE_DATE_EPOCH"] = commit_time
    mkdocs = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--clean", "--strict",
                             "--config-file", str(generated)], cwd=REPO, env=env)
    if mkdocs.returncode:
        return [f"mkdocs build stopped with exit status {mkdocs.returncode} (its messages are above)"]
    return check_site(SITE, notebooks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo-url", default=None,
                        help="where the repository's files are browsed, e.g. https://github.com/OWNER/REPO/blob/main "
                             "(default: mkdocs.yml's extra.repository_url; empty: the .ipynb beside each page)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    problems = build(args.repo_url)
    if problems:
        print(f"[site] {len(problems)} problems in {SITE.relative_to(REPO)}/:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    pages = len(list(SITE.rglob("*.html")))
    print(f"[site] {SITE.relative_to(REPO)}/index.html: {pages} pages, no remote assets, every link resolves "
          f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
