"""`oomwatch run` settings: flag > OOMWATCH_* env > YAML file > default, errors name the source."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from oomwatch.daemon.config import ConfigError, configure, resolve


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def test_defaults() -> None:
    cfg = resolve(parse(), environ={})
    assert (cfg.metrics_host, cfg.metrics_port) == ("127.0.0.1", 9717)
    assert cfg.health_address is None
    assert cfg.state_dir == Path("/var/lib/oomwatch")
    assert cfg.cgroup_roots == ("/sys/fs/cgroup",)
    assert cfg.kmsg_path == "/dev/kmsg" and cfg.log_format == "json"
    assert not cfg.standalone and cfg.node_name


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    conf = tmp_path / "oomwatch.yaml"
    conf.write_text(
        "node_name: from-file\nstate_dir: /file/state\nlog_format: console\n"
        "metrics_address: 127.0.0.1:1000\ncgroup_root: [/a, /b]\nstandalone: true\n"
    )
    env = {"OOMWATCH_STATE_DIR": "/env/state", "OOMWATCH_METRICS_ADDRESS": "127.0.0.1:2000"}
    cfg = resolve(parse("--config", str(conf), "--metrics-address", "[::1]:3000"), environ=env)
    assert cfg.node_name == "from-file"
    assert cfg.state_dir == Path("/env/state")
    assert (cfg.metrics_host, cfg.metrics_port) == ("::1", 3000)
    assert cfg.log_format == "console" and cfg.standalone
    assert cfg.cgroup_roots == ("/a", "/b")


def test_env_config_file_and_repeatable_roots(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("kmsg: /run/oomwatch/kmsg.fifo\n")
    env = {
        "OOMWATCH_CONFIG": str(conf),
        "OOMWATCH_CGROUP_ROOT": "/x:/y",
        "OOMWATCH_STANDALONE": "1",
    }
    cfg = resolve(parse("--cgroup-root", "/flag1", "--cgroup-root", "/flag2"), environ=env)
    assert cfg.kmsg_path == "/run/oomwatch/kmsg.fifo"
    assert cfg.cgroup_roots == ("/flag1", "/flag2") and cfg.standalone
    assert resolve(parse(), environ=env).cgroup_roots == ("/x", "/y")


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (("--metrics-address", "nonsense"), {}, "--metrics-address"),
        ((), {"OOMWATCH_LOG_FORMAT": "xml"}, "OOMWATCH_LOG_FORMAT"),
        ((), {"OOMWATCH_STANDALONE": "maybe"}, "OOMWATCH_STANDALONE"),
        (("--sample-interval-s", "0"), {}, "--sample-interval-s"),
    ],
)
def test_bad_values_name_their_source(
    argv: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        resolve(parse(*argv), environ=env)


def test_bad_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("state_dir: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        resolve(parse("--config", str(bad)), environ={})
    bad.write_text("no_such_key: 1\n")
    with pytest.raises(ConfigError, match="no_such_key"):
        resolve(parse("--config", str(bad)), environ={})
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        resolve(parse("--config", str(tmp_path / "missing.yaml")), environ={})


def test_oomwatch_run_exits_2_naming_the_bad_setting(capsys: pytest.CaptureFixture[str]) -> None:
    from oomwatch.cli import main

    assert main(["run", "--metrics-address", "nowhere"]) == 2
    assert "--metrics-address" in capsys.readouterr().err


def test_a_config_file_without_pyyaml_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """PyYAML is imported only to read a file, but `run` looks for every agent library
    before it starts: missing, it says what to install instead of failing later."""
    from oomwatch.cli import main

    conf = tmp_path / "oomwatch.yaml"
    conf.write_text("standalone: true\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ModuleNotFoundError
    assert main(["run", "--config", str(conf)]) == 2
    assert "(yaml is missing): pip install 'oomwatch[agent]'" in capsys.readouterr().err
