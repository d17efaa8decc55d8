"""The disk cache of screening's benchmark sets, without a GPU: a set is built once and read after
(bit for bit), across threads and processes that need it at once; a key changes with what decides
the bytes; a damaged file is built again; the folder is pruned past its limit; "off" is none."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fsr.evaluate.gpu import contents_cache
from fsr.evaluate.gpu.verify import Expected


def content(seed: int, n: int = 1000) -> contents_cache.Content:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    value = (x.astype(np.float64) * 2).astype(np.float32)
    return {"x": x, "idx": np.arange(n, dtype=np.int32)}, {"y": Expected(value, np.abs(value) * 1e-5)}


def same(a: contents_cache.Content, b: contents_cache.Content) -> bool:
    return (a[0].keys() == b[0].keys() and all(np.array_equal(a[0][k], b[0][k]) and a[0][k].dtype == b[0][k].dtype
                                               for k in a[0])
            and a[1].keys() == b[1].keys()
            and all(np.array_equal(a[1][k].value, b[1][k].value) and np.array_equal(a[1][k].bound, b[1][k].bound)
                    for k in a[1]))


def test_a_set_is_built_once_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    cache = contents_cache.open_cache(str(tmp_path), 1 << 30)
    assert cache is not None
    builds: list[int] = []

    def build() -> contents_cache.Content:
        builds.append(1)
        return content(1)

    name = contents_cache.key(("task", 1))
    first = contents_cache.get(cache, name, build)
    again = contents_cache.get(cache, name, build)
    assert len(builds) == 1 and cache.hits == 1 and cache.builds == 1
    assert same(first, again) and same(again, content(1))
    assert [p.suffix for p in tmp_path.glob("*.npz")] == [".npz"]


def test_the_key_changes_with_what_decides_the_bytes() -> None:
    keys = {contents_cache.key(parts) for parts in [("h1", 0, (0,)), ("h2", 0, (0,)), ("h1", 1, (0,)),
                                                     ("h1", 0, (1,))]}
    assert len(keys) == 4
    assert contents_cache.key(("h1", 0, (0,))) == contents_cache.key(("h1", 0, (0,)))


def test_threads_that_need_one_set_at_once_build_it_once(tmp_path: Path) -> None:
    cache = contents_cache.open_cache(str(tmp_path), 1 << 30)
    builds: list[int] = []
    got: list[contents_cache.Content] = []

    def build() -> contents_cache.Content:
        builds.append(1)
        time.sleep(0.3)  # the others arrive while it builds, and wait on its lock
        return content(2)

    name = contents_cache.key(("task", 2))
    threads = [threading.Thread(target=lambda: got.append(contents_cache.get(cache, name, build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(got) == 4 and all(same(g, content(2)) for g in got)


def _in_a_process(root: str, name: str, marks: str) -> None:
    cache = contents_cache.open_cache(root, 1 << 30)

    def build() -> contents_cache.Content:
        Path(marks, str(os.getpid())).touch()
        time.sleep(0.5)
        return content(3)

    assert same(contents_cache.get(cache, name, build), content(3))


def test_processes_that_need_one_set_at_once_build_it_once(tmp_path: Path) -> None:
    root, marks = tmp_path / "cache", tmp_path / "marks"
    marks.mkdir()
    name = contents_cache.key(("task", 3))
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_in_a_process, args=(str(root), name, str(marks))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(list(marks.iterdir())) == 1


def test_a_damaged_file_is_built_again(tmp_path: Path) -> None:
    cache = contents_cache.open_cache(str(tmp_path), 1 << 30)
    name = contents_cache.key(("task", 4))
    contents_cache.get(cache, name, lambda: content(4))
    (tmp_path / f"{name}.npz").write_bytes(b"PK\x03\x04 not a whole archive")
    builds: list[int] = []
    got = contents_cache.get(cache, name, lambda: builds.append(1) or content(4))
    assert builds == [1] and same(got, content(4))
    assert same(contents_cache.get(cache, name, lambda: pytest.fail("built again")), content(4))


def test_the_least_recently_used_sets_go_past_the_limit(tmp_path: Path) -> None:
    one = sum(a.nbytes for a in content(0, 20000)[0].values()) + 2 * content(0, 20000)[1]["y"].value.nbytes
    cache = contents_cache.open_cache(str(tmp_path), int(one * 2.5))
    names = [contents_cache.key(("task", i)) for i in range(4)]
    for age, name in enumerate(names):
        contents_cache.get(cache, name, lambda: content(0, 20000))
        os.utime(tmp_path / f"{name}.npz", (1000 + age, 1000 + age))  # older first
    left = {p.stem for p in tmp_path.glob("*.npz")}
    assert names[0] not in left and names[-1] in left
    assert sum(p.stat().st_size for p in tmp_path.glob("*.npz")) <= one * 2.5


def test_off_is_none_and_none_builds_every_time(tmp_path: Path) -> None:
    assert contents_cache.open_cache("off", 1 << 30) is None
    assert contents_cache.open_cache(str(tmp_path), 0) is None
    builds: list[int] = []
    for _ in range(2):
        contents_cache.get(None, "k", lambda: builds.append(1) or content(5))
    assert builds == [1, 1]


def test_a_folder_that_cannot_be_made_builds_without_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    contents_cache.forget_warnings()
    assert contents_cache.open_cache(str(blocker / "sub"), 1 << 30) is None


def test_low_precision_floats_come_back_as_themselves(tmp_path: Path) -> None:
    """NumPy saves ml_dtypes' bfloat16 and float8 as raw bytes (dtype V2, V1): read back as such,
    a low-precision task's inputs would be judged as garbage."""
    from fsr import dtypes

    cache = contents_cache.open_cache(str(tmp_path), 1 << 30)
    x = np.linspace(-2, 2, 64).astype(dtypes.numpy_dtype("bfloat16"))
    f8 = np.linspace(-2, 2, 64).astype(dtypes.numpy_dtype("float8_e4m3fn"))
    built = ({"x": x, "w": f8}, {"y": Expected(x.astype(np.float32), np.ones(64, np.float32))})
    name = contents_cache.key(("bf16",))
    contents_cache.get(cache, name, lambda: built)
    inputs, expected = contents_cache.get(cache, name, lambda: pytest.fail("built again"))
    assert inputs["x"].dtype == dtypes.numpy_dtype("bfloat16") and inputs["w"].dtype == dtypes.numpy_dtype("float8_e4m3fn")
    assert np.array_equal(inputs["x"].astype(np.float32), x.astype(np.float32))
    assert np.array_equal(inputs["w"].astype(np.float32), f8.astype(np.float32))
    assert expected["y"].value.dtype == np.float32
