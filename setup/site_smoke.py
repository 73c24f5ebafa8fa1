"""Browser test of the course site (`make site-smoke`, after `make site`): build/site/ served on
127.0.0.1, as a teacher would publish it, and read in headless Chromium.

    python setup/site_smoke.py

It checks, each as one line of the report:
- the home page: the README's title, and a table of contents listing every notebook in the
  course's order (setup/site.py's order, from the README's table);
- three notebook pages, the first with figures in each of parts I, II and III: the source note
  and its link (the .ipynb answers), every image decoded (naturalWidth > 0) and as many as the
  notebook stores, every formula drawn (MathML with a size);
- search: a word from one of those notebooks that no other notebook or the README contains is
  typed into the search box; the results must list that notebook's page, and clicking it opens it;
- previous and next: the footer's next link of the first page opens the next notebook in course
  order, and that page's previous link comes back;
- a link in a notebook's text to another notebook opens that notebook's page;
- on every page: nothing requested from any host but 127.0.0.1 (the page's resource timing, which
  lists failed requests too) and no error in the browser console;
- from disk (file://): the home page and a notebook page open with their figures.

Screenshots go to build/site-smoke/. Debian's chromium and chromedriver are installed with apt-get
when missing (as `make smoke` does, with setup/smoke.py's functions); the web server is a thread of
this process, and chromedriver and chromium are stopped by process id whatever happens.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from setup import site as course  # noqa: E402
from setup.smoke import chromium, ensure_browser, ensure_selenium, js, wait_for  # noqa: E402

SCREENSHOTS = REPO / "build" / "site-smoke"
SEARCH_TIMEOUT = 60  # seconds for the search worker to index the site and list results
PAGE_TIMEOUT = 30    # seconds for a clicked link to open its page


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on a free port of 127.0.0.1, from a thread of this process."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# ----------------------------------------------------------------------------- what to read

def notebook_sources() -> list[str]:
    return [path.relative_to(REPO).as_posix() for path in sorted(course.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))]


def course_order() -> tuple[list[tuple[str, list[str]]], list[str]]:
    parts = course.course_parts(course.README.read_text(encoding="utf-8"), notebook_sources())
    return parts, [source for _, sources in parts for source in sources]


def read_notebook(source: str) -> dict:
    return json.loads((REPO / source).read_text(encoding="utf-8"))


def pages_to_read(parts: list[tuple[str, list[str]]]) -> list[str]:
    """The first notebook with figures in each of the three parts after setup (or the first notebooks)."""
    chosen = []
    for _, sources in parts[1:4]:
        with_figures = [source for source in sources if course.stored_outputs(read_notebook(source))[1]]
        chosen.append((with_figures or sources)[0])
    return chosen if len(chosen) == 3 else [source for _, sources in parts for source in sources][:3]


def markdown_text(notebook: dict) -> str:
    return "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")


def search_term(source: str, others: list[str]) -> str:
    """The first word of 8+ letters in `source`'s markdown that appears nowhere in the other notebooks
    (cells and outputs) or the README, so the search must find this notebook's page."""
    elsewhere = "\n".join([course.README.read_text(encoding="utf-8").lower(),
                           *((REPO / other).read_text(encoding="utf-8").lower() for other in others if other != source)])
    for word in re.findall(r"\b[A-Za-z]{8,}\b", markdown_text(read_notebook(source))):
        if word.lower() not in elsewhere:
            return word.lower()
    raise RuntimeError(f"{source}: no word of its own to search for")


# ----------------------------------------------------------------------------- the page

PAGE_FACTS = """
const images = Array.from(document.querySelectorAll('article img'));
return {
  title: document.title,
  images: images.length,
  brokenImages: images.filter(img => !(img.complete && img.naturalWidth > 0)).map(img => img.alt || img.src.slice(0, 60)),
  formulas: Array.from(document.querySelectorAll('article math')).map(m => m.getBoundingClientRect().width),
  sourceLinks: Array.from(document.querySelectorAll('.course-source a')).map(a => a.href),
  note: (document.querySelector('.course-source') || {}).innerText || '',
  nav: Array.from(document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]'))
         .map(a => a.href).filter(href => /\\/notebooks\\/[0-9][0-9]-[^/]*\\.html$/.test(href)),
  resources: performance.getEntriesByType('resource').map(entry => entry.name),
};
"""


def open_page(driver, url: str) -> dict:
    driver.get(url)
    wait_for(lambda: js(driver, "return document.readyState") == "complete", PAGE_TIMEOUT, f"{url} to load")
    driver.execute_async_script("const done = arguments[arguments.length - 1];"
                                "Promise.all(Array.from(document.images).map(i => i.decode().catch(() => null)))"
                                ".then(() => done(null));")
    return js(driver, PAGE_FACTS)


