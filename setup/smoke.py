"""Browser smoke test: the workbook as a learner meets it, in JupyterLab driven by headless Chromium.

    python setup/smoke.py                # the chosen notebooks (00, 02, 11, 17 and every one with a widget)
    python setup/smoke.py --only 11 17   # just these (name prefixes)

For each notebook: open it, check that opening did not mark it modified, clear every output, Run
All through the menu, wait until the kernel is idle with no `[*]` prompt left, then check that
every code cell ran, that no cell printed to stderr or showed a traceback, that every image loaded,
that moving each interactive widget (slider, dropdown, toggle, radio, checkbox, number box) changes
what the notebook shows, and that the browser console logged no error. In the first notebook with
a relative link to another notebook, clicking it must open that notebook in a JupyterLab tab.
Screenshots go to build/smoke/. Model calls replay from recordings (WORKBOOK_MODE=replay), and
JupyterLab runs with a throwaway settings folder and autosave off, so tracked files are never
written: the run ends by checking `git status`.

It installs what it needs when missing: Debian's chromium, chromium-driver and an emoji font
(apt-get, as root) and selenium (pip, into this Python's environment). Every process it starts
(JupyterLab and its kernels, chromedriver, chromium) is stopped by process id, even on failure.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
LIB = REPO / "lib"
SCREENSHOTS = REPO / "build" / "smoke"
ALWAYS = ("00", "02", "11", "17")  # setup, retrieval, reliability diagrams, routing

APT_PACKAGES = ("chromium", "chromium-driver", "fonts-noto-color-emoji")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

OPEN_TIMEOUT = 120      # seconds for JupyterLab to show the notebook with its kernel idle
RUN_ALL_TIMEOUT = 600   # seconds for Run All of one notebook
WIDGET_TIMEOUT = 60     # seconds for a widget's output to change after it moved
IDLE_RECHECK = 1.0      # seconds between the two idle checks

# JupyterLab 4 DOM (class names from @jupyterlab/notebook, cells, outputarea, statusbar; ipywidgets 8).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
CONTROLS = {  # widget kind -> the element a person interacts with
    "slider": ".widget-slider .noUi-handle",
    "dropdown": ".widget-dropdown select",
    "toggle buttons": ".widget-toggle-buttons",
    "radio buttons": ".widget-radio-box",
    "checkbox": ".widget-checkbox input[type=checkbox]",
    "number box": ".widget-text input[type=number]",
}


# ----------------------------------------------------------------------------- what to test

def code_of(cell: dict) -> str:
    """A code cell's source without comments (a comment may say "ipywidgets" without using it)."""
    return "\n".join(line.split("#", 1)[0] for line in "".join(cell.get("source", "")).splitlines())


def lib_modules_with_widgets() -> set[str]:
    pattern = re.compile(r"^\s*(import|from)\s+ipywidgets\b", re.MULTILINE)
    return {path.stem for path in LIB.glob("*.py") if pattern.search(path.read_text(encoding="utf-8"))}


def uses_widgets(notebook: dict, widget_modules: set[str]) -> bool:
    """Whether a notebook shows an ipywidgets control: its code, or a lib module it uses, imports ipywidgets.

    (A stored widget view alone does not count: tqdm's progress bars are widgets too.)"""
    for code in (code_of(cell) for cell in notebook["cells"] if cell["cell_type"] == "code"):
        if re.search(r"\bipywidgets\b", code):
            return True
        for module in widget_modules:
            if re.search(rf"\blib\.{module}\b|\bfrom\s+lib\s+import\s+[^\n]*\b{module}\b", code):
                return True
    return False


def chosen_notebooks(only: list[str]) -> list[Path]:
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    if only:
        return [path for path in paths if any(path.name.startswith(prefix) for prefix in only)]
    widget_modules = lib_modules_with_widgets()
    return [path for path in paths if path.name[:2] in ALWAYS
            or uses_widgets(json.loads(path.read_text(encoding="utf-8")), widget_modules)]


# ----------------------------------------------------------------------------- installs

def apt_missing(packages: tuple[str, ...]) -> list[str]:
    missing = []
    for package in packages:
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                                capture_output=True, text=True).stdout
        if "install ok installed" not in status:
            missing.append(package)
    return missing


