"""`eval.comparator_flush`: the comparators' samples flushed as screening flushes (the default) or
as certification does, their inputs' eviction-priority hints set back first (docs/judge.md,
"Comparators"). No GPU: what the setting accepts and which regions it covers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fsr import config
from fsr.evaluate.gpu.comparators import input_regions


def array(ptr: int, nbytes: int) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), nbytes=nbytes)


def test_the_regions_are_every_input_of_every_set_once():
    x, w = array(4096, 1 << 20), array(1 << 30, 256)
    views = [{"x": x, "weight": w}, {"x": array(8192 << 20, 1 << 20), "weight": w}, {"empty": array(64, 0)}]
    assert input_regions(views) == [(4096, 1 << 20), (1 << 30, 256), (8192 << 20, 1 << 20)]


def test_the_setting_defaults_to_the_ordinary_flush_and_refuses_other_words():
    assert config.Config().eval.comparator_flush == "ordinary"
    assert config.from_dict({"eval": {"comparator_flush": "certification"}}).eval.comparator_flush == "certification"
    with pytest.raises(config.ConfigError, match='"ordinary" or "certification"'):
        config.from_dict({"eval": {"comparator_flush": "evicting"}})
