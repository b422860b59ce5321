"""One timed decoding run of ``decode_backends.py``, in a subprocess whose ``flexatt`` is the
tree on its ``PYTHONPATH`` (this working tree or a baseline commit's worktree).

    python benchmarks/_decode_probe.py MODEL.ckpt BACKEND TAU SENTENCES BEAM BATCH_SIZE THREADS

Decodes the first SENTENCES test pairs of ``artifacts/tok`` in length-grouped batches with beam
search (greedy for BEAM 1; TAU ``inf`` for τ = ∞) once to warm up, then once timed, and prints
one JSON line: the seconds, the sentences, the window sum and a digest of the hypotheses (so the
two trees can be checked to decode alike)."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, first_batches  # noqa: E402

from flexatt import decoding  # noqa: E402
from flexatt.data.subwords import EncodedSplit  # noqa: E402
try:
    from flexatt.checkpoints import load_model  # noqa: E402
except ImportError:  # a baseline from before loading moved out of flexatt.evaluation
    from flexatt.evaluation import load_model  # noqa: E402


def main() -> None:
    ckpt, backend, tau, sentences, beam, batch_size, threads = sys.argv[1:8]
    torch.set_num_threads(int(threads))
    tau = float(tau)  # inf: every position
    model = load_model(ckpt)
    split = EncodedSplit.load(ROOT / "artifacts/tok/test.npz")
    batches = first_batches(split, int(sentences), int(batch_size))

    def run() -> tuple[float, list, int]:
        hyps, window = [], 0
        start = time.perf_counter()
        with torch.no_grad():
            for b in batches:
                limit = (b.src_len.float() * 2.0).long() + 10
                if int(beam) == 1:
                    out = decoding.greedy(model, b.src, b.src_len, limit, tau, backend=backend)
                else:
                    out = decoding.beam_search(model, b.src, b.src_len, limit, int(beam), tau=tau, backend=backend)
                hyps += out.tokens.tolist()
                window += int(out.window_sum.sum())
        return time.perf_counter() - start, hyps, window

    run()
    seconds, hyps, window = run()
    print(json.dumps({"seconds": seconds, "sentences": len(hyps), "window_sum": window,
                      "hypotheses": hashlib.sha256(json.dumps(hyps).encode()).hexdigest()[:12]}))


if __name__ == "__main__":
    main()
