"""`kubectl oomwatch`: the whole cluster in one command (a kubectl plugin: the executable
`kubectl-oomwatch` that installing oomwatch puts on PATH; krew manifest plugins/oomwatch.yaml).

    kubectl oomwatch report <pod> [-n NS] [--node N] [-- <oomwatch report flags>]
    kubectl oomwatch top [--since 7d] [--prometheus URL] [-n NS] [-o json] [--wide]

`report` runs the post-mortem in the agent on the pod's node (oomwatch.fleet.agents); `top`
answers "what died of memory, where and why" for the cluster from the agents' Events and, when
given, Prometheus (oomwatch.fleet.top).  The cluster is reached through kubectl itself
(oomwatch.fleet.kubectl); kubectl hands a plugin no global flags: give `--kubeconfig`/
`--context` after `oomwatch` (KUBECONFIG works as for kubectl, KUBECTL names the binary).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from oomwatch.fleet import agents
from oomwatch.fleet.events import FIELD_SELECTOR, Sighting, parse_event
from oomwatch.fleet.kubectl import Kubectl, KubectlError
from oomwatch.fleet.prom import PrometheusError, bucket_ends, kill_series, step_s
from oomwatch.fleet.top import build, render

PAGE = 500  # Events per request (kubectl --chunk-size)
_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """`7d`, `36h`, `90m`, `2w` -> seconds."""
    match = _SINCE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 7d, 36h or 90m, got {text!r}")
    return float(match[1]) * _UNIT_S[match[2]]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl oomwatch", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = sub.add_parser("report", help="the post-mortem of a pod, from the agent on its node")
    report.add_argument("pod", help="pod name (or namespace/name)")
    report.add_argument("-n", "--namespace", help="the pod's namespace (default: the context's)")
    report.add_argument("--node", help="skip the lookup: the node the pod ran on")
    report.add_argument("--agent-namespace", default=agents.AGENT_NAMESPACE)
    report.add_argument("--agent-selector", default=agents.AGENT_SELECTOR)
    report.add_argument("--agent-container", default=agents.AGENT_CONTAINER)
    report.add_argument("--store", default=agents.STORE, help="the agent's state dir")
    report.add_argument("report_args", nargs="*", help="after --: flags for oomwatch report")
    top = sub.add_parser("top", help="what died of memory in the cluster, where and why")
    top.add_argument("--since", type=parse_since, default=parse_since("7d"),
                     help="window, e.g. 7d, 36h, 90m (default 7d)")  # fmt: skip
    top.add_argument("--prometheus", default=os.environ.get("OOMWATCH_PROMETHEUS_URL"),
                     help="Prometheus URL for counts over the whole window (default"
                          " $OOMWATCH_PROMETHEUS_URL); without it, what Events remain")  # fmt: skip
    top.add_argument("--prometheus-token-file", type=Path, help="bearer token for Prometheus")
    top.add_argument("-n", "--namespace", help="one namespace (default: all)")
    top.add_argument("-o", "--output", choices=("text", "json"), default="text")
    top.add_argument("--wide", action="store_true", help="recommendations in full")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    kubectl = Kubectl(args.kubeconfig, args.context, chunk_size=PAGE)
    try:
        if args.command == "report":
            return _report(args, kubectl)
        return _top(args, kubectl)
    except agents.NotFound as exc:
        print(f"kubectl-oomwatch: {exc}", file=sys.stderr)
        return 1
    except KubectlError as exc:
        print(f"kubectl-oomwatch: {exc}", file=sys.stderr)
        return 2
    except PrometheusError as exc:
        print(f"kubectl-oomwatch: Prometheus: {exc}", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace, kubectl: Kubectl) -> int:
    namespace, _, pod = args.pod.rpartition("/")
    namespace = namespace or args.namespace or kubectl.namespace()
    node = args.node or agents.node_of(kubectl, namespace, pod)
    agent = agents.agent_on(kubectl, node, args.agent_namespace, args.agent_selector)
    print(f"# {namespace}/{pod}: node {node}, agent {agent.namespace}/{agent.pod}",
          file=sys.stderr, flush=True)  # fmt: skip
    return kubectl.run(agents.exec_args(agent, args.agent_container, args.store,
                                        f"{namespace}/{pod}", args.report_args))  # fmt: skip


def sightings(kubectl: Kubectl, namespace: str | None) -> list[Sighting]:
    """Every oomwatch Event the API server holds (kubectl pages), parsed."""
    scope = ["-n", namespace] if namespace else ["-A"]
    data = kubectl.get("events", *scope, "--field-selector", FIELD_SELECTOR) or {}
    return [s for item in data.get("items", []) if (s := parse_event(item)) is not None]


def _top(args: argparse.Namespace, kubectl: Kubectl) -> int:
    until_s = time.time()
    since_s = until_s - args.since
    seen = sightings(kubectl, args.namespace)
    token = args.prometheus_token_file.read_text().strip() if args.prometheus_token_file else None
    if args.prometheus:
        series, ends, step = kill_series(args.prometheus, since_s, until_s, token=token)
        if args.namespace:
            series = [s for s in series if s.labels["namespace"] == args.namespace]
    else:
        step = step_s(args.since)
        ends, series = bucket_ends(since_s, until_s, step), None
    rows = build(seen, series, ends, step)
    oldest = min((s.first_s for s in seen), default=None)
    if args.output == "json":
        json.dump({"since": _iso(since_s), "until": _iso(until_s), "bucket_seconds": step,
                   "prometheus": bool(args.prometheus), "events": len(seen),
                   "oldest_event": _iso(oldest) if oldest else None,
                   "rows": [r.to_dict() for r in rows]}, sys.stdout, indent=1)  # fmt: skip
        print()
        return 0
    kills = sum(r.kills for r in rows)
    nodes = {n for r in rows for n in r.nodes}
    workloads = sum(1 for r in rows if r.kills)
    header = (f"OOM kills since {_iso(since_s)[:16]}Z: {kills} in {workloads} workload(s) on"
              f" {len(nodes)} node(s)")  # fmt: skip
    notes = (
        [f"counts: Prometheus ({args.prometheus}), per {_span(step)}"]
        if args.prometheus
        else [
            "counts: Events only (the API server keeps them for --event-ttl, 1h by default;"
            f" the oldest here is from {_iso(oldest)[:16] + 'Z' if oldest else '-'}): give"
            " --prometheus for the whole window"
        ]
    )
    notes.append(f"why: {len(seen)} oomwatch Event(s), findings and advice from their summaries")
    print(render(rows, header, notes, wide=args.wide), end="")
    return 0


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _span(step: int) -> str:
    return {3600: "hour", 6 * 3600: "6 hours", 86400: "day"}.get(step, f"{step // 86400} days")


if __name__ == "__main__":
    raise SystemExit(main())
