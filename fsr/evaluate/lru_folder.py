"""Least-recently-used pruning of a cache folder on disk (the compile cache, the contents cache):
the files of one kind, oldest modification time first, and the temp files a killed writer left."""

from __future__ import annotations

import contextlib
import os

Entry = tuple[float, int, str]  # mtime, size, path


def entries(folder: str, suffix: str, stale_temp_s: float, now: float) -> list[Entry]:
    """The files ending in `suffix` directly in `folder`; on the way, temp files (`.tmp`) older
    than `stale_temp_s` are removed. Raises OSError where the folder cannot be read."""
    out: list[Entry] = []
    with os.scandir(folder) as files:
        for f in files:
            try:
                st = f.stat(follow_symlinks=False)
                if f.name.endswith(".tmp") and now - st.st_mtime > stale_temp_s:
                    os.unlink(f.path)
                elif f.name.endswith(suffix):
                    out.append((st.st_mtime, st.st_size, f.path))
            except FileNotFoundError:
                continue  # another process pruned it
    return out


def remove_oldest(found: list[Entry], max_bytes: int, prune_to: float) -> None:
    """Where `found` holds more than `max_bytes`, remove its oldest files until it holds at most
    `prune_to` of that."""
    total = sum(size for _, size, _ in found)
    if total <= max_bytes:
        return
    for _, size, path in sorted(found):
        if total <= max_bytes * prune_to:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size
