"""Files: crash-safe writes (a file appears under its name whole or not at all), and the one
gate every file a user names is read through (regular, bounded, text), with one wording per fault."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write under a hidden temporary name, fsync, rename into place, fsync the directory."""
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power loss only once the directory is synced
    finally:
        os.close(fd)


# A file a user names (a config, a kernel, a problem file) is a few kilobytes; past this it is
# not one (a log, a data set, a device such as /dev/zero), and reading it whole would only grow.
MAX_INPUT_BYTES = 16 * 2**20
KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
         (stat.S_ISSOCK, "a socket"))


class InputFileError(ValueError):
    """A file the user named cannot be read as text: one line naming the file and why (`why`
    alone, for a message that names the file already)."""

    def __init__(self, label: str, why: str) -> None:
        super().__init__(f"{label}: {why}")
        self.why = why


def read_input(path: str | Path, what: str = "", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The text of a file the user named, read through the one gate every such file passes: a
    regular file (a FIFO would block the read, a device never end it) of at most `max_bytes`,
    decoded as UTF-8. Raises InputFileError "<what> <path>: <why>" (`what` names the option,
    e.g. "--parent"; "" for a positional file)."""
    label = f"{what} {path}" if what else str(path)
    problem = input_problem(path, max_bytes)
    if problem:
        raise InputFileError(label, problem)
    try:
        # O_NONBLOCK: a file swapped for a FIFO since the check above opens without waiting for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputFileError(label, _why(e)) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputFileError(label, _kind(os.fstat(fd).st_mode))
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(label, _too_large(max_bytes))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(label, "not a text file (not UTF-8)") from None


def input_problem(path: str | Path, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """Why `path` is no file fsr reads as input ("" if it may be one), from its metadata alone:
    missing, a folder, not a regular file, larger than `max_bytes`."""
    try:
        st = os.stat(path)
    except OSError as e:
        return _why(e)
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return _kind(st.st_mode)
    if st.st_size > max_bytes:
        return _too_large(max_bytes, st.st_size)
    return ""


def _kind(mode: int) -> str:
    kind = next((name for test, name in KINDS if test(mode)), "")
    return f"is {kind}, not a regular file" if kind else "not a regular file"


def _too_large(max_bytes: int, size: int | None = None) -> str:
    held = f" ({size} bytes)" if size is not None else ""
    return f"larger than {max_bytes // 2**20} MiB{held}, more than a file fsr reads as input"


def _why(e: OSError) -> str:
    """An OSError as the one wording every input file's message uses ("no such file", not
    "[Errno 2] No such file or directory: 'x'")."""
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(e, NotADirectoryError):
        return "no such file (a folder on its path is a file)"
    if isinstance(e, PermissionError):
        return "permission denied"
    return (e.strerror or str(e)).lower()
