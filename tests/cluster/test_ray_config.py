"""ray_config.yaml passes Ray's own cluster-launcher preparation and schema validation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from cluster.ray_compat import prepare_config, validate_config

pytestmark = pytest.mark.cluster

CONFIG = Path(__file__).resolve().parents[2] / "ray_config.yaml"


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
