"""Advice when the node, node allocatable or a QoS-class cgroup ran out: no limit of the
victim was hit, so the advice is requests, placement or capacity -- never a limit as large
as what ran out.
"""

from __future__ import annotations

from oomwatch.diagnosis.evidence import limit_bytes, page_bytes, victim_rss_bytes, who
from oomwatch.diagnosis.sizing import (
    add_basis,
    manifest_values,
    on_kubernetes,
    round_up_mi,
    workload_sizes,
)
from oomwatch.diagnosis_codes import Recommendation
from oomwatch.incident import Incident
from oomwatch.units import fmt_bytes, quantity

__all__ = ["node_ran_out"]

BESTEFFORT_SCORE_ADJ = 1000  # kubelet's oom_score_adj for BestEffort pods (no request)
_RAN_OUT = {
    "node": "Node allocatable{size}, the memory all pods share,",
    "qos": "The QoS-class cgroup's memory{size}, shared by all pods of that class,",
    "global": "The node's memory{size}",
}


def node_ran_out(incident: Incident, buffer_percent: int) -> Recommendation:
    """Node allocatable, a QoS cgroup or the whole node ran out: no limit of the victim's.

    A pod's own use is sized for its request (what the scheduler reserves); a limit is
    suggested only where it is known to fit below what ran out.  A process outside any pod
    (a plain container's too: no scheduler reserves for it) is not sized at all: the kernel
    picked it by score, which says little about what filled the node.
    """
    scope = "global" if incident.kind == "global" else incident.limit_scope or "global"
    ran_out = limit_bytes(incident)
    size = f" of {fmt_bytes(ran_out)}" if ran_out is not None else ""
    head = _RAN_OUT[scope].format(size=size) + " ran out"
    if incident.victim is not None:
        head += f", not a limit of {who(incident)}: raising its limit cannot help"
    else:
        head += ", not a limit of the process killed"
    parts = [head]
    rec: Recommendation = {
        "action": "relieve-node",
        "limit_will_not_help": True,
        "scope_limit_bytes": ran_out,
        "buffer_percent": buffer_percent,
        "memory_request_bytes": None,
        "memory_request": None,
        "memory_limit_bytes": None,
        "memory_limit": None,
    }
    # A request is Kubernetes' to reserve: a plain container (`/docker/<id>`) has none.
    kubernetes = on_kubernetes(incident)
    in_pod = kubernetes and bool(incident.pod_uid or incident.container_id)
    sizes = workload_sizes(incident) if in_pod else None
    if sizes is not None:
        base, request, basis = sizes
        need = round_up_mi(base * (1 + buffer_percent / 100))
        fits = None if ran_out is None else need < ran_out
        add_basis(rec, basis)
        rec["needed_bytes"], rec["fits_node"] = need, fits
        if fits is False:
            parts.append(
                f"this workload needs about {fmt_bytes(need)} ({buffer_percent} % above"
                f" {basis['peak_source']}), more than the {fmt_bytes(ran_out)} that ran out: it"
                " does not fit this node; run it on a node with more memory (another node pool,"
                " nodeSelector/affinity) or reduce its memory use"
            )
        else:
            request_source = "median of sampled usage" if request else basis["peak_source"]
            request = request or round_up_mi(base)
            rec["memory_request_bytes"], rec["memory_request"] = request, quantity(request)
            text = (
                f"set its memory request to about {fmt_bytes(request)} ({request_source}) so the"
                " scheduler reserves what it uses"
            )
            if fits:
                rec["memory_limit_bytes"], rec["memory_limit"] = need, quantity(need)
                text += (
                    f", and a memory limit of {fmt_bytes(need)} ({buffer_percent} % above"
                    f" {basis['peak_source']}; below the {fmt_bytes(ran_out)} that ran out) so"
                    " the kernel stops it before the node runs out"
                )
            parts.append(text)
    elif (victim := incident.victim) is not None and (rss := victim_rss_bytes(victim)):
        text = f"it held {fmt_bytes(rss)} at the kill; the kernel kills by score, not"
        text += " necessarily what filled the node"
        parts.append(text + (" (see the largest tasks)" if incident.tasks else ""))
    besteffort = _besteffort_bytes(incident) if kubernetes else None
    if besteffort is not None:
        rec["besteffort_rss_bytes"] = besteffort
        parts.append(
            f"processes of BestEffort pods (oom_score_adj {BESTEFFORT_SCORE_ADJ}: no memory"
            f" request) held {fmt_bytes(besteffort)}: give those pods requests near their use"
        )
    if kubernetes:
        parts.append(
            "pods using more than they request let the scheduler overpack the node: set memory"
            " requests near real usage for those pods, or add node memory"
        )
    else:
        parts.append(
            "reduce what runs on this machine or add memory (on a Kubernetes node: set memory"
            " requests near real usage, so the scheduler does not overpack it)"
        )
    manifest = manifest_values(rec["memory_limit_bytes"], rec["memory_request_bytes"])
    rec["message"] = "; ".join(parts) + "." + manifest
    return rec


def _besteffort_bytes(incident: Incident) -> int | None:
    """RSS of the task table's BestEffort processes (kubelet gives them oom_score_adj 1000)."""
    page = page_bytes(incident)
    rows = [t for t in incident.tasks if t.oom_score_adj == BESTEFFORT_SCORE_ADJ]
    total = sum(t.rss_pages * page for t in rows if t.rss_pages is not None)
    return total or None