def ensure_browser() -> None:
    missing = apt_missing(APT_PACKAGES) if shutil.which("dpkg-query") else []
    if missing:
        if os.geteuid() != 0:
            raise SystemExit(f"smoke: missing Debian packages {missing}; run as root, or "
                             f"`sudo apt-get install -y {' '.join(missing)}` first")
        print(f"[smoke] installing {', '.join(missing)} with apt-get", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"smoke: {path} is missing; install Debian's chromium and chromium-driver")


def ensure_selenium() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("[smoke] installing selenium with pip", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "selenium"], check=True)


# ----------------------------------------------------------------------------- processes

def children_of(pid: int) -> list[int]:
    """Every descendant process id of `pid`, read from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_pids(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM each process id, then SIGKILL those still running after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = [pid for pid in pids if alive(pid)]
        if not pids:
            return


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclasses.dataclass
class Lab:
    url: str
    token: str
    process: subprocess.Popen

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for kernel in self.api("GET", "kernels"):
            self.api("DELETE", f"kernels/{kernel['id']}")


def write_settings(folder: Path) -> None:
    """JupyterLab user settings for the run: autosave off, no news or update checks."""
    settings = {
        "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }
    for plugin, values in settings.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")


@contextlib.contextmanager
def jupyterlab(scratch: Path) -> Iterator[Lab]:
    """JupyterLab on 127.0.0.1 serving the repository as `make lab` does, in replay mode, with all
    its state (settings, workspaces, checkpoints, runtime files) under `scratch`."""
    port, token = free_port(), secrets.token_hex(16)
    write_settings(scratch / "settings")
    env = {**os.environ,
           "WORKBOOK_MODE": "replay",  # kernels inherit the server's environment
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "JUPYTER_CONFIG_DIR": str(scratch / "config"),
           "JUPYTER_DATA_DIR": str(scratch / "data"),
           "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(scratch / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
           "IPYTHONDIR": str(scratch / "ipython")}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--ServerApp.root_dir={REPO}", f"--IdentityProvider.token={token}",
               f"--FileCheckpoints.checkpoint_dir={scratch / 'checkpoints'}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = open(scratch / "jupyterlab.log", "w", encoding="utf-8")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    lab = Lab(f"http://127.0.0.1:{port}", token, process)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited early:\n{(scratch / 'jupyterlab.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                lab.api("GET", "status")
                break
            if time.monotonic() > deadline:
                raise RuntimeError("JupyterLab did not answer within 90 s")
            time.sleep(0.5)
        yield lab
    finally:
        processes = [process.pid, *children_of(process.pid)]  # the server and its kernels
        with contextlib.suppress(OSError):
            lab.shutdown_kernels()
        stop_pids(processes)
        log.close()


@contextlib.contextmanager
def chromium(scratch: Path):
    """Headless Chromium through Debian's chromedriver; quits and stops both, whatever happens."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1600", "--force-device-scale-factor=1", "--lang=en-US",
                     "--no-first-run", "--disable-extensions", "--disable-background-networking",
                     f"--user-data-dir={scratch / 'chromium'}"):
        options.add_argument(argument)
    options.set_capability("unhandledPromptBehavior", "accept")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for errors
    service = Service(executable_path=CHROMEDRIVER, log_output=str(scratch / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver_pid = service.process.pid
    try:
        yield driver
    finally:
        processes = [driver_pid, *children_of(driver_pid)]  # chromedriver, chromium and its helpers
        with contextlib.suppress(Exception):
            driver.quit()
        stop_pids(processes, grace=5)


# ----------------------------------------------------------------------------- the page

def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def wait_for(condition, timeout: float, what: str, interval: float = 0.25):
    """Poll `condition()` until it returns something truthy; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


PAGE_STATE = """
const notebook = document.querySelector(arguments[0]);
if (!notebook) return null;
const indicator = document.querySelector(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
const statusBar = Array.from(document.querySelectorAll('#jp-main-statusbar .jp-StatusBar-TextItem'))
    .map(item => item.textContent.trim());
const prompts = Array.from(notebook.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))
    .map(prompt => prompt.textContent.trim());
const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current');
return {
  cells: notebook.querySelectorAll('.jp-Cell').length,
  indicator: indicator ? indicator.getAttribute('data-status') : null,
  statusBar: statusBar,
  prompts: prompts,
  outputs: notebook.querySelectorAll('.jp-OutputArea-child').length,
  dirtyTab: tab ? tab.classList.contains('jp-mod-dirty') : null,
};
"""


def page_state(driver) -> dict | None:
    return js(driver, PAGE_STATE, NOTEBOOK)


def idle(state: dict | None) -> bool:
    """The kernel reads idle in the notebook's toolbar and in the status bar, and no cell shows [*]."""
    return bool(state and state["indicator"] == "idle"
                and any(text.endswith("Idle") for text in state["statusBar"])
                and not any("*" in prompt for prompt in state["prompts"]))


def busy(state: dict | None) -> bool:
    return bool(state and (state["indicator"] == "busy" or any("*" in p for p in state["prompts"])))


def wait_idle(driver, timeout: float, what: str) -> dict:
    """Idle, and still idle a moment later (a cell's output can set off another execution)."""
    deadline = time.monotonic() + timeout
    while True:
        state = wait_for(lambda: (lambda s: s if idle(s) else None)(page_state(driver)),
                         max(1.0, deadline - time.monotonic()), what)
        time.sleep(IDLE_RECHECK)
        again = page_state(driver)
        if idle(again):
            return again
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}: the kernel kept going busy ({state})")


def scroll_to_top(driver, element) -> None:
    """Scroll the notebook until `element` sits at the top and stays there: cells above it are laid
    out (content-visibility) only as they come into view, which moves it after the first scroll."""
    for _ in range(10):
        js(driver, "arguments[0].scrollIntoView({block: 'start'});", element)
        time.sleep(0.3)
        top = js(driver, "const outer = arguments[0].closest('.jp-WindowedPanel-outer');"
                         "return arguments[0].getBoundingClientRect().top"
                         " - (outer ? outer.getBoundingClientRect().top : 0);", element)
        if abs(top) < 2:
            return


def menu(driver, menu_label: str, command: str) -> None:
    """Click `menu_label` in the menu bar, then its item that runs `command`, as a person would."""
    from selenium.webdriver.common.by import By

    bar_items = driver.find_elements(By.CSS_SELECTOR, "#jp-menu-panel .lm-MenuBar-item")
    wanted = [item for item in bar_items if item.text.strip() == menu_label]
    if not wanted:
        raise RuntimeError(f"no {menu_label!r} in the menu bar: {[item.text for item in bar_items]}")
    wanted[0].click()
    selector = f'.lm-Menu li.lm-Menu-item[data-command="{command}"]:not(.lm-mod-disabled)'
    item = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, selector), 10,
                    f"menu item {command} under {menu_label}")[0]
    item.click()


