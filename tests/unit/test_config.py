import pytest

from fsr import config


def test_defaults_file_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[eval]\ntimeout_s = 5.0\n[tune]\ntrials = 3\n")
    cfg = config.load(path, {"tune": {"trials": 7}})
    assert cfg.eval.timeout_s == 5.0 and cfg.tune.trials == 7 and cfg.search.islands == 4
    assert config.from_dict(config.to_dict(cfg)) == cfg


def test_unknown_keys_are_named(tmp_path):
    with pytest.raises(config.ConfigError, match="timeout"):
        config.from_dict({"eval": {"timeout": 1}})
    with pytest.raises(config.ConfigError, match="nope"):
        config.from_dict({"nope": {}})
    with pytest.raises(config.ConfigError):
        config.load(tmp_path / "missing.toml")
