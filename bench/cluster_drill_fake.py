"""`fsr run` with a fake evaluator (cluster.testing's) in every GPU worker, for rehearsing
bench/cluster_drill.sh on a machine without GPUs (`ray start --num-gpus=1` declares fake ones).

    python3 bench/cluster_drill_fake.py run softmax --address auto ...   (fsr's own arguments)

Everything but the evaluator is fsr's: the CLI, the search, the Ray executor, the lineage. Each
evaluation takes FAKE_EVAL_S seconds in the worker (default 1.5).
"""

from __future__ import annotations

import os
import sys

import cluster.executor
from cluster.testing import MarkedEvaluatorFactory
from fsr.cli import main


def fake_factory(*_args: object, **_kwargs: object) -> MarkedEvaluatorFactory:
    return MarkedEvaluatorFactory(latency_s=float(os.environ.get("FAKE_EVAL_S", "1.5")))


if __name__ == "__main__":
    cluster.executor.gpu_evaluator_factory = fake_factory  # type: ignore[assignment]
    sys.exit(main(sys.argv[1:]))