def dismiss_toasts(driver) -> None:
    js(driver, "document.querySelectorAll('.Toastify__close-button').forEach(b => b.click());")


OUTPUT_SIGNATURE = """
// What the notebook shows outside its controls: images, widget outputs and HTML widgets' text.
const notebook = document.querySelector(arguments[0]);
const parts = [];
notebook.querySelectorAll('img').forEach(img => parts.push(img.src));
notebook.querySelectorAll('.widget-output, .widget-html-content, .widget-htmlmath-content')
    .forEach(el => parts.push(el.innerHTML));
notebook.querySelectorAll('.jp-OutputArea-output').forEach(el => {
  if (!el.closest('.jupyter-widgets')) parts.push(el.innerText);
});
return parts.join('\\n');
"""


def output_signature(driver) -> str:
    return hashlib.sha256(js(driver, OUTPUT_SIGNATURE, NOTEBOOK).encode()).hexdigest()


IMAGES = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.querySelector(arguments[0]).querySelectorAll('img'));
Promise.all(images.map(img => img.decode().then(() => null, () => null))).then(() =>
  done(images.map(img => ({ok: img.complete && img.naturalWidth > 0,
                           alt: img.alt || img.src.slice(0, 60)}))));
"""


def broken_images(driver) -> tuple[int, list[str]]:
    images = driver.execute_async_script(IMAGES, NOTEBOOK)
    return len(images), [image["alt"] for image in images if not image["ok"]]


# ----------------------------------------------------------------------------- one notebook

@dataclasses.dataclass
class Result:
    name: str
    seconds: float = 0.0       # Run All, from the menu click to idle
    total: float = 0.0         # opening, running and every widget
    widgets: int = 0
    images: int = 0
    link: str = ""             # the notebook a clicked relative link opened
    failures: list[str] = dataclasses.field(default_factory=list)


def move(driver, control, kind: str) -> str:
    """Change one widget control the way a person would; return what was done."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    if kind == "slider":
        at_max = control.get_attribute("aria-valuenow") == control.get_attribute("aria-valuemax")
        control.click()
        control.send_keys(Keys.ARROW_LEFT if at_max else Keys.ARROW_RIGHT)
        return f"pressed {'←' if at_max else '→'} on the slider"
    if kind == "dropdown":
        select = Select(control)
        options = [option.text for option in select.options]
        current = select.first_selected_option.text
        target = options[(options.index(current) + 1) % len(options)]
        select.select_by_visible_text(target)
        return f"chose {target!r}"
    if kind in ("toggle buttons", "radio buttons"):
        selector = "button:not(.mod-active)" if kind == "toggle buttons" else "input[type=radio]:not(:checked)"
        choice = control.find_elements(By.CSS_SELECTOR, selector)[0]
        label = choice.text or choice.get_attribute("value")
        choice.click()
        return f"picked {label!r}"
    if kind == "checkbox":
        control.click()
        return "ticked the box"
    control.send_keys(Keys.ARROW_UP, Keys.ENTER)
    return "pressed ↑ in the number box"


