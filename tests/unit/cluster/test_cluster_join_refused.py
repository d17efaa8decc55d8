"""Joining a token-protected cluster with no token at hand: whatever stage Ray refuses at, the user
gets fsr's one line (no token found here, where it is looked for, how to mend it), not Ray's raw
AuthenticationError. Ray's connect is stood in for: no cluster is started."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


class AuthenticationError(Exception):
    """Named as Ray's own: the exception `ray.init` raised when the head wants a token."""


def test_a_refusal_that_ray_init_raises_is_fsrs_one_line(monkeypatch, tmp_path):
    from cluster import auth, start

    for name in (auth.TOKEN_ENV, auth.TOKEN_PATH_ENV, auth.MODE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token here
    monkeypatch.setattr(start, "_probe", lambda address, target: None)
    monkeypatch.setattr(auth, "prepare_client", lambda address, gcs: None)  # the probe could not tell

    def refuse(**_: object) -> None:
        raise AuthenticationError("Token authentication is enabled but no authentication token was found. "
                                  "Please set RAY_AUTH_TOKEN ...")

    monkeypatch.setattr(start.ray, "init", lambda address, **options: refuse())
    with pytest.raises(start.ClusterError) as e:
        start._join("10.1.2.3:6379", None, {}, ship_code=False)
    line = str(e.value)
    assert line.startswith("the Ray cluster at 10.1.2.3:6379 requires its auth token and none was found here")
    assert "\n" not in line and "Please set" not in line


def test_another_failure_to_join_keeps_its_own_words(monkeypatch):
    from cluster import auth, start

    monkeypatch.setattr(start, "_probe", lambda address, target: None)
    monkeypatch.setattr(auth, "prepare_client", lambda address, gcs: None)

    def fail(**_: object) -> None:
        raise ConnectionError("the head went away")

    monkeypatch.setattr(start.ray, "init", lambda address, **options: fail())
    with pytest.raises(start.ClusterError, match="could not join the Ray cluster at '10.1.2.3:6379': "
                                                  ".*the head went away"):
        start._join("10.1.2.3:6379", None, {}, ship_code=False)
