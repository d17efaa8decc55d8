"""The Ray-side test evaluators moved to cluster.testing (so bench/ need not import tests/); import them from there."""

from cluster.testing import *  # noqa: F403
