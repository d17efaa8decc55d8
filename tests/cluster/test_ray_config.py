"""ray_config.yaml passes Ray's own cluster-launcher preparation and schema validation."""

from __future__ import annotations

import copy

import pytest
import yaml

from cluster.ray_compat import prepare_config, validate_config
from tests.support.paths import ROOT

pytestmark = pytest.mark.cluster


CONFIG = ROOT / "ray_config.yaml"


def load() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def test_ray_config_is_a_valid_on_premises_cluster_config():
    raw = load()
    assert raw["provider"]["type"] == "local"
    prepared = prepare_config(copy.deepcopy(raw))  # what `ray up` does before validating
    validate_config(prepared)
    workers = prepared["available_node_types"]["local.cluster.node"]
    assert workers["min_workers"] == workers["max_workers"] == len(raw["provider"]["worker_ips"])


def test_ray_config_installs_the_project_and_declares_gpus_on_every_node():
    raw = load()
    assert any("pip install" in c and "-e" in c for c in raw["setup_commands"])
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = [c for c in raw[key] if "ray start" in c]
        assert start and all("--num-gpus" in c for c in start), key
    assert "--head" in " ".join(raw["head_start_ray_commands"])
    assert "$RAY_HEAD_IP" in " ".join(raw["worker_start_ray_commands"])


def test_validation_catches_a_broken_config():
    """The check has teeth: Ray's schema refuses an unknown top-level key."""
    broken = prepare_config(copy.deepcopy(load()))
    broken["gpus_per_worker"] = 1
    with pytest.raises(Exception, match="gpus_per_worker"):
        validate_config(broken)


TOKEN = "~/.ray/auth_token"


def token_auth_problems(raw: dict) -> list[str]:
    """What keeps a launcher config from starting every node with token authentication, the
    token copied to where Ray looks, kept out of the project and readable by its owner only."""
    problems = []
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in raw.get(key, []) if "ray start" in c]
        if not starts or not all("RAY_AUTH_MODE=token ray start" in c for c in starts):
            problems.append(f"{key}: ray start without RAY_AUTH_MODE=token")
    if raw.get("file_mounts", {}).get(TOKEN) != TOKEN:
        problems.append(f"file_mounts: {TOKEN} is not copied from {TOKEN}")
    if not any(f"chmod 600 {TOKEN}" in c for c in raw.get("setup_commands", [])):
        problems.append(f"setup_commands: {TOKEN} not made owner-only")
    if not any("RAY_AUTH_MODE=token" in c for c in raw.get("initialization_commands", [])):
        problems.append("initialization_commands: shells on the nodes are not token clients")
    return problems


def test_ray_config_starts_every_node_with_token_auth():
    raw = load()
    assert token_auth_problems(raw) == []
    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)  # the keys it uses are the launcher's
    # The token comes from the home directory, never from the project tree that `ray up` syncs.
    assert not (CONFIG.parent / ".ray").exists() and not list(CONFIG.parent.glob("*auth_token*"))


@pytest.mark.parametrize("breakage", ["head", "worker", "mount", "chmod", "shell"])
def test_the_token_check_catches_a_config_without_it(breakage):
    raw = load()
    if breakage in ("head", "worker"):
        key = f"{breakage}_start_ray_commands"
        raw[key] = [c.replace("RAY_AUTH_MODE=token ", "") for c in raw[key]]
    elif breakage == "mount":
        del raw["file_mounts"][TOKEN]
    elif breakage == "chmod":
        raw["setup_commands"] = [c for c in raw["setup_commands"] if "chmod" not in c]
    else:
        raw["initialization_commands"] = []
    assert len(token_auth_problems(raw)) == 1
