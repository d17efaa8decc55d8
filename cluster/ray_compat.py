"""Every private API of Ray that fsr (and its tests) touch, in one place.

Checked against Ray 2.60.0 (the newest release pyproject.toml allows). Ray does not promise
these names between releases: on an upgrade, read this module against the new release first.
Each function degrades rather than breaks when a name moved, and says how in its docstring.

- ray._private.worker: `print_to_stdstream`, the printer of the errors Ray publishes to drivers
  (replaced to keep them out of the terminal).
- ray._private.services.canonicalize_bootstrap_address_or_die: what `address="auto"` means.
- ray._raylet.Config.initialize: re-reads RAY_AUTH_MODE after `import ray` (Ray caches it).
- ray._raylet.GcsClient: asks the head whether it accepts this client's token, in a child process
  (its C++ client writes warnings straight to file descriptor 2).
- ray._private.utils.publish_error_to_driver, ray.autoscaler._private.util.{prepare,validate}_config:
  tests only (tests/cluster/test_ray_output.py, test_ray_config.py).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

try:
    import ray._private.worker as ray_worker
except ImportError:  # a Ray without it: published errors stay Ray's
    ray_worker = None  # type: ignore[assignment]

# Tests only, imported on first use (the autoscaler is slow to import): publishing an error to
# every driver as Ray does for a lost node, and what `ray up` does to a cluster config.
_TEST_ONLY = {"publish_error_to_driver": "ray._private.utils",
              "prepare_config": "ray.autoscaler._private.util",
              "validate_config": "ray.autoscaler._private.util"}


def __getattr__(name: str) -> Any:
    if name in _TEST_ONLY:
        return getattr(importlib.import_module(_TEST_ONLY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

CHECKED_RAY_VERSIONS = ("2.60.0",)
AUTH_PROBE_TIMEOUT_S = 30.0

Printer = Callable[..., None]


def published_error_printer() -> Printer | None:
    """Ray's printer of published errors and worker output, or None if this Ray has none."""
    return getattr(ray_worker, "print_to_stdstream", None)


def set_published_error_printer(printer: Printer) -> bool:
    """Replace Ray's printer of published errors (read by its listener thread at each message);
    False, and nothing changed, if this Ray has no such printer."""
    if published_error_printer() is None:
        return False
    ray_worker.print_to_stdstream = printer
    return True


def canonical_address(address: str) -> str | None:
    """host:port of "auto" (the cluster last started here, or RAY_ADDRESS); None if this Ray
    lacks the function (ray.init then resolves it itself). Raises ConnectionError if none runs."""
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die
    except ImportError:
        return None
    return str(canonicalize_bootstrap_address_or_die(address))


def enable_token_auth() -> None:
    """Make this process a token-authenticated Ray client, as RAY_AUTH_MODE=token set before
    `import ray` would (Ray reads the mode once into its config; this reads it again)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config  # type: ignore[attr-defined]

    Config.initialize("")


# The probe runs in its own interpreter: Ray's C++ client writes its warnings to file
# descriptor 2, where they would reach the user's terminal, and its token cache is per process.
_PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1])
except AuthenticationError:
    print("refused")
except Exception as e:
    print("unknown", type(e).__name__)
else:
    print("accepted")
"""


def probe_token(gcs_address: str, env: Mapping[str, str]) -> str:
    """Whether the head at `gcs_address` (host:port) accepts a client with environment `env`:
    "accepted", "refused" (it requires a token and this one is missing or wrong), or "unknown"
    (any other failure, or a Ray whose client cannot say: left to ray.init)."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, gcs_address], env=dict(env), capture_output=True,
                             text=True, timeout=AUTH_PROBE_TIMEOUT_S).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out[0] if out and out[0] in ("accepted", "refused") else "unknown"