def remote_requests(facts: dict, origin: str) -> list[str]:
    return [name for name in facts["resources"] if not name.startswith((origin + "/", "data:", "blob:", "file:"))]


def console_errors(driver) -> list[str]:
    return [entry["message"][:200] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name: str, element=None) -> str:
    if element is not None:
        js(driver, "arguments[0].scrollIntoView({block: 'center'});", element)
        time.sleep(0.3)
    else:
        js(driver, "window.scrollTo(0, 0);")
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path.relative_to(REPO).as_posix()


def path_of(url: str, origin: str) -> str:
    """The site path of a page URL (query and fragment dropped): http://127.0.0.1:8000/notebooks/x.html -> notebooks/x.html."""
    return url.split("#", 1)[0].split("?", 1)[0].removeprefix(origin + "/")


def click_and_wait(driver, element, origin: str, expected: str) -> str:
    element.click()
    return wait_for(lambda: (lambda p: p if p == expected else None)(path_of(driver.current_url, origin)),
                    PAGE_TIMEOUT, f"{expected} to open (at {driver.current_url})")


# ----------------------------------------------------------------------------- the checks

class Report:
    def __init__(self) -> None:
        self.passed = self.failed = 0

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[list[str]]:
        """One line of the report: the body appends what it saw to `seen` and raises on a failure."""
        seen: list[str] = []
        try:
            yield seen
        except Exception as error:  # one check's failure is reported and the others still run
            self.failed += 1
            print(f"FAILED {name}: {type(error).__name__}: {error}", flush=True)
        else:
            self.passed += 1
            print(f"ok     {name}: {'; '.join(seen)}", flush=True)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def check_page_health(driver, facts: dict, origin: str) -> None:
    remote = remote_requests(facts, origin)
    expect(not remote, f"requested from other hosts: {remote[:5]}")
    errors = console_errors(driver)
    expect(not errors, f"console errors: {errors[:3]}")


