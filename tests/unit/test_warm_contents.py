"""The GPU test session's warm-up of its contents cache (tests/support/warm_contents.py), without a
GPU: the heavy tasks are those of many flops at the benchmark size; a set the warm-up builds is a
hit for a GPU child's later lookup (the same keys), dated ahead of the sets the cache prunes
first; it waits on a set another builder holds (the same locks); it starts only in the first
worker of an xdist session with a GPU and GPU tests that use the cache."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from fsr import tasks
from fsr.config import EvalConfig
from fsr.evaluate.gpu import contents_cache
from fsr.evaluate.gpu.inputs import screening_contents, screening_key, screening_seeds
from tests.support import warm_contents
from tests.support.gpu_evaluators import at_test_sizes
from tests.support.paths import ROOT

EVERY = [tasks.load(n) for n in tasks.list_tasks()]


def test_the_heavy_tasks_are_those_of_many_flops_at_the_benchmark_size():
    chosen = warm_contents.heavy(EVERY)
    names = [t.name for t in chosen]
    assert {"gemm_bf16", "gemm_bf16_gelu", "attention_bf16", "attention_bf16_causal"} <= set(names)
    assert "softmax" not in names and "scan" not in names  # large, but cheap references
    flops = [tasks.flops(t, dict(t.bench_size)) for t in chosen]
    assert flops == sorted(flops, reverse=True) and min(flops) >= warm_contents.HEAVY_FLOPS
    assert all(tasks.flops(t, dict(t.bench_size)) < warm_contents.HEAVY_FLOPS for t in EVERY if t.name not in names)
    # the same task held to its test sizes is light
    assert warm_contents.heavy([at_test_sizes(tasks.load("gemm_bf16"))]) == []


def small(name: str = "softmax") -> tasks.Task:
    return at_test_sizes(tasks.load(name))


def test_a_set_the_warm_up_builds_is_a_hit_for_a_gpu_childs_lookup(tmp_path: Path):
    task, cfg = small(), EvalConfig()
    outcome = warm_contents.warm(tmp_path, [task])
    assert outcome[task.name].endswith(" s"), outcome
    cache = contents_cache.open_cache(str(tmp_path), cfg.contents_cache_max_bytes)
    assert cache is not None
    screening_contents(task, cfg.seed, cfg.input_sets, cache)  # as Child._contents looks them up
    assert (cache.hits, cache.builds) == (max(cfg.input_sets, 2), 0)
    # dated ahead of every set written now, so the cache's oldest-first pruning takes them last
    for seed in screening_seeds(task, cfg.seed, cfg.input_sets):
        mtime = contents_cache.file_of(cache, screening_key(task, seed)).stat().st_mtime
        assert mtime > time.time() + warm_contents.PIN_S / 2
    # another seed is another set: built, not read
    other = contents_cache.open_cache(str(tmp_path), cfg.contents_cache_max_bytes)
    assert other is not None
    screening_contents(task, cfg.seed + 1, cfg.input_sets, other)
    assert (other.hits, other.builds) == (0, max(cfg.input_sets, 2))


def test_the_warm_up_waits_for_a_set_another_builder_holds(tmp_path: Path):
    task, cfg = small(), EvalConfig()
    first = screening_key(task, screening_seeds(task, cfg.seed, cfg.input_sets)[0])
    lock = os.open(tmp_path / f"{first}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # as a GPU child building that set holds it
    outcome: dict[str, str] = {}
    builder = threading.Thread(target=lambda: outcome.update(warm_contents.warm(tmp_path, [task])))
    builder.start()
    try:
        time.sleep(1.0)
        assert builder.is_alive() and not (tmp_path / f"{first}.npz").exists()
    finally:
        os.close(lock)  # releases it: the warm-up builds the set (its holder stored none)
    builder.join(60)
    assert not builder.is_alive() and (tmp_path / f"{first}.npz").exists(), outcome


def test_a_task_that_fails_to_build_is_logged_not_raised(tmp_path: Path):
    broken = replace(small("gelu"), bench_size=(("n", -1),))  # its inputs cannot be drawn
    outcome = warm_contents.warm(tmp_path, [broken, small()])
    assert outcome["gelu"].startswith("failed:") and outcome["softmax"].endswith(" s"), outcome


def item(gpu: bool = True, skipped: bool = False, fixtures: tuple[str, ...] = ("contents_dir",)):
    marks = {"gpu": gpu, "skip": skipped}
    return SimpleNamespace(get_closest_marker=lambda name: object() if marks.get(name) else None,
                           fixturenames=fixtures)


@pytest.mark.parametrize("items,worker,workers,devices,expected", [
    ([item()], "gw0", 6, 1, True),
    ([item(gpu=False), item()], "gw0", 2, 4, True),
    ([item()], "gw1", 6, 1, False),  # another worker: one warm-up a session
    ([item()], None, 1, 1, False),  # no xdist: a GPU child builds on every core
    ([item()], "gw0", 6, 0, False),  # no GPU (CI)
    ([item(skipped=True)], "gw0", 6, 1, False),  # GPU tests skipped
    ([item(gpu=False)], "gw0", 6, 1, False),  # no GPU test selected
    ([item(fixtures=("bench_evaluator_free",))], "gw0", 6, 1, False),  # none uses the contents cache
])
def test_the_warm_up_starts_only_where_gpu_tests_use_the_cache_under_xdist(items, worker, workers, devices,
                                                                          expected):
    assert warm_contents.wanted(items, worker, workers, devices) is expected


def test_without_a_heavy_task_nothing_starts(tmp_path: Path):
    assert warm_contents.start(tmp_path, ["softmax", "scan"]) is None
    assert list(tmp_path.iterdir()) == []


def test_bench_gpu_check_brings_the_log_back_by_the_variable_the_warm_up_reads():
    assert f'"{warm_contents.LOG_ENV}"' in (ROOT / "bench" / "gpu_check.py").read_text()


def test_each_set_gets_its_share_of_most_of_the_cores():
    assert warm_contents.blas_threads(15, cores=16) == 1
    assert warm_contents.blas_threads(15, cores=64) == 3
    assert warm_contents.blas_threads(3, cores=16) == 4


def test_the_session_folder_is_gpu_checks_where_it_gives_one_else_beside_the_workers(tmp_path: Path):
    base = tmp_path / "popen-gw0"
    base.mkdir()
    assert warm_contents.session_folder(base, {"PYTEST_XDIST_WORKER": "gw0"}) == tmp_path / "fsr-contents"
    assert warm_contents.session_folder(base, {}) == base / "fsr-contents"
    given = tmp_path / "shared" / "contents"
    got = warm_contents.session_folder(base, {warm_contents.FOLDER_ENV: str(given), "PYTEST_XDIST_WORKER": "gw3"})
    assert got == given and given.is_dir()
