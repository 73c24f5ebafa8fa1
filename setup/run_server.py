"""Execute every notebook live against the workbook's model behind llama-cpp-python's server.

    python setup/run_server.py                   # all notebooks (make run-server)
    python setup/run_server.py --only 06-grammars

This is the classroom set-up on one machine: the pinned model is started behind
`python -m llama_cpp.server` on 127.0.0.1 (the README's command, with the context size of
WORKBOOK_N_CTX and the threads of WORKBOOK_THREADS, as the embedded model gets), and once it
answers, the notebooks run with WORKBOOK_BACKEND=openai, WORKBOOK_BASE_URL and WORKBOOK_MODEL
pointing at it. The per-notebook table is `make run`'s; executed copies go to build/server/
and the server's own log to build/llama-cpp-server.log. The server is stopped when the run ends,
fails or is interrupted (Ctrl+C, SIGTERM). The exit status is 0 only when every notebook ran.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from lib.backends.server import running_server  # noqa: E402
from setup.run_notebooks import BUILD, SelectionError, select_notebooks  # noqa: E402
from setup.run_notebooks import main as run_notebooks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run only this notebook: its number (06), name or file")
    parser.add_argument("--port", type=int, default=None, help="the server's port (a free one by default)")
    args = parser.parse_args(argv)
    try:  # before the server starts
        select_notebooks(args.only)
    except SelectionError as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    BUILD.mkdir(parents=True, exist_ok=True)
    log = BUILD / "llama-cpp-server.log"
    print("starting llama_cpp.server with the workbook's model ...", flush=True)
    try:
        with running_server(port=args.port, log=log) as server:
            print(f"the server answers on {server.base_url} as model {server.model!r} "
                  f"(context {server.n_ctx} tokens, {server.threads} threads; its log: {log.relative_to(REPO)})",
                  flush=True)
            # The environment is how the server reaches the notebook kernels run_notebooks starts.
            os.environ.update(WORKBOOK_BACKEND="openai", WORKBOOK_BASE_URL=server.base_url, WORKBOOK_MODEL=server.model)
            return run_notebooks(["--only", args.only], build=BUILD / "server")
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl+C or SIGTERM; inside a running notebook,
        # nbclient's event loop turns the interrupt into a cancellation
        print("interrupted: the server was stopped", file=sys.stderr)
        return 130
    except RuntimeError as error:  # the server did not start
        print(f"failed: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
