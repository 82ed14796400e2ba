"""`kubectl oomwatch`: the whole cluster in one command (a kubectl plugin: the executable
`kubectl-oomwatch` that installing oomwatch puts on PATH; krew manifest plugins/oomwatch.yaml).

    kubectl oomwatch report pod/NAME|NAME|node/NAME|deploy/NAME [-n NS] [-A]
                            [-o text|json|yaml|wide] [--html FILE] [--details]
    kubectl oomwatch top [--since 7d] [--prometheus URL [--prometheus-job JOB]] [-n NS|-A]
                         [-o json] [--wide]

`report` prints the post-mortem from the `OOMIncident` objects the agents write into the
namespace (oomwatch.fleet.report): viewing the namespace is the only grant it needs, and it
never execs; `top` answers "what died of memory, where and why" for the cluster from the
`OOMIncident`s agents wrote, their Events and, when given, Prometheus (oomwatch.fleet.top).
Everything printed from the cluster is escaped.  The cluster is reached through kubectl
itself (oomwatch.fleet.kubectl); kubectl hands a plugin no global flags: give
`--kubeconfig`/`--context` after `oomwatch` or after the command (KUBECONFIG works as for
kubectl, KUBECTL names the binary).  `-n`, `-A` and `-o` may come before the command too, as
kubectl users type them (`kubectl oomwatch -n shop report pod/x`).
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

from oomwatch.fleet import report as fleet_report
from oomwatch.fleet.events import FIELD_SELECTOR, Sighting, parse_event, parse_oomincident
from oomwatch.fleet.kubectl import Kubectl, KubectlError
from oomwatch.fleet.prom import PrometheusError, bucket_ends, kill_series, step_s
from oomwatch.fleet.top import build, render

PAGE = 500  # Events per request (kubectl --chunk-size)
_SINCE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
COMMANDS = ("report", "top")
# The commands' flags a kubectl user may also type before the command: moved after it, so
# each command checks them as its own (`top` takes no `-o yaml`).
_HOISTED_VALUED = ("-n", "--namespace", "-o", "--output")
_HOISTED = ("-A", "--all-namespaces")
_GLOBAL_VALUED = ("--kubeconfig", "--context")  # the top-level parser's own


def hoist_flags(argv: Sequence[str]) -> list[str]:
    """`argv` with the `-n`/`-A`/`-o` flags before the command moved to just after it."""
    args = list(argv)
    moved: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in COMMANDS or arg == "--":
            break
        name = arg.partition("=")[0]
        if arg in _HOISTED_VALUED and index + 1 < len(args):
            moved += args[index : index + 2]
            del args[index : index + 2]
        elif arg in _HOISTED or (name in _HOISTED_VALUED and "=" in arg):
            moved.append(args.pop(index))
        elif arg[:2] in ("-n", "-o") and len(arg) > 2 and not arg.startswith("--"):
            moved.append(args.pop(index))  # -nshop, -ojson
        elif arg in _GLOBAL_VALUED:
            index += 2
        else:
            index += 1
    if index >= len(args) or args[index] not in COMMANDS:
        return list(argv)  # no command: argparse says what is missing, as typed
    return args[: index + 1] + moved + args[index + 1 :]


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
    report = sub.add_parser(
        "report",
        help="the post-mortem of a pod, workload or node, from"
        " the OOMIncident objects of its namespace",
    )
    report.add_argument(
        "target",
        metavar="TYPE/NAME",
        help="pod/NAME, NAME (a pod), node/NAME, deploy/NAME, statefulset/NAME",
    )
    report.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    report.add_argument("-A", "--all-namespaces", action="store_true")
    report.add_argument("-o", "--output", choices=("text", "json", "yaml", "wide"), default="text")
    report.add_argument("--html", metavar="FILE", help="also write the HTML page here")
    report.add_argument("--details", action="store_true", help="every incident in full")
    top = sub.add_parser("top", help="what died of memory in the cluster, where and why")
    top.add_argument(
        "--since",
        type=parse_since,
        default=parse_since("7d"),
        help="window, e.g. 7d, 36h, 90m (default 7d)",
    )
    top.add_argument(
        "--prometheus",
        default=os.environ.get("OOMWATCH_PROMETHEUS_URL"),
        help="Prometheus URL for counts over the whole window (default"
        " $OOMWATCH_PROMETHEUS_URL); without it, what Events remain",
    )
    top.add_argument("--prometheus-token-file", type=Path, help="bearer token for Prometheus")
    top.add_argument("--prometheus-job", help="only series of this scrape job (the agents')")
    top.add_argument("-n", "--namespace", help="one namespace (default: all)")
    top.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (the default without -n)",
    )
    top.add_argument("-o", "--output", choices=("text", "json"), default="text")
    top.add_argument("--wide", action="store_true", help="recommendations in full")
    for command in (report, top):  # kubectl's global flags, after the command too
        command.add_argument("--kubeconfig", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_argument("--context", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(hoist_flags(sys.argv[1:] if argv is None else argv))
    kubectl = Kubectl(args.kubeconfig, args.context, chunk_size=PAGE)
    try:
        if args.command == "report":
            return _report(args, kubectl)
        return _top(args, kubectl)
    except fleet_report.BadTarget as exc:
        print(f"kubectl-oomwatch: {exc}", file=sys.stderr)
        return 2
    except KubectlError as exc:
        print(f"kubectl-oomwatch: {exc}", file=sys.stderr)
        return 2
    except PrometheusError as exc:
        print(f"kubectl-oomwatch: Prometheus: {exc}", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace, kubectl: Kubectl) -> int:
    target = fleet_report.parse_target(args.target)
    if target.kind == "node" or args.all_namespaces:
        scope = ["-A"]
        where = "all namespaces"
    else:
        namespace = args.namespace or kubectl.namespace()
        scope, where = ["-n", namespace], f"namespace {namespace}"
    reply = kubectl.get(fleet_report.RESOURCE, *scope) or {}
    objects = fleet_report.select(reply.get("items") or [], target)
    if args.output == "json":
        json.dump({"kind": "List", "apiVersion": "v1", "items": objects}, sys.stdout, indent=1)
        print()
        return 0 if objects else 1
    if args.output == "yaml":
        sys.stdout.write(
            fleet_report.to_yaml({"kind": "List", "apiVersion": "v1", "items": objects})
        )
        return 0 if objects else 1
    if args.output == "wide":
        sys.stdout.write(fleet_report.wide_table(objects))
        return 0 if objects else 1
    incidents, lines = fleet_report.incidents_of(objects)
    source = f"the OOMIncidents of {target.words()} in {where}"
    notice = lines or [f"No OOMIncident about {target.words()} in {where}."]
    if args.html:
        from oomwatch.report import page

        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(page.render(incidents, [], source, notice=notice, details=args.details))
    from oomwatch.report import text

    sys.stdout.write(text.render(incidents, [], source, notice=notice, details=args.details))
    return 0 if incidents else 1


def sightings(kubectl: Kubectl, namespace: str | None) -> list[Sighting]:
    """Every oomwatch Event the API server holds (kubectl pages), parsed."""
    scope = ["-n", namespace] if namespace else ["-A"]
    data = kubectl.get("events", *scope, "--field-selector", FIELD_SELECTOR) or {}
    return [s for item in data.get("items", []) if (s := parse_event(item)) is not None]


def incident_sightings(kubectl: Kubectl, namespace: str | None) -> list[Sighting] | None:
    """The `OOMIncident`s agents wrote (others are left out), or None where the cluster has
    none to give (no CRD, or no grant to read them)."""
    scope = ["-n", namespace] if namespace else ["-A"]
    try:
        data = kubectl.get(fleet_report.RESOURCE, *scope, "--show-managed-fields") or {}
    except KubectlError:
        return None
    return [s for item in data.get("items", []) if (s := parse_oomincident(item)) is not None]


def _top(args: argparse.Namespace, kubectl: Kubectl) -> int:
    until_s = time.time()
    since_s = until_s - args.since
    seen = sightings(kubectl, args.namespace)
    objects = incident_sightings(kubectl, args.namespace)
    if objects is not None:
        # Kills from the objects (kept 14 days, not an hour); from Events only the warnings
        # and the node-wide kills, which no namespaced object holds.
        seen = [s for s in seen if s.is_warning or not s.namespace] + objects
    token = args.prometheus_token_file.read_text().strip() if args.prometheus_token_file else None
    if args.prometheus:
        series, ends, step = kill_series(
            args.prometheus, since_s, until_s, token=token, job=args.prometheus_job
        )
        if args.namespace:
            series = [s for s in series if s.labels["namespace"] == args.namespace]
    else:
        step = step_s(args.since)
        ends, series = bucket_ends(since_s, until_s, step), None
    rows = build(seen, series, ends, step)
    oldest = min((s.first_s for s in seen), default=None)
    if args.output == "json":
        json.dump(
            {
                "since": _iso(since_s),
                "until": _iso(until_s),
                "bucket_seconds": step,
                "prometheus": bool(args.prometheus),
                "events": len(seen) - len(objects or ()),
                "oomincidents": None if objects is None else len(objects),
                "oldest_event": _iso(oldest) if oldest else None,
                "rows": [r.to_dict() for r in rows],
            },
            sys.stdout,
            indent=1,
        )
        print()
        return 0
    kills = sum(r.kills for r in rows)
    nodes = {n for r in rows for n in r.nodes}
    workloads = sum(1 for r in rows if r.kills)
    header = (
        f"OOM kills since {_iso(since_s)[:16]}Z: {kills} in {workloads} workload(s) on"
        f" {len(nodes)} node(s)"
    )
    oldest_text = _iso(oldest)[:16] + "Z" if oldest else "-"
    notes = (
        [f"counts: Prometheus ({args.prometheus}), per {_span(step)}"]
        if args.prometheus
        else [
            "counts: OOMIncident objects (kept by their agents for 14 days by default; each"
            " object's kills go in the bucket of its last one) and Events for node-wide kills:"
            " give --prometheus for counts per bucket"
        ]
        if objects is not None
        else [
            "counts: Events only (the API server keeps them for --event-ttl, 1h by default;"
            f" the oldest here is from {oldest_text}): give"
            " --prometheus for the whole window"
        ]
    )
    source = (
        f"{len(objects)} OOMIncident(s) and {len(seen) - len(objects)} Event(s)"
        if objects is not None
        else f"{len(seen)} oomwatch Event(s)"
    )
    notes.append(f"why: {source}, findings and advice from the stored diagnoses")
    print(render(rows, header, notes, wide=args.wide), end="")
    return 0


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _span(step: int) -> str:
    return {3600: "hour", 6 * 3600: "6 hours", 86400: "day"}.get(step, f"{step // 86400} days")


if __name__ == "__main__":
    raise SystemExit(main())