def smoke(driver, origin: str, report: Report) -> None:
    from selenium.webdriver.common.by import By

    parts, order = course_order()
    titles = {source: course.notebook_title(read_notebook(source), source) for source in order}
    chosen = pages_to_read(parts)

    with report.check("home page") as seen:
        facts = open_page(driver, f"{origin}/index.html")
        readme_title = course.README.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
        expect(readme_title in facts["title"], f"title {facts['title']!r} lacks {readme_title!r}")
        listed = [path_of(href, origin) for href in dict.fromkeys(facts["nav"])]
        expected = [course.page_of(source) for source in order]
        expect(listed == expected, f"table of contents {listed} is not the course order {expected}")
        check_page_health(driver, facts, origin)
        seen += [f"{facts['title']!r}", f"{len(listed)} notebooks in the table of contents in course order",
                 screenshot(driver, "home")]

    for number, source in enumerate(chosen, 1):
        page = course.page_of(source)
        with report.check(f"notebook page {page}") as seen:
            facts = open_page(driver, f"{origin}/{page}")
            expect(titles[source] in facts["title"], f"title {facts['title']!r} lacks {titles[source]!r}")
            stored_images = course.stored_outputs(read_notebook(source))[1]
            expect(facts["images"] == stored_images, f"{facts['images']} images shown, {stored_images} stored")
            expect(not facts["brokenImages"], f"images that did not render: {facts['brokenImages']}")
            expect(all(width > 0 for width in facts["formulas"]), f"formulas without a size: {facts['formulas']}")
            expect(facts["sourceLinks"], "no source link")
            expect("make run" in facts["note"] and "make test" in facts["note"] and "make lab" in facts["note"],
                   f"the source note does not say how to run it live: {facts['note']!r}")
            with urllib.request.urlopen(facts["sourceLinks"][0], timeout=10) as response:
                downloaded = json.loads(response.read())
            expect(downloaded["cells"] == read_notebook(source)["cells"], "the source link's notebook differs")
            check_page_health(driver, facts, origin)
            seen += [f"{facts['images']} images rendered (naturalWidth > 0)",
                     f"{len(facts['formulas'])} formulas drawn", f"source link {path_of(facts['sourceLinks'][0], origin)}",
                     screenshot(driver, f"page-{number}-{Path(source).stem}")]
            figure = driver.find_elements(By.CSS_SELECTOR, "article img")
            formula = driver.find_elements(By.CSS_SELECTOR, "article math[display=block]")
            if formula:
                seen.append(screenshot(driver, f"page-{number}-{Path(source).stem}-formula", formula[0]))
            if figure:
                seen.append(screenshot(driver, f"page-{number}-{Path(source).stem}-figure", figure[0]))

    target = chosen[1]
    with report.check(f"search for a word of {Path(target).stem}") as seen:
        term = search_term(target, order)
        open_page(driver, f"{origin}/index.html")
        box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
        box.click()
        box.send_keys(term)
        wanted = course.page_of(target)
        results = wait_for(lambda: [link for link in driver.find_elements(By.CSS_SELECTOR, ".md-search-result__link")
                                    if path_of(link.get_attribute("href"), origin) == wanted],
                           SEARCH_TIMEOUT, f"search results for {term!r} listing {wanted}")
        total = len(driver.find_elements(By.CSS_SELECTOR, ".md-search-result__link"))
        shot = screenshot(driver, "search")
        click_and_wait(driver, results[0], origin, wanted)
        seen += [f"{term!r}: {total} results, {len(results)} in {wanted}", f"clicking one opened {wanted}", shot]

    first = chosen[0]
    with report.check(f"next and previous from {course.page_of(first)}") as seen:
        position = order.index(first)
        expect(position + 1 < len(order), f"{first} is the last notebook")
        following = order[position + 1]
        facts = open_page(driver, f"{origin}/{course.page_of(first)}")
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "a.md-footer__link--next"), origin,
                       course.page_of(following))
        facts = js(driver, PAGE_FACTS)
        expect(titles[following] in facts["title"], f"next opened {facts['title']!r}, not {titles[following]!r}")
        shot = screenshot(driver, "next", driver.find_element(By.CSS_SELECTOR, "a.md-footer__link--prev"))
        click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "a.md-footer__link--prev"), origin,
                       course.page_of(first))
        seen += [f"next opened {course.page_of(following)} ({titles[following]!r})",
                 f"previous came back to {course.page_of(first)}", shot]

    with report.check(f"a link in {course.page_of(chosen[2])}'s text to another notebook") as seen:
        open_page(driver, f"{origin}/{course.page_of(chosen[2])}")
        links = [link for link in driver.find_elements(By.CSS_SELECTOR, ".jp-RenderedMarkdown a[href]")
                 if re.search(r"/notebooks/[0-9][0-9]-[^/#]*\.html", link.get_attribute("href") or "")
                 and path_of(link.get_attribute("href"), origin) != course.page_of(chosen[2])]
        expect(links, "no link to another notebook in the text")
        link = links[-1]
        wanted = path_of(link.get_attribute("href"), origin)
        js(driver, "arguments[0].scrollIntoView({block: 'center'});", link)
        label = link.text
        click_and_wait(driver, link, origin, wanted)
        facts = js(driver, PAGE_FACTS)
        check_page_health(driver, facts, origin)
        seen.append(f"{label!r} opened {wanted} ({facts['title']!r})")

    with report.check("from disk (file://)") as seen:
        site = course.SITE.resolve().as_uri()
        facts = open_page(driver, f"{site}/index.html")
        expect(len(dict.fromkeys(facts["nav"])) == len(order), f"{len(facts['nav'])} notebooks in the contents")
        facts = open_page(driver, f"{site}/{course.page_of(chosen[0])}")
        expect(facts["images"] and not facts["brokenImages"], f"images: {facts['images']}, {facts['brokenImages']}")
        expect(not [name for name in facts["resources"] if not name.startswith(("file:", "data:", "blob:"))],
               "requested over the network")
        driver.get_log("browser")  # search's worker cannot start from file:// (said in the README)
        seen += [f"home page and {course.page_of(chosen[0])} open, {facts['images']} images rendered",
                 screenshot(driver, "from-disk")]


def main() -> int:
    if not (course.SITE / "index.html").exists():
        print(f"site-smoke: {course.SITE.relative_to(REPO)}/index.html is missing; run `make site` first",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ensure_browser()
    ensure_selenium()
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    started = time.monotonic()
    report = Report()
    scratch = Path(tempfile.mkdtemp(prefix="workbook-site-smoke-"))
    try:
        with served(course.SITE) as origin, chromium(scratch) as driver:
            print(f"[site-smoke] {course.SITE.relative_to(REPO)}/ at {origin} in headless Chromium", flush=True)
            smoke(driver, origin, report)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"[site-smoke] screenshots in {SCREENSHOTS.relative_to(REPO)}/; {time.monotonic() - started:.0f} s in all")
    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
