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


@pytest.mark.parametrize(("value", "mode"), [(True, "end"), (False, "off"), ("end", "end"), ("leads", "leads"),
                                             ("off", "off")])
def test_certify_is_a_mode_and_a_bool_from_before_the_modes_still_reads(tmp_path, value, mode):
    path = tmp_path / "c.toml"
    toml = str(value).lower() if isinstance(value, bool) else f'"{value}"'
    path.write_text(f"[eval]\ncertify = {toml}\n")
    assert config.load(path).eval.certify == mode
    assert config.parse_text("eval", "certify", str(value).lower()) == mode
    assert config.EvalConfig(certify=value).certify == mode and config.EvalConfig(certify=value).certifies == (mode != "off")
    from fsr import certification

    assert certification.certifying({"config": {"eval": {"certify": value}}}) == (mode != "off")


def test_certify_defaults_to_end_and_refuses_other_words():
    assert config.Config().eval.certify == "end"  # a task's fastest certified when its budget is spent
    with pytest.raises(config.ConfigError, match='"off", "leads" or "end"'):
        config.from_dict({"eval": {"certify": "always"}})
    with pytest.raises(ValueError, match='"off", "leads" or "end"'):
        config.parse_text("eval", "certify", "yes")


def test_the_defaults_configuration_md_shows_are_the_defaults():
    """docs/configuration.md's block of defaults: each value it shows is the field's default, and
    each field of the sections it shows is there (the [llm] section is models.md's)."""
    import re
    import tomllib

    from tests.support.paths import ROOT

    text = (ROOT / "docs" / "configuration.md").read_text()
    (block,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    shown, defaults = tomllib.loads(block), config.to_dict(config.Config())
    assert set(shown) == {"eval", "tune", "search"}
    for section, values in shown.items():
        assert values == defaults[section], section

