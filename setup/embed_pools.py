"""Embed the BANKING77 and CLINC150 training pools once, as `make setup` assembles the model.

    python setup/embed_pools.py

The retrievers and baselines of notebooks 06, 08 and 11-17 (and their tests) need MiniLM vectors
of every pool message: 9,233 and 14,250 texts, about 40 s on two cores. `lib.indexes.pool_embeddings`
keeps them in .cache/embeddings/ under a hash of the texts; made here, no notebook and no first
`make test` waits for them. Safe to re-run: a pool already cached is read, not embedded again.
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.indexes import pool_embeddings  # noqa: E402
from lib.saved_runs.decisions import TASKS, training_pool  # noqa: E402

if __name__ == "__main__":
    for task in TASKS:
        start = time.perf_counter()
        vectors = pool_embeddings(training_pool(task)["text"].tolist())
        print(f"[embeddings] {task} training pool: {len(vectors):,} vectors ({time.perf_counter() - start:.0f} s)")