def check_widgets(driver, stem: str, result: Result) -> None:
    from selenium.webdriver.common.by import By

    controls = [(kind, element) for kind, selector in CONTROLS.items()
                for element in driver.find_elements(By.CSS_SELECTOR, f"{NOTEBOOK} {selector}")]
    # page order, so screenshots are numbered as a reader meets the widgets
    order = js(driver, "return arguments[0].map(e => { const r = e.getBoundingClientRect(); "
                       "return r.top + window.scrollY; });", [element for _, element in controls])
    controls = [control for _, control in sorted(zip(order, controls), key=lambda pair: pair[0])]
    result.widgets = len(controls)
    for number, (kind, control) in enumerate(controls, 1):
        # what a person watches while moving it: every output of its cell (the controls, and the
        # figure or table they redraw, in the widget's own output or in a display updated in place)
        view = control.find_element(By.XPATH, "./ancestor::div[contains(concat(' ', normalize-space(@class), ' '),"
                                              " ' jp-OutputArea ')][last()]")
        scroll_to_top(driver, view)
        before, label, value = output_signature(driver), *widget_label_and_value(control, kind)
        view.screenshot(str(SCREENSHOTS / f"{stem}-widget{number}-before.png"))
        try:
            action = move(driver, control, kind)
            wait_for(lambda before=before: output_signature(driver) != before, WIDGET_TIMEOUT,
                     f"the output to change after moving widget {number} ({kind} {label!r})")
            wait_idle(driver, WIDGET_TIMEOUT, f"the kernel after moving widget {number}")
            wait_for(lambda: not broken_images(driver)[1], 10, "the new images to load")
        except (TimeoutError, IndexError) as error:
            result.failures.append(f"widget {number} ({kind} {label!r}): {error}")
            continue
        finally:
            scroll_to_top(driver, view)
            view.screenshot(str(SCREENSHOTS / f"{stem}-widget{number}-after.png"))
        moved = widget_label_and_value(control, kind)[1]
        print(f"    widget {number} ({kind} {label!r}): {action}, {value} -> {moved}; the output changed", flush=True)


def widget_label_and_value(control, kind: str) -> tuple[str, str]:
    """The description a person reads next to a control, and the value it shows."""
    from selenium.webdriver.common.by import By

    box = control.find_element(By.XPATH, "./ancestor-or-self::div[contains(@class, 'widget-inline-hbox')"
                                         " or contains(@class, 'widget-toggle-buttons')"
                                         " or contains(@class, 'widget-radio')][1]")
    labels = [element.text.strip() for element in box.find_elements(By.CSS_SELECTOR, ".widget-label, .widget-label-basic")]
    label = next((text for text in labels if text), "")  # a checkbox hides its first label
    if kind == "slider":
        readouts = box.find_elements(By.CSS_SELECTOR, ".widget-readout")
        value = readouts[0].text.strip() if readouts else control.get_attribute("aria-valuenow")
    elif kind == "dropdown":
        value = control.get_attribute("value")
    elif kind == "toggle buttons":
        value = " ".join(b.text for b in box.find_elements(By.CSS_SELECTOR, "button.mod-active"))
    elif kind == "radio buttons":
        value = " ".join(i.get_attribute("value") for i in box.find_elements(By.CSS_SELECTOR, "input:checked"))
    elif kind == "checkbox":
        value = str(control.is_selected())
    else:
        value = control.get_attribute("value")
    return label, value


