"""The registry of saved runs (lib.saved_runs.registry) and its one command (setup/run_saved.py):
every committed file is a registered run that loads with its family's reader, and `--list` says so."""
from __future__ import annotations

import importlib

import pytest

from lib.saved_runs.registry import FAMILIES, RUNS, saved_run, unregistered_files
from lib.saved_runs.store import RESULTS_DIR, SECOND_MODELS, run_command

SECOND_MODEL_FOLDERS = sorted(path for path in (RESULTS_DIR / SECOND_MODELS).iterdir() if path.is_dir())


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_every_saved_run_is_committed_and_loads_with_its_familys_reader(run):
    assert run.path().is_file(), f"{run.path()} is missing: make it with `{run.command()}`"
    assert run.load() is not None


@pytest.mark.parametrize("folder", SECOND_MODEL_FOLDERS, ids=[path.name for path in SECOND_MODEL_FOLDERS])
def test_a_second_models_files_are_registered_runs_that_load(folder):
    files = sorted(folder.glob("*.jsonl"))
    assert files and not unregistered_files(folder), f"{folder}: files no saved run names: {unregistered_files(folder)}"
    for path in files:
        saved_run(path.stem).load(folder)


def test_every_committed_file_is_a_registered_run():
    assert not unregistered_files(), "files under data/results/ that no saved run of lib.saved_runs.registry names"


def test_runs_have_one_name_and_their_inputs_come_first():
    names = [run.name for run in RUNS]
    assert len(set(names)) == len(names)
    for position, run in enumerate(RUNS):
        assert set(run.inputs) <= set(names[:position]), f"{run.name} reads {run.inputs}, which `make results` makes later"


def test_each_family_is_a_module_of_the_package_and_each_run_names_its_command():
    for family in FAMILIES:
        importlib.import_module(f"lib.saved_runs.{family}")
    assert set(FAMILIES) == {"committees", "tools", "decisions", "questions", "asking", "drift"}
    run = saved_run("banking77-full-test")
    assert run.command() == run_command("banking77-full-test") == "python setup/run_saved.py --run banking77-full-test"
    with pytest.raises(ValueError, match="no saved run 'nothing'.*--list"):
        saved_run("nothing")


def test_the_command_lists_every_run_and_how_far_it_got(capsys):
    from setup.run_saved import main

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    for run in RUNS:
        assert f"{run.name} " in listed
    assert f"{len(RUNS)} saved runs" in listed and "python setup/run_saved.py --run NAME" in listed
    assert "missing" not in listed


def test_the_command_refuses_an_unknown_run_and_replaying_a_live_only_run(capsys):
    from setup.run_saved import main

    with pytest.raises(SystemExit):
        main(["--run", "nothing"])
    with pytest.raises(SystemExit):
        main(["--run", "drift-base", "--replay"])
    assert "have no recordings to replay" in capsys.readouterr().err
