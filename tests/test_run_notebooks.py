"""setup/run_notebooks.py in record mode: a failed run keeps the notebook, two runs at once keep each other's work.

Each runner is a real process (`make record` / `make update`) executing small notebooks in real
kernels; the notebooks record through the recording layer with a tokenizer as their model, into
folders of their own.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from lib.backends.factory import BackendConfig
from lib.recording import RecordedLLM, RecordingStore

REPO = Path(__file__).resolve().parent.parent

RUNNER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/setup")
import run_notebooks

notebooks, recordings, build = (Path(folder) for folder in sys.argv[2:5])
sys.exit(run_notebooks.main(sys.argv[5:], notebooks=notebooks, recordings=recordings, build=build))
"""


class _Tokenizer:
    def tokenize(self, text: str) -> list[str]:
        return text.split()


def _notebook(folder: Path, name: str, recordings: Path, calls: int, then: str = "") -> Path:
    """A notebook that records `calls` tokenize calls into `recordings/<name>.jsonl`, then runs `then`."""
    setup = (f"import sys, time\nfrom pathlib import Path\nsys.path.insert(0, {str(REPO)!r})\n"
             "from lib.backends.factory import BackendConfig\nfrom lib.recording import RecordedLLM, RecordingStore\n"
             "from lib.settings import mode_setting\n\n"
             "class Tokenizer:\n    def tokenize(self, text):\n        return text.split()\n\n"
             f"llm = RecordedLLM(BackendConfig('embedded'), Tokenizer, RecordingStore({name!r}, "
             f"folder=Path({str(recordings)!r})), mode_setting())")
    record = f"for number in range({calls}):\n    llm.tokenize(f'{name} call {{number}}')\nprint('recorded', {calls})"
    cells = [new_code_cell(setup), new_code_cell(record)] + ([new_code_cell(then)] if then else [])
    path = folder / f"{name}.ipynb"
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                      "language": "python"}}), path)
    return path


def _runner(tmp_path: Path, *arguments: str) -> subprocess.Popen:
    folders = [str(tmp_path / part) for part in ("notebooks", "recordings", "build")]
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(REPO), *folders, *arguments],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _texts(recordings: Path, name: str) -> list[str]:
    store = RecordingStore(name, folder=recordings)
    assert store.header is not None, f"{name}.jsonl lost its header"
    return [call["request"]["text"] for call in store.calls()]


def test_a_failed_record_keeps_the_notebook_and_its_recording_byte_for_byte(tmp_path) -> None:
    recordings = tmp_path / "recordings"
    old = RecordedLLM(BackendConfig("embedded"), _Tokenizer, RecordingStore("01-fails", folder=recordings), "record")
    old.tokenize("the recording made before")
    old.finish_recording()
    notebook = _notebook(tmp_path / "notebooks", "01-fails", recordings, 2,
                         then="raise RuntimeError('the server stopped answering')")
    before = {path: path.read_bytes() for path in (notebook, recordings / "01-fails.jsonl")}
    runner = _runner(tmp_path, "--record", "--only", "01")
    output, _ = runner.communicate(timeout=300)
    assert runner.returncode == 1, output
    assert "the server stopped answering" in output and "kept as they were" in output
    for path, content in before.items():
        assert path.read_bytes() == content, f"{path.name} was rewritten by a failed run"
    assert not [path.name for path in tmp_path.rglob("*.new")]
    failed_copy = nbformat.read(tmp_path / "build" / "01-fails.ipynb", as_version=4)
    assert failed_copy.cells[2].outputs[0]["evalue"] == "the server stopped answering"


def test_runs_at_once_keep_each_others_recordings_and_a_second_run_on_a_notebook_is_refused(tmp_path) -> None:
    recordings, notebooks = tmp_path / "recordings", tmp_path / "notebooks"
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    wait = (f"from pathlib import Path\nPath({str(paused)!r}).touch()\n"
            f"while not Path({str(resume)!r}).exists():\n    time.sleep(0.05)\n"
            "llm.tokenize('after the other runs')")
    _notebook(notebooks, "01-long", recordings, 6, then=wait)
    _notebook(notebooks, "02-short", recordings, 3)
    first = _runner(tmp_path, "--record", "--only", "01")
    started = [first]
    try:
        deadline = time.monotonic() + 240
        while not paused.exists():  # the first run's kernel has half of its new recording written
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first notebook never reached its pause"
            time.sleep(0.05)
        started.append(again := _runner(tmp_path, "--update", "--only", "01"))
        output, _ = again.communicate(timeout=120)
        assert again.returncode == 2, output
        assert f"notebook 01-long is being recorded by another run (process {first.pid}" in output
        started.append(other := _runner(tmp_path, "--record", "--only", "02"))
        output, _ = other.communicate(timeout=300)
        assert other.returncode == 0, output
        resume.touch()
        output, _ = first.communicate(timeout=300)
        assert first.returncode == 0, output
    finally:  # a failed check leaves no runner waiting on the pause
        resume.touch()
        for runner in started:
            if runner.poll() is None:
                runner.kill()
                runner.wait(timeout=30)
    assert _texts(recordings, "01-long") == [f"01-long call {n}" for n in range(6)] + ["after the other runs"]
    assert _texts(recordings, "02-short") == [f"02-short call {n}" for n in range(3)]
    for name in ("01-long", "02-short"):
        executed = nbformat.read(notebooks / f"{name}.ipynb", as_version=4)
        assert executed.cells[1].outputs[0]["text"].startswith("recorded"), f"{name}.ipynb has no outputs"
    assert not [path.name for path in tmp_path.rglob("*.new")]
