"""Config values are checked by type and range; the message names section, field, value and
what is allowed."""

import dataclasses

import pytest

from fsr import config


@pytest.mark.parametrize(("section", "name", "value", "allowed"), [
    ("eval", "timeout_s", "abc", "a number > 0"),
    ("eval", "timeout_s", 0, "a number > 0"),
    ("search", "max_evaluations", -5, "an integer >= 1"),
    ("tune", "trials", 2.5, "an integer >= 0"),
    ("tune", "trials", True, "an integer >= 0"),
    ("llm", "temperature", 3, ">= 0 and <= 2"),
    ("llm", "base_url", "notaurl", "http:// or https:// URL"),
    ("llm", "base_url", "http://host:port/v1", "http:// or https:// URL"),
    ("llm", "send_seed", 1, "true or false"),
    ("llm", "model", 4, "a string"),
    ("eval", "arch", "90", "sm_90"),
    ("eval", "torch_compile", "max_autotune", "max-autotune"),
    ("eval", "warmup_s", float("nan"), "a number >= 0"),
    ("llm", "input_price_per_mtok", float("inf"), "a finite number"),
])
def test_a_bad_value_names_section_field_value_and_what_is_allowed(section, name, value, allowed):
    with pytest.raises(config.ConfigError) as err:
        config.from_dict({section: {name: value}})
    message = str(err.value)
    assert message.startswith(f"[{section}] {name} = ") and allowed in message, message


def test_a_config_file_error_names_the_file(tmp_path):
    path = tmp_path / "fsr.toml"
    path.write_text('[eval]\ntimeout_s = "abc"\n')
    with pytest.raises(config.ConfigError, match=r"fsr\.toml: \[eval\] timeout_s = \"abc\""):
        config.load(path)


@pytest.mark.parametrize("text", [b"[eval\n", b"\xff\xfe[eval]", b"eval = 3\n"])
def test_malformed_config_files_are_config_errors(tmp_path, text):
    path = tmp_path / "fsr.toml"
    path.write_bytes(text)
    with pytest.raises(config.ConfigError, match="fsr.toml"):
        config.load(path)


def test_a_directory_as_config_is_a_config_error(tmp_path):
    with pytest.raises(config.ConfigError, match="directory"):
        config.load(tmp_path)


def test_ranges_of_related_fields_are_checked_together():
    with pytest.raises(config.ConfigError, match="bench_min_samples = 300"):
        config.from_dict({"eval": {"bench_min_samples": 300, "bench_max_samples": 200}})
    with pytest.raises(config.ConfigError, match="elites = 5"):
        config.from_dict({"search": {"elites": 5, "population": 4}})
    assert config.from_dict({"search": {"elites": 4, "population": 4}}).search.elites == 4


def test_good_values_load_and_an_int_is_a_float_where_a_number_is_asked():
    cfg = config.from_dict({"eval": {"timeout_s": 5, "arch": "sm_90a", "torch_compile": "off"}, "llm": {"base_url": "http://localhost:8000/v1",
                                                                             "input_price_per_mtok": -1}})
    assert cfg.eval.timeout_s == 5.0 and isinstance(cfg.eval.timeout_s, float)
    assert cfg.llm.base_url == "http://localhost:8000/v1" and cfg.eval.arch == "sm_90a"


def test_every_default_passes_its_own_checks():
    """The ranges table agrees with the defaults (a new field's default must be allowed too)."""
    assert config.from_dict(config.to_dict(config.Config())) == config.Config()
    for f in dataclasses.fields(config.Config):
        assert config.from_dict({f.name: dataclasses.asdict(getattr(config.Config(), f.name))})


def test_command_line_text_is_converted_and_checked_by_the_field_type():
    assert config.parse_text("search", "max_evaluations", "7") == 7
    assert config.parse_text("eval", "timeout_s", "2") == 2.0
    for section, name, text in (("search", "max_evaluations", "-5"), ("search", "max_evaluations", "x"),
                                ("eval", "timeout_s", "nan"), ("llm", "base_url", "notaurl")):
        with pytest.raises(ValueError, match="expected"):
            config.parse_text(section, name, text)
