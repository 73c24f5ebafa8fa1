"""Store in every notebook the kernelspec that ipykernel installs, so opening one leaves it unmodified.

JupyterLab writes the running kernel's spec (name, display name, language) into a notebook's
metadata when it connects. A notebook that stores another display name ("Python 3" instead of
"Python 3 (ipykernel)") is therefore marked modified the moment it opens, and autosave rewrites
the tracked file. This script rewrites only `metadata.kernelspec`; cells and outputs are untouched.

    python setup/fix_kernelspec.py          # rewrite the notebooks whose kernelspec differs
    python setup/fix_kernelspec.py --check  # list them and exit 1, change nothing
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
KERNEL_NAME = "python3"  # the name ipykernel installs its spec under, and the one the runners start


def installed_kernelspec(name: str = KERNEL_NAME) -> dict[str, str]:
    """The kernelspec metadata JupyterLab writes for the kernel `name` installed in this environment."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


def fix(path: Path, kernelspec: dict[str, str], write: bool = True) -> bool:
    """Set `path`'s kernelspec to `kernelspec`; return whether it differed (and was rewritten if `write`)."""
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    if dict(notebook.metadata.get("kernelspec", {})) == kernelspec:
        return False
    if write:
        notebook.metadata["kernelspec"] = kernelspec
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # a kill leaves the notebook whole
        try:
            nbformat.write(notebook, partial)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only list notebooks that differ; exit 1 if any")
    args = parser.parse_args()
    kernelspec = installed_kernelspec()
    changed = [path for path in notebook_paths() if fix(path, kernelspec, write=not args.check)]
    verb = "differ from" if args.check else "rewritten to"
    for path in changed:
        print(f"{path.relative_to(REPO)}: kernelspec {verb} {kernelspec}")
    if not changed:
        print(f"every notebook stores {kernelspec}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
