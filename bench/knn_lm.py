"""kNN-LM on WikiText-2 masked tokens: the encoder's MLM head alone, the kNN distribution over
the datastore, and their interpolation, with λ and τ chosen on dev and reported on test.

Usage: python bench/knn_lm.py --model PATH_OR_URI [--store DIR] [--limit 1000] [--k 1024]

Runs the ``evaluate`` flow's masked-token study (:mod:`npmcore.evaluation.masked`) on the
``wikitext2`` task (a fixed 15% of the words of WikiText-2's test articles, each masked alone
in an 81-word window; dev and test parts split by article), with the embedded default corpus
as the datastore, indexed by the model (the default index: OPQ + PQ codes):

1. dev part: every λ in ``--lam`` and τ in ``--tau``; the (λ, τ) of lowest knn-lm perplexity wins;
2. test part, at that (λ, τ): mlm, knn and knn-lm with the index's approximate search, and
   knn-lm again with exact (Flat) search over the same vectors.

The model needs a trained MLM head (``npmcore train --objective mlm`` or ``--mlm-weight``).
Every run is logged to MLflow (experiment npm-eval in the store). Last line: one JSON object
{"mlm_ppl", "knn_ppl", "knn_lm_ppl", "lambda", "tau", "mlm_acc", "knn_lm_acc", "exact_knn_lm_ppl"}.
"""

import argparse
import json
import tempfile

from npmcore.runtime import configure_environment

configure_environment()

from flows.evaluate import EvalParams, evaluate  # noqa: E402
from flows.prefect_api import prefect_api  # noqa: E402

LAMBDAS = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9]
TAUS = [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 20.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="encoder with a trained MLM head (path or models:/…)")
    parser.add_argument("--store", default=None, help="store for the corpus, index and MLflow runs (default: temp)")
    parser.add_argument("--limit", type=int, default=1000, help="masked positions per part (seeded sample)")
    parser.add_argument("--k", type=int, default=1024, help="datastore tokens retrieved per query")
    parser.add_argument("--lam", type=float, action="append", help=f"knn-lm weights to try (default {LAMBDAS})")
    parser.add_argument("--tau", type=float, action="append", help=f"temperatures to try (default {TAUS})")
    args = parser.parse_args()
    systems = ["mlm", "knn", "knn-lm"]
    with tempfile.TemporaryDirectory() as tmp, prefect_api():
        common = dict(
            tasks=["wikitext2"], store=args.store or tmp, model=args.model, limit=args.limit, k=args.k, systems=systems
        )
        dev = evaluate(EvalParams(**common, split="dev", lambdas=args.lam or LAMBDAS, taus=args.tau or TAUS))
        chosen = min((r for r in dev if r.system == "knn-lm"), key=lambda r: r.perplexity)
        print(f"dev: best knn-lm λ={chosen.lam:g} τ={chosen.tau:g} perplexity {chosen.perplexity:.2f}", flush=True)
        test = evaluate(EvalParams(**common, split="test", lambdas=[chosen.lam], taus=[chosen.tau], exact=True))
    row = {(r.system, r.factory == "Flat"): r for r in test}
    for r in test:
        print(f"test: {r.system} ({r.factory}) accuracy {r.score:.4f} perplexity {r.perplexity:.2f} (n={r.n})")
    print(
        json.dumps(
            {
                "mlm_ppl": round(row["mlm", False].perplexity, 3),
                "knn_ppl": round(row["knn", False].perplexity, 3),
                "knn_lm_ppl": round(row["knn-lm", False].perplexity, 3),
                "lambda": chosen.lam,
                "tau": chosen.tau,
                "mlm_acc": round(row["mlm", False].score, 4),
                "knn_lm_acc": round(row["knn-lm", False].score, 4),
                "exact_knn_lm_ppl": round(row["knn-lm", True].perplexity, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
