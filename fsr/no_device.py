"""Why CUDA could not start, in fsr's words.

The CUDA runtime reports a machine without an NVIDIA driver as "CUDA driver version is
insufficient for CUDA runtime version", which sends a user to upgrade a driver they do not have.
`explain` tells apart no driver, no visible device and a driver that really is too old, using
the driver version CUDA reports (0: no driver loaded). Called in the GPU child, after CUDA failed
to start; nothing here starts CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Callable

NO_DRIVER = "cudaErrorInsufficientDriver"
NO_DEVICE = ("cudaErrorNoDevice", "no CUDA device visible")


def explain(error: BaseException, driver_version: Callable[[], int] | None = None,
            runtime_version: Callable[[], int] | None = None) -> str:
    """One line saying why there is no usable CUDA device; the error as it came for anything
    else. `driver_version`, `runtime_version`: CUDA's, as ints like 13000 (default: CuPy's)."""
    text = f"{type(error).__name__}: {error}"
    if not (NO_DRIVER in text or any(n in text for n in NO_DEVICE)):
        return text
    driver = _version(driver_version or _cupy("driverGetVersion"))
    if driver == 0:
        return "no NVIDIA driver on this machine"
    if any(n in text for n in NO_DEVICE):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"no CUDA device is visible{hidden}"
    runtime = _version(runtime_version or _cupy("runtimeGetVersion"))
    return (f"the NVIDIA driver supports CUDA {_label(driver)}, older than the CUDA {_label(runtime)} "
            "runtime fsr uses: a newer driver is needed")


def _cupy(name: str) -> Callable[[], int]:
    def call() -> int:
        import cupy

        return int(getattr(cupy.cuda.runtime, name)())

    return call


def _version(read: Callable[[], int]) -> int | None:
    try:
        return read()
    except Exception:  # the version is only for the message; an unknown one is None
        return None


def _label(version: int | None) -> str:
    return "?" if version is None else f"{version // 1000}.{version % 1000 // 10}"