def check_link(driver, result: Result, current: str) -> str:
    """Click the first relative link to another notebook; it must open in a JupyterLab tab.

    JupyterLab renders `[next](03-x.ipynb)` as a link to the server's /files/ URL and opens the
    notebook in a tab on click, instead of the raw file, which is what this checks."""
    from selenium.webdriver.common.by import By

    for link in driver.find_elements(By.CSS_SELECTOR, f"{NOTEBOOK} .jp-MarkdownOutput a[href]"):
        path = urllib.parse.unquote(urllib.parse.urlsplit(link.get_attribute("href")).path)
        if path.startswith("/files/") and path.endswith(".ipynb") and not path.endswith(f"/{current}"):
            break
    else:
        return ""
    target = path.rsplit("/", 1)[-1]
    js(driver, "arguments[0].scrollIntoView({block: 'center'});", link)
    link.click()
    try:
        wait_for(lambda: js(driver, "const t = document.querySelector("
                                    "'.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel');"
                                    "return t && t.textContent.trim() === arguments[0];", target),
                 30, f"the link to {target} to open it in a JupyterLab tab")
    except TimeoutError as error:
        result.failures.append(f"{error} (the page is now {driver.current_url})")
    return target


def smoke_one(driver, lab: Lab, path: Path, follow_link: bool = False) -> Result:
    from selenium.webdriver.common.by import By

    result = Result(path.name)
    stem = path.stem
    started = time.monotonic()
    stored = json.loads(path.read_text(encoding="utf-8"))
    stored_metadata = stored["metadata"]
    expected_cells = len(stored["cells"])
    expected_code = sum(cell["cell_type"] == "code" for cell in stored["cells"])
    with contextlib.suppress(Exception):
        driver.get_log("browser")  # drop what earlier pages logged
    try:
        driver.get(f"{lab.url}/lab/tree/{path.relative_to(REPO).as_posix()}?reset")
        wait_for(lambda: (lambda s: s and s["cells"] == expected_cells)(page_state(driver)), OPEN_TIMEOUT,
                 f"{expected_cells} cells on the page")
        wait_idle(driver, OPEN_TIMEOUT, "the kernel to start and read Idle")
        dismiss_toasts(driver)
        js(driver, "jupyterapp.shell.collapseLeft();")  # the file browser: more room for the notebook
        time.sleep(2)  # JupyterLab writes the kernel's spec and language into the metadata on connect
        if page_state(driver)["dirtyTab"] or js(driver, "return jupyterapp.shell.currentWidget.context.model.dirty"):
            now = js(driver, "return jupyterapp.shell.currentWidget.context.model.sharedModel.getMetadata();")
            changed = {key: {"stored": stored_metadata.get(key), "now": now.get(key)}
                       for key in sorted(set(now) | set(stored_metadata)) if now.get(key) != stored_metadata.get(key)}
            result.failures.append(f"marked modified on open; metadata JupyterLab changed: {changed}")

        menu(driver, "Edit", "editmenu:clear-all")
        wait_for(lambda: page_state(driver)["outputs"] == 0, 30, "every output to clear")
        menu(driver, "Run", "runmenu:run-all")
        run_start = time.monotonic()
        try:
            wait_for(lambda: busy(page_state(driver)) or
                     all(re.fullmatch(r"\[\d+\]:", p) for p in page_state(driver)["prompts"]),
                     30, "the kernel to go busy after Run All")
        except TimeoutError as error:
            result.failures.append(str(error))
        state = wait_idle(driver, RUN_ALL_TIMEOUT, "Run All to finish")
        result.seconds = time.monotonic() - run_start
        unrun = [i for i, prompt in enumerate(state["prompts"]) if not re.fullmatch(r"\[\d+\]:", prompt)]
        if len(state["prompts"]) != expected_code or unrun:
            result.failures.append(f"{len(unrun)} of {len(state['prompts'])} code cells did not run "
                                   f"(prompts {[state['prompts'][i] for i in unrun[:5]]})")

        stderr = driver.find_elements(By.CSS_SELECTOR, f"{NOTEBOOK} {STDERR}")
        if stderr:
            result.failures.append(f"{len(stderr)} stderr box(es), the first: {stderr[0].text[:300]!r}")
        outputs_text = js(driver, "return Array.from(document.querySelector(arguments[0])"
                                  ".querySelectorAll('.jp-OutputArea')).map(o => o.innerText).join('\\n');",
                          NOTEBOOK)
        if "Traceback" in outputs_text:
            at = outputs_text.index("Traceback")
            result.failures.append(f"a traceback in the outputs: {outputs_text[at:at + 300]!r}")
        result.images, broken = broken_images(driver)
        if broken:
            result.failures.append(f"{len(broken)} of {result.images} images did not load: {broken[:3]}")

        # the screenshot shows the cell of the first figure (or the first output) and what follows
        first = js(driver, "const n = document.querySelector(arguments[0]);"
                           "const o = n.querySelector('.jp-OutputArea-output img') || n.querySelector('.jp-OutputArea-output');"
                           "return o && o.closest('.jp-Cell');", NOTEBOOK)
        if first:
            scroll_to_top(driver, first)
        driver.save_screenshot(str(SCREENSHOTS / f"{stem}.png"))
        check_widgets(driver, stem, result)
        if follow_link:
            result.link = check_link(driver, result, path.name)
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        if errors:
            result.failures.append(f"{len(errors)} error(s) in the browser console, the first: {errors[0][:300]!r}")
    except Exception as error:  # a page that never got there: record it, screenshot it, go on
        result.failures.append(f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
        with contextlib.suppress(Exception):
            driver.save_screenshot(str(SCREENSHOTS / f"{stem}-failed.png"))
    finally:
        # leave without a save prompt: the cleared and re-run notebook is never written (autosave off)
        with contextlib.suppress(Exception):
            js(driver, "for (const w of jupyterapp.shell.widgets('main')) if (w.context) w.context.model.dirty = false;")
        with contextlib.suppress(Exception):
            lab.shutdown_kernels()
        result.total = time.monotonic() - started
    return result


# ----------------------------------------------------------------------------- main

def tracked_state() -> str:
    """`git status` plus the content of every file it lists, to compare before and after."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    digests = []
    for line in status.splitlines():
        file = REPO / line[3:].split(" -> ")[-1].strip('"')
        digests.append(hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "-")
    return status + "\n".join(digests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[], help="notebook name prefixes, e.g. 11 17")
    args = parser.parse_args()
    paths = chosen_notebooks(args.only)
    if not paths:
        print(f"no notebooks match {args.only}", file=sys.stderr)
        return 2
    # a SIGTERM (a CI timeout, `kill`) unwinds like Ctrl+C, so every process started is stopped
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ensure_browser()
    ensure_selenium()
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    before = tracked_state()
    print(f"[smoke] {len(paths)} notebooks in JupyterLab + headless Chromium, replay mode: "
          f"{' '.join(path.name[:2] for path in paths)}", flush=True)
    started = time.monotonic()
    results: list[Result] = []
    scratch = Path(tempfile.mkdtemp(prefix="workbook-smoke-"))
    try:
        with jupyterlab(scratch) as lab, chromium(scratch) as driver:
            driver.get(f"{lab.url}/lab?token={lab.token}")  # sets the login cookie
            for path in paths:
                result = smoke_one(driver, lab, path, follow_link=not any(r.link for r in results))
                results.append(result)
                verdict = "ok" if not result.failures else "FAILED"
                print(f"{result.name:<40} run all {result.seconds:6.1f} s  total {result.total:6.1f} s  "
                      f"{result.images:2d} images  {result.widgets:2d} widgets  {verdict}", flush=True)
                if result.link:
                    print(f"    a relative link opened {result.link} in a JupyterLab tab", flush=True)
                for failure in result.failures:
                    print(f"    {failure}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    unchanged = Result("tracked files unchanged (git status)")
    after = tracked_state()
    if after != before:
        changed = sorted(set(after.splitlines()) ^ set(before.splitlines()))
        unchanged.failures.append(f"git status changed: {changed[:5]}")
    results.append(unchanged)
    print(f"{unchanged.name:<40} {'ok' if not unchanged.failures else 'FAILED'}")
    for failure in unchanged.failures:
        print(f"    {failure}")
    failed = sum(bool(result.failures) for result in results)
    print(f"[smoke] screenshots in {SCREENSHOTS.relative_to(REPO)}/; {time.monotonic() - started:.0f} s in all")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
