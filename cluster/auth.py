"""Who may use the cluster, and what the workers may not see.

Token authentication (Ray >= 2.52): a cluster started with RAY_AUTH_MODE=token runs nothing for
a client without its token. A client finds the token where Ray looks, highest first:
RAY_AUTH_TOKEN, the file named by RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token. `prepare_client`
makes fsr's driver such a client with no extra step when a token is there (Ray itself only
does so for address "auto"), asks the head whether it takes it, and turns a refusal into one
line that says what is missing.

Secrets: the embedded Ray's processes, and so every worker, inherit the environment of the
process that starts them. `secret_names` picks out the variables that must stay with the
driver (model API keys and the like) so that `cluster.start` can start Ray without them.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from cluster import ray_compat

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
# Names of variables that hold credentials. RAY_* ones are Ray's own (its token included) and
# must reach Ray's processes.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)


def default_token_path() -> Path:
    return Path.home() / ".ray" / "auth_token"


def token_source(env: Mapping[str, str]) -> str | None:
    """Where Ray will take this client's token from (for messages; never the token itself), or
    None if there is none."""
    if env.get(TOKEN_ENV):
        return TOKEN_ENV
    if env.get(TOKEN_PATH_ENV):
        return f"{TOKEN_PATH_ENV}={env[TOKEN_PATH_ENV]}"
    path = default_token_path()
    return str(path) if path.is_file() else None


def token_problem(env: Mapping[str, str]) -> str | None:
    """A token setting Ray would abort on (it does not fall back): an unreadable or empty
    RAY_AUTH_TOKEN_PATH file. None if there is none."""
    if env.get(TOKEN_ENV) or not env.get(TOKEN_PATH_ENV):
        return None
    path = Path(env[TOKEN_PATH_ENV]).expanduser()
    try:
        if path.read_text().strip():
            return None
    except OSError as e:
        return f"{TOKEN_PATH_ENV}={env[TOKEN_PATH_ENV]} cannot be read ({e.strerror})"
    return f"{TOKEN_PATH_ENV}={env[TOKEN_PATH_ENV]} is empty"


def prepare_client(address: str, gcs_address: str | None) -> str | None:
    """Make this process present the token Ray finds here (unless RAY_AUTH_MODE says otherwise)
    and ask the head at `gcs_address` (host:port; None for a ray:// address, which is not asked)
    whether it takes it. Returns None to go on, or the one line to stop with."""
    problem = token_problem(os.environ)
    if problem:
        return problem
    source = token_source(os.environ)
    mode = os.environ.get(MODE_ENV)
    if mode is None and source is not None:
        ray_compat.enable_token_auth()  # harmless against a cluster without auth
    if gcs_address is None or ray_compat.probe_token(gcs_address, os.environ) != "refused":
        return None
    return refusal(address, os.environ)


def is_refusal(error: BaseException) -> bool:
    """Whether Ray refused to connect for want of the cluster's auth token (what a probe that could
    not ask the head in advance leaves to `ray.init`)."""
    return type(error).__name__ == "AuthenticationError" or "authentication token" in str(error).lower()


def refusal(address: str, environ: Mapping[str, str]) -> str:
    """The one line for a cluster at `address` that refused this client: why, and how to mend it."""
    mode, source = environ.get(MODE_ENV), token_source(environ)
    where = f"the Ray cluster at {address}"
    fix = "copy the head node's ~/.ray/auth_token to ~/.ray/auth_token here (mode 0600)"
    if mode is not None and mode.lower() != "token":
        return f"{where} requires its auth token, but {MODE_ENV}={mode} here: unset it, and {fix}"
    if source is None:
        return (f"{where} requires its auth token and none was found here ({TOKEN_ENV}, {TOKEN_PATH_ENV} "
                f"or {default_token_path()}): {fix}")
    return f"{where} refused the auth token from {source}: it is not this cluster's token; {fix}"


def restrict_token_file() -> None:
    """Make ~/.ray/auth_token readable by its owner only: Ray (>= 2.59) writes one for an
    embedded instance with the umask's mode, often world-readable."""
    path = default_token_path()
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)


def secret_names(env: Mapping[str, str], also: Collection[str] = ()) -> list[str]:
    """The variables of `env` that hold credentials and stay with the driver: those named like
    one (…_API_KEY, …_TOKEN, …SECRET…, …PASSWORD…, …CREDENTIALS…) but not Ray's own, and `also`."""
    return sorted(n for n in env if (n in also or _SECRET.search(n)) and not n.startswith("RAY_"))


@contextlib.contextmanager
def env_without(names: Collection[str]) -> Iterator[None]:
    """Leave `names` out of os.environ for the duration (the processes started meanwhile never
    see them), then put them back."""
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)
