"""`oomwatch run`: the node agent (DaemonSet container, or any Linux host standalone)."""

from __future__ import annotations

import argparse
import sys

from oomwatch.daemon import config as daemon_config


def configure(parser: argparse.ArgumentParser) -> None:
    daemon_config.configure(parser)
    parser.epilog = (
        "Every flag is also an OOMWATCH_* environment variable and a key of the --config YAML "
        "file (e.g. --state-dir = OOMWATCH_STATE_DIR = state_dir); flag > env > file > default."
        "  Exit status: 0 after a clean stop (SIGTERM, SIGINT); 1 when the agent cannot start"
        " (a port is taken, the store cannot be opened); 2 for a bad setting (the message"
        " names it)."
    )


def main(args: argparse.Namespace) -> int:
    try:
        cfg = daemon_config.resolve(args)
    except daemon_config.ConfigError as exc:
        print(f"oomwatch run: {exc}", file=sys.stderr)
        return 2
    # Imported here so a bad flag is reported before the heavier imports.
    from oomwatch.daemon.agent import Agent
    from oomwatch.daemon.host import install_signal_handlers, raise_open_files_limit
    from oomwatch.daemon.interpreter import tune_interpreter
    from oomwatch.daemon.warm_up import warm_up
    from oomwatch.sinks.log import get_logger, setup_logging

    setup_logging(cfg.log_format)
    raise_open_files_limit()
    try:
        agent = Agent(cfg)
    except Exception as exc:
        get_logger().error("startup_failed", error=f"{type(exc).__name__}: {exc}")
        return 1
    install_signal_handlers(agent.stop)
    warm_up(agent.log)  # before `tune_interpreter`: its garbage is collected, not frozen
    tune_interpreter()  # process-wide, so here and not in the (also in-process) Agent
    return agent.run()
