"""Every fleet.toml field is checked with its type and range before anything starts: a wrong
one is exit 2 naming the field, the [[check]] entry and the file (docs/exporter.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.exporter.config import (
    DEFAULT_TIMEOUT_S,
    MAX_TRIALS,
    load_config,
    parse_config,
)

GOOD = 'name = "gpu-a"\nbaseline = "anchor"\nurl = "http://10.0.0.5:8000"\n'

# (a line added to a valid [[check]] (TOML, as a user writes it), the field the error names)
BAD_CHECK_FIELDS = [
    ('every_s = nan', "every_s"),
    ('every_s = inf', "every_s"),
    ('every_s = -inf', "every_s"),
    ('every_s = -5', "every_s"),
    ('every_s = 0', "every_s"),
    ('every_s = 0.5', "every_s"),
    ('every_s = 1e12', "every_s"),
    ('every_s = "900"', "every_s"),
    ('every_s = true', "every_s"),
    ('trials = 1000000000', "trials"),
    (f'trials = {MAX_TRIALS + 1}', "trials"),
    ('trials = 0', "trials"),
    ('trials = -3', "trials"),
    ('trials = 2.5', "trials"),
    ('trials = "3"', "trials"),
    ('trials = true', "trials"),
    ('timeout_s = 0', "timeout_s"),
    ('timeout_s = -1', "timeout_s"),
    ('timeout_s = nan', "timeout_s"),
    ('timeout_s = inf', "timeout_s"),
    ('timeout_s = 1e9', "timeout_s"),
    ('timeout_s = "10m"', "timeout_s"),
    ('scrape_interval_s = 0', "scrape_interval_s"),
    ('scrape_interval_s = nan', "scrape_interval_s"),
    ('scrape_interval_s = 3600', "scrape_interval_s"),
    ('api_key_env = ["A", "B"]', "api_key_env"),
    ('api_key_env = 5', "api_key_env"),
    ('api_key_env = "sk-live key with spaces"', "api_key_env"),
    ('api_key_env = ""', "api_key_env"),
    ('model = 3', "model"),
    ('model = ""', "model"),
    ('model = ["a"]', "model"),
    ('proxy = "ftp://proxy:21"', "proxy"),
    ('proxy = "proxy:3128"', "proxy"),
    ('proxy = 3128', "proxy"),
    ('log = 1', "log"),
    ('log = ""', "log"),
    ('scrape = "no"', "scrape"),
    ('scrape = 0', "scrape"),
    ('fingerprint = "false"', "fingerprint"),
    ('labels = "team=infra"', "labels"),
    ('labels = { team = 5 }', "labels"),
    ('labels = { team = ["a"] }', "labels"),
    ('every = 900', "unknown key(s) every"),
    ('timeout = 5', "unknown key(s) timeout"),
]

BAD_REQUIRED = [
    ('name = "a"\nbaseline = "anchor"\nurl = "ftp://10.0.0.5/x"\n', "url"),
    ('name = "a"\nbaseline = "anchor"\nurl = "10.0.0.5:8000"\n', "url"),
    ('name = "a"\nbaseline = "anchor"\nurl = "http://:8000"\n', "url"),
    ('name = "a"\nbaseline = "anchor"\nurl = "http://h:99999"\n', "url"),
    ('name = "a"\nbaseline = "anchor"\nurl = "http://h:0"\n', "url"),
    ('name = "a"\nbaseline = "anchor"\nurl = 8000\n', "url"),
    ('name = 1\nbaseline = "anchor"\nurl = "http://h"\n', "name"),
    ('name = ""\nbaseline = "anchor"\nurl = "http://h"\n', "name"),
    ('name = "a\\nb"\nbaseline = "anchor"\nurl = "http://h"\n', "name"),
    ('name = "a"\nbaseline = ["x"]\nurl = "http://h"\n', "baseline"),
    ('name = "a"\nurl = "http://h"\n', "missing baseline"),
]


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "fleet.toml"
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.mark.parametrize("line, field", BAD_CHECK_FIELDS)
def test_every_invalid_check_field_is_exit_2_naming_field_entry_and_file(tmp_path, capsys,
                                                                        line, field):
    text = f"[[check]]\n{GOOD}\n[[check]]\n{GOOD.replace('gpu-a', 'gpu-b')}{line}\n"
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as e:
        load_config(path)
    msg = e.value.one_line()
    assert field in msg and path in msg and "[[check]] #2 ('gpu-b')" in msg, msg
    assert main(["exporter", "--config", path, "--once"]) == 2
    err = capsys.readouterr().err
    assert field in err and "fleet.toml" in err and "Traceback" not in err


@pytest.mark.parametrize("body, field", BAD_REQUIRED)
def test_invalid_name_baseline_and_url_are_exit_2(tmp_path, capsys, body, field):
    path = write(tmp_path, f"[[check]]\n{body}")
    with pytest.raises(UsageError) as e:
        load_config(path)
    msg = e.value.one_line()
    assert field in msg and path in msg and "[[check]] #1" in msg, msg
    assert main(["exporter", "--config", path, "--once"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("text, what", [
    ('[exporter]\nlisten = 9464\n', "listen"),
    ('[exporter]\nlisten = "127.0.0.1:70000"\n', "listen"),
    ('[exporter]\nstore = 5\n', "store"),
    ('[exporter]\nstore = ""\n', "store"),
    ('[exporter]\nport = 9464\n', "unknown key(s) in [exporter]: port"),
    ('[exporters]\nlisten = "127.0.0.1:1"\n', "unknown section(s) exporters"),
    ('exporter = 3\n', "[exporter] must be a table"),
    ('check = "x"\n', "no [[check]]"),
])
def test_invalid_exporter_section_is_exit_2(tmp_path, text, what):
    body = text if text.startswith("check") else f"{text}\n[[check]]\n{GOOD}"
    path = write(tmp_path, body)
    with pytest.raises(UsageError) as e:
        load_config(path)
    assert what in e.value.one_line() and path in e.value.one_line()


def test_a_key_pasted_into_api_key_env_is_never_echoed(tmp_path):
    secret = "sk-proj-CANARYzz91Qx"
    path = write(tmp_path, f'[[check]]\n{GOOD}api_key_env = "{secret}"\n')
    with pytest.raises(UsageError) as e:
        load_config(path)
    assert "api_key_env" in e.value.one_line() and secret not in e.value.one_line()
    path = write(tmp_path, f'[[check]]\n{GOOD}api_key_env = ["{secret}"]\n')
    with pytest.raises(UsageError) as e:
        load_config(path)
    assert "a list" in e.value.one_line() and secret not in e.value.one_line()


def test_defaults_and_valid_values_load():
    cfg = parse_config({"exporter": {"store": "/tmp/x.sqlite"}, "check": [
        {"name": "a", "baseline": "b", "url": "https://h:8443/", "every_s": 1, "trials": MAX_TRIALS,
         "timeout_s": 2.5, "api_key_env": "GPU_KEY", "proxy": "socks5h://p:1080",
         "labels": {"team": "x"}, "scrape": False},
        {"name": "c", "baseline": "b", "url": "http://h2"}]})
    a, c = cfg.checks
    assert (a.every_s, a.trials, a.timeout_s, a.scrape) == (1.0, MAX_TRIALS, 2.5, False)
    assert c.timeout_s == DEFAULT_TIMEOUT_S and c.trials == 3 and c.scrape is True
    assert cfg.store == "/tmp/x.sqlite"


@pytest.mark.parametrize("password", ["pa ss/wo#rd", "Cn4ry?x@y%zz", "s3cr3t/with space"])
def test_a_fleet_url_password_never_reaches_the_error(tmp_path, capsys, password):
    """A URL whose password holds reserved characters (unescaped, as users paste them) and whose
    port is not a number: the error names url, entry and file, and never the password."""
    from decodescope.redact import clear_registered_secrets

    url = f"http://ops:{password}@10.0.0.5:80x0"
    path = write(tmp_path, f'[[check]]\nname = "gpu-a"\nbaseline = "anchor"\nurl = "{url}"\n')
    try:
        assert main(["exporter", "--config", path, "--once"]) == 2
        err = capsys.readouterr().err
        assert "url" in err and "Traceback" not in err
        assert password not in err and password.split("/")[0] not in err, err
    finally:
        clear_registered_secrets()
