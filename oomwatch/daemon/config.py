"""`oomwatch run` settings: each one a flag, an `OOMWATCH_*` variable and a YAML key.

Precedence is flag > environment > config file > default, so a DaemonSet can ship a
ConfigMap and still override one value per node with an env var.  Every bad value is
reported with where it came from (`--metrics-address`, `OOMWATCH_METRICS_ADDRESS`, or the
file and key) so the operator knows what to fix.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "OOMWATCH_"
# Loopback: in the DaemonSet kube-rbac-proxy serves it to authorized scrapers.
DEFAULT_METRICS_ADDRESS = "127.0.0.1:9717"
DEFAULT_STATE_DIR = "/var/lib/oomwatch"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
DEFAULT_KMSG = "/dev/kmsg"
LOG_FORMATS = ("json", "console")


class ConfigError(Exception):
    """A setting could not be used; the message names the flag, variable or file key."""


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    node_name: str
    metrics_host: str
    metrics_port: int
    state_dir: Path
    cgroup_roots: tuple[str, ...]
    kmsg_path: str
    standalone: bool
    log_format: str
    probe_dir: Path | None
    annotate_pods: bool
    sample_interval_s: float
    timeline_window_s: float
    enrich_wait_s: float
    max_incidents: int
    max_age_days: float
    probe_allowed_uids: tuple[range, ...] | None = None  # None: any owner
    probe_pod_dirs: bool = False  # per-pod probe directories are enforced (admission policy)
    health_address: tuple[str, int] | None = None  # a /healthz-only port (the kubelet's probes)
    forecast_horizon_s: float = 300.0  # warn of kills predicted within this
    incident_retention_days: float = 14.0  # OOMIncident objects not seen since are deleted
    incident_objects_per_namespace: int = 50  # this node's OOMIncidents in one namespace
    incident_write_interval_s: float = 30.0  # one OOMIncident write per this, after a burst


@dataclass(frozen=True, slots=True)
class _Setting:
    key: str  # YAML key; the flag is --key-with-dashes, the env var OOMWATCH_KEY
    parse: Callable[[str], Any]
    default: Any
    help: str
    is_flag: bool = False
    repeatable: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper()


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be > 0, got {text!r}")
    return value


def _log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise ValueError(f"expected one of {', '.join(LOG_FORMATS)}, got {text!r}")
    return text


def parse_uid_ranges(text: str) -> tuple[range, ...] | None:
    """`any`, or uids and inclusive ranges: `1000,2000-2999` -> (range(1000, 1001), ...).

    `any` is the default because a uid list only stops pods that run as non-root without
    CAP_CHOWN (the runtime's default capabilities let a root pod give its file any owner), and
    many training images run as root.  The join's own check needs no setting: a kill is only
    joined to files owned by the victim's uid as the kernel printed it.  Where pods run under
    the `restricted` Pod Security Standard (non-root, all capabilities dropped), list the uids
    trainers run as, and no other pod can get a file read at all.
    """
    if text.strip().lower() == "any":
        return None
    ranges: list[range] = []
    for item in text.split(","):
        low, sep, high = item.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"expected any, or uids and ranges like 1000,2000-2999; got {text!r}")
        first, last = int(low), int(high) if sep else int(low)
        if not first <= last < 1 << 32:
            raise ValueError(f"uid range {item.strip()!r} is empty or out of range")
        ranges.append(range(first, last + 1))
    return tuple(ranges)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::]:9717`) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return host.strip("[]") or "0.0.0.0", port


SETTINGS: tuple[_Setting, ...] = (
    _Setting("node_name", str, None, "node name for Events and logs (default: hostname)"),
    _Setting(
        "metrics_address",
        parse_address,
        DEFAULT_METRICS_ADDRESS,
        "HOST:PORT of /metrics and /healthz (loopback by default: put an authenticating"
        " proxy in front, as the DaemonSet does)",
    ),
    _Setting(
        "health_address",
        parse_address,
        None,
        "HOST:PORT of a port serving only /healthz, for the kubelet's probes (default: none)",
    ),
    _Setting("state_dir", Path, DEFAULT_STATE_DIR, "where the SQLite incident store lives"),
    _Setting(
        "cgroup_root",
        str,
        (DEFAULT_CGROUP_ROOT,),
        "cgroup mount(s) to watch, e.g. /host/sys/fs/cgroup (repeatable)",
        repeatable=True,
    ),
    _Setting("kmsg", str, DEFAULT_KMSG, "kernel log device"),
    _Setting("standalone", _bool, False, "do not talk to Kubernetes", is_flag=True),
    _Setting("log_format", _log_format, "json", "json (one object a line) or console"),
    _Setting("probe_dir", Path, None, "directory of trainer probe flight records"),
    _Setting(
        "probe_allowed_uids",
        parse_uid_ranges,
        None,
        "owners whose probe files are read: any (default), or uids and ranges like "
        "1000,2000-2999 (files of others are refused); a kill is joined only to files "
        "owned by the uid the kernel printed for its victim either way",
    ),
    _Setting(
        "probe_pod_dirs",
        _bool,
        False,
        "trust a probe file's pod UID when it lies in <probe-dir>/<that UID>/: only where an"
        " admission policy makes each pod mount only its own (daemonset/README.md)",
        is_flag=True,
    ),
    _Setting("annotate_pods", _bool, False, "annotate pods with their last OOM", is_flag=True),
    _Setting("sample_interval_s", _positive_float, 1.0, "memory sampling interval"),
    _Setting("timeline_window_s", _positive_float, 600.0, "memory timeline kept per container"),
    _Setting(
        "forecast_horizon_s",
        _positive_float,
        300.0,
        "warn (MemoryLimitApproaching) when a container's kill is predicted within this",
    ),
    _Setting("enrich_wait_s", _positive_float, 5.0, "how long an incident may wait for enrichers"),
    _Setting("max_incidents", _positive_int, 10_000, "incidents kept in the store"),
    _Setting("max_age_days", _positive_float, 30.0, "days an incident is kept in the store"),
    _Setting(
        "incident_retention_days",
        _positive_float,
        14.0,
        "days an OOMIncident object not seen again is kept before its agent deletes it",
    ),
    _Setting(
        "incident_objects_per_namespace",
        _positive_int,
        50,
        "OOMIncident objects this node's agent keeps in one namespace (the least recent goes)",
    ),
    _Setting(
        "incident_write_interval_s",
        _positive_float,
        30.0,
        "seconds between this node's OOMIncident writes after a burst of 3 (kills in between"
        " add to the counts of the next write)",
    ),
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `--config` and one flag per setting (defaults applied later, by precedence)."""
    parser.add_argument("--config", metavar="FILE", help="YAML file of settings (same keys)")
    for s in SETTINGS:
        help_text = f"{s.help}{_default_text(s)} [env {s.env}]".replace("%", "%%")
        if s.is_flag:
            parser.add_argument(
                s.flag, dest=s.key, action="store_const", const=True, default=None, help=help_text
            )
        elif s.repeatable:
            parser.add_argument(s.flag, dest=s.key, action="append", default=None, help=help_text)
        else:
            parser.add_argument(s.flag, dest=s.key, default=None, help=help_text)


def _default_text(setting: _Setting) -> str:
    """` (default: X)` for `--help`, unless the help already says it or there is none."""
    default = setting.default
    if default is None or setting.is_flag or "default" in setting.help:
        return ""
    if isinstance(default, tuple):
        default = ",".join(map(str, default)) or "none"
    return f" (default: {default})"


def _load_file(path: str) -> dict[str, Any]:
    import yaml  # only here: the DaemonSet passes no --config, and PyYAML costs ~1.7 MiB RSS

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings")
    known = {s.key for s in SETTINGS}
    unknown = sorted(str(k) for k in data if str(k).replace("-", "_") not in known)
    if unknown:
        raise ConfigError(f"config file {path}: unknown key(s) {', '.join(unknown)}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _convert(setting: _Setting, raw: Any, where: str) -> Any:
    try:
        if setting.repeatable:
            items = raw if isinstance(raw, list | tuple) else str(raw).split(os.pathsep)
            values = tuple(setting.parse(str(item)) for item in items if str(item))
            if not values:
                raise ValueError("empty")
            return values
        if isinstance(raw, bool) and setting.parse is _bool:
            return raw
        return setting.parse(str(raw))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def resolve(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> DaemonConfig:
    """Apply flag > env > file > default to every setting."""
    environ = os.environ if environ is None else environ
    config_path = args.config or environ.get(ENV_PREFIX + "CONFIG")
    from_file = _load_file(config_path) if config_path else {}
    values: dict[str, Any] = {}
    for s in SETTINGS:
        flag_value = getattr(args, s.key, None)
        if flag_value is not None:
            values[s.key] = _convert(s, flag_value, s.flag)
        elif s.env in environ:
            values[s.key] = _convert(s, environ[s.env], s.env)
        elif s.key in from_file and from_file[s.key] is not None:
            values[s.key] = _convert(s, from_file[s.key], f"config file {config_path}: {s.key}")
        else:
            values[s.key] = s.default
    host, port = (
        values["metrics_address"]
        if isinstance(values["metrics_address"], tuple)
        else parse_address(values["metrics_address"])
    )
    return DaemonConfig(
        node_name=values["node_name"] or socket.gethostname(),
        metrics_host=host,
        metrics_port=port,
        state_dir=Path(values["state_dir"]),
        cgroup_roots=tuple(values["cgroup_root"]),
        kmsg_path=values["kmsg"],
        standalone=values["standalone"],
        log_format=values["log_format"],
        probe_dir=values["probe_dir"],
        annotate_pods=values["annotate_pods"],
        sample_interval_s=values["sample_interval_s"],
        timeline_window_s=values["timeline_window_s"],
        enrich_wait_s=values["enrich_wait_s"],
        max_incidents=values["max_incidents"],
        max_age_days=values["max_age_days"],
        probe_allowed_uids=values["probe_allowed_uids"],
        probe_pod_dirs=values["probe_pod_dirs"],
        health_address=values["health_address"],
        forecast_horizon_s=values["forecast_horizon_s"],
        incident_retention_days=values["incident_retention_days"],
        incident_objects_per_namespace=values["incident_objects_per_namespace"],
        incident_write_interval_s=values["incident_write_interval_s"],
    )
