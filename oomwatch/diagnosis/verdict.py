"""The one sentence a reader needs first, short enough to read aloud (who, where, which
limit, why, the gist of what to do), its code for tables, and the list of what the evidence
does not say, so silence is never mistaken for "nothing wrong".

The reasoning (findings) and the full advice (the recommendation) follow the verdict in
every report; the verdict only names them, so it stays under `VERDICT_MAX_CHARS` however long
the names in it are: each draft drops detail until one fits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from oomwatch.diagnosis import victims
from oomwatch.diagnosis.device import CAUSE_CODES
from oomwatch.diagnosis.evidence import charged_bytes, claimed_where, limit_bytes, pct, where, who
from oomwatch.diagnosis_codes import ElsewhereCode, FindingCode, LimitCode, VerdictCode
from oomwatch.incident import Finding, Incident, is_kernel_kill
from oomwatch.sanitize import escape_control
from oomwatch.units import fmt_bytes

VERDICT_MAX_CHARS = 200
# `{of}`: " of <size>", `{size}`: "<size>, " where the size is known
_LIMIT_WORDS: dict[LimitCode, str] = {
    "limit-container": "at its container memory limit{of}",
    "limit-pod": "at the pod-level memory limit{of}",
    "limit-qos": "at the QoS cgroup's memory limit{of}",
    "limit-node-allocatable": "when node allocatable ({size}all pods together) ran out",
    "limit-cgroup": "at its cgroup's memory limit{of}",
    "limit-node": "when the node ran out of memory (global OOM)",
    "limit-cpuset": "when its cpuset's memory nodes ran out",
    "limit-mempolicy": "when its NUMA memory policy's nodes ran out",
}
# Verdicts that are no kernel kill; their finding speaks for the incident.
_ELSEWHERE: tuple[ElsewhereCode, ...] = ("framework-oom", "eviction", "false-oomkilled")
_CAUSE_ORDER: tuple[FindingCode, ...] = (
    "leak-trend",
    "spike",
    "thp-hidden",
    "tmpfs-shmem",
    "page-cache",
    "kernel-memory",
    "many-processes",
    "score-adj-victim",
)
# The findings a verdict code names, the first one present wins.
_VERDICT_ORDER: tuple[VerdictCode, ...] = ("node-panic", *CAUSE_CODES, *_ELSEWHERE, *_LIMIT_WORDS)
_PARTS: dict[FindingCode, tuple[str, str]] = {  # finding code -> (evidence key, short name)
    "thp-hidden": ("thp_bytes", "thp"),
    "tmpfs-shmem": ("shmem_bytes", "shmem"),
    "page-cache": ("file_bytes", "cache"),
    "kernel-memory": ("kernel_bytes", "kernel"),
}
PART_WORDS = {
    "heap": "heap",
    "thp": "transparent hugepages",
    "shmem": "tmpfs/shared memory",
    "cache": "page cache",
    "kernel": "kernel memory",
}
_PARENTHESES = re.compile(r"\s*\((?!unverified\))[^()]*\)")  # a claim stays marked
_LONG_HEX = re.compile(r"[0-9a-f]{16,}")


def short_cgroup(path: str) -> str:
    """A cgroup path by its last component (two when the last is a bare id), long hex ids cut
    to the 12 characters `docker ps` shows: `…/cri-containerd-9192cb33411f.scope`."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "/"
    keep = parts[-2:] if _LONG_HEX.fullmatch(parts[-1]) else parts[-1:]
    text = ("…/" if len(parts) > len(keep) else "/") + "/".join(keep)
    return _LONG_HEX.sub(lambda m: m.group(0)[:12], text)


def short_where(incident: Incident) -> str:
    """`where` in few characters: `pod ns/name`, `pod 5931aa75` (the UID's first 8),
    `cgroup …/x.scope`, or for a kill the evidence cannot place `one of pods A, B`."""
    ctx = incident.k8s
    attribution = incident.attribution
    if attribution is not None and attribution.ambiguous and not incident.pod_uid:
        names = [
            f"{c.namespace}/{c.pod}"
            if c.pod and c.namespace
            else c.pod or (c.pod_uid or "")[:8] or short_cgroup(c.cgroup)
            for c in attribution.candidates
        ]
        text = "one of pods " if all(c.pod_uid for c in attribution.candidates) else "one of "
        text += ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
    elif ctx is not None and ctx.pod:
        text = f"pod {ctx.namespace}/{ctx.pod}" if ctx.namespace else f"pod {ctx.pod}"
    elif incident.pod_uid:
        text = f"pod {incident.pod_uid[:8]}"
    else:
        path = incident.task_memcg or incident.group_cgroup or incident.oom_memcg
        claim = claimed_where(incident)
        if path:
            text = f"cgroup {short_cgroup(path)}"
        elif claim:
            text = claim.partition(" container ")[0].removesuffix(" (unverified)")
            text += " (unverified)"
        else:
            text = "an unknown cgroup"
    return escape_control(text)


def dominant_part(incident: Incident) -> tuple[str, int, int] | None:
    """(short name, bytes, bytes charged) of what held most of the memory: the part a
    consumer finding named (THP, shmem, page cache, kernel), else the largest of the heap
    (all anonymous memory), page cache, shmem and kernel memory; None without a breakdown."""
    by_code = {f.code: f for f in incident.findings}
    for code, (key, name) in _PARTS.items():  # in _CAUSE_ORDER
        if (finding := by_code.get(code)) is not None:
            ev = finding.evidence
            part = ev[key] - (ev.get("shmem_bytes") or 0 if name == "cache" else 0)
            return name, part, ev["charged_bytes"]
    parts, whole = incident.breakdown_bytes, charged_bytes(incident)
    if parts is None or not whole:
        return None
    sizes = {
        "heap": parts.anon or 0,
        "cache": max((parts.file or 0) - (parts.shmem or 0), 0),
        "shmem": parts.shmem or 0,
        "kernel": parts.kernel or 0,
    }
    name = max(sizes, key=lambda k: sizes[k])
    return (name, sizes[name], whole) if sizes[name] else None


def _cause(incident: Incident, by_code: dict[FindingCode, Finding]) -> str:
    for code in _CAUSE_ORDER:
        finding = by_code.get(code)
        if finding is None:
            continue
        if code in _PARTS:
            break
        ev = finding.evidence
        if code == "leak-trend":
            return f"steady growth of {fmt_bytes(ev['slope_bytes_per_second'])}/s"
        if code == "spike":
            return f"a {fmt_bytes(ev['jump_bytes'])} jump in the last seconds"
        if code == "many-processes":
            return f"memory spread over {ev['task_count']} processes"
        if code == "score-adj-victim":
            return f"oom_score_adj {ev['victim_oom_score_adj']} picked it over a larger process"
    part = dominant_part(incident)
    if part is None:
        return "what filled it is unknown"
    name, size, whole = part
    if size >= whole / 2:
        return f"mostly {PART_WORDS[name]} ({pct(size, whole)})"
    cause = f"largest part {PART_WORDS[name]} ({pct(size, whole)})"
    parts = incident.breakdown_bytes
    named = (parts.anon or 0) + (parts.file or 0) + (parts.kernel or 0) if parts else whole
    if named < whole / 2:  # the stats itemize less than half of what was charged
        cause += f", {pct(whole - named, whole)} not itemized"
    return cause


def _first_clause(text: str) -> str:
    """The leading clause of a message, without its parentheses: the gist to read aloud."""
    text = _PARENTHESES.sub("", text)
    text = re.split(r"[;:]\s|\.\s|\.$", text, maxsplit=1)[0].strip()
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def action(incident: Incident) -> str | None:
    """The gist of the recommendation, as a clause; None when there is none."""
    rec = incident.recommendation or {}
    if not rec.get("message"):
        return None
    kind = rec.get("action")
    if kind == "relieve-node":
        if rec.get("fits_node") is False:
            return "it does not fit this node"
        if rec.get("memory_request_bytes"):
            return f"set its memory request to about {fmt_bytes(rec['memory_request_bytes'])}"
        return "raising its limit cannot help"
    if kind == "fix-growth":
        return "a larger limit only delays the next kill"
    if kind == "watch-longer":
        return "it grew without levelling off while watched: a larger limit may only delay it"
    if kind == "widen-numa-nodes":
        return "a memory limit will not help; allow it more memory nodes"
    if kind == "find-kernel-memory":
        return "find what holds the kernel memory before raising any limit"
    if kind == "reduce-device-memory":
        return "lower the batch size or model footprint"
    if kind == "fix-fragmentation":
        return "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    if kind == "free-shared-device":
        return "a smaller batch is not the fix"
    return _first_clause(str(rec["message"]))


def _drafts(incident: Incident, by_code: dict[FindingCode, Finding]) -> Iterator[str]:
    """Verdicts from the fullest to the shortest; the first that fits is used."""
    todo = action(incident)
    then = f"; {todo}." if todo else "; too little evidence to advise."
    code = next((c for c in _ELSEWHERE if c in by_code), None)
    if code is not None:
        head = _first_clause(by_code[code].message)
        head = head[:1].upper() + head[1:]
        device_cause = next((by_code[c] for c in CAUSE_CODES if c in by_code), None)
        heads = (head, head.replace(where(incident), short_where(incident), 1))
        if device_cause is not None:
            gist = _first_clause(device_cause.message)
            yield from (f"{h}: {gist}" + (f"; {todo}." if todo else ".") for h in heads)
            yield from (f"{h}: {gist}." for h in heads)
        yield from (h + (f"; {todo}." if todo else ".") for h in heads)
        yield from (h + "." for h in heads)
        return
    if incident.victim is None and not incident.header_suppressed:
        invoker = incident.invoker.comm if incident.invoker else None
        by = f" by {escape_control(invoker)}" if invoker else ""
        panic = victims.panic_clause(incident)
        if panic is not None:
            yield f"The OOM killer was invoked{by} and {panic}."
            yield f"The OOM killer was invoked{by} and the node panicked."
            return
        head = f"The OOM killer was invoked{by}, but this log shows no kill"
        yield f"{head} (nothing was killable, another task was exiting, or the log is cut)."
        yield f"{head}."
        return
    limit_code = next((c for c in _LIMIT_WORDS if c in by_code), None)
    limit = limit_bytes(incident)
    what = _LIMIT_WORDS[limit_code] if limit_code else "at an unknown limit"
    what = what.format(
        of=f" of {fmt_bytes(limit)}" if limit else "", size=f"{fmt_bytes(limit)}, " if limit else ""
    )
    cause = _cause(incident, by_code)
    more = incident.victim_count - 1
    name = who(incident)  # in every draft; the short place only once the long one is too long
    many = f"{name} and {more} more processes" if more > 0 else None
    place = where(incident)
    if many:
        yield f"{many} in {place} were killed {what}: {cause}{then}"
    yield f"{name} in {place} was killed {what}: {cause}{then}"
    place = short_where(incident)
    if many:
        yield f"{many} in {place} were killed {what}: {cause}{then}"
    yield f"{name} in {place} was killed {what}: {cause}{then}"
    yield f"{name} in {place} was killed {what}{then}"
    yield f"{name} was killed {what}{then}"
    yield f"{name} was killed {what}."


def verdict(incident: Incident) -> str:
    """One sentence of at most VERDICT_MAX_CHARS: `<who> in <where> was killed <at which
    limit>: <why>; <the gist of what to do>.`"""
    by_code = {f.code: f for f in incident.findings}
    text = ""
    for text in _drafts(incident, by_code):
        if len(text) <= VERDICT_MAX_CHARS:
            return text
    return text[: VERDICT_MAX_CHARS - 1].rstrip() + "…"


def verdict_code(incident: Incident) -> VerdictCode:
    """The verdict as a code for tables: the finding it leads with (`limit-pod`,
    `framework-oom`, ...; `node-panic` first), `no-kill` when nothing was killed,
    `limit-unknown` else."""
    codes = [f.code for f in incident.findings]
    for code in _VERDICT_ORDER:
        if code in codes:
            return code
    if incident.victim is None and not incident.header_suppressed:
        return "no-kill"
    return "limit-unknown"


def unknowns(incident: Incident) -> list[str]:
    """What this incident's evidence does not say (shown by every report format)."""
    if not is_kernel_kill(incident.kind):
        if incident.k8s:
            return []
        if claimed_where(incident):
            return [
                "pod unverified: only the probe file claims it (no per-pod directory or"
                " file owner vouches for it)"
            ]
        return ["pod name unknown (no Kubernetes lookup)"]
    out: list[str] = []
    panicked = victims.panic_clause(incident) is not None  # killed nothing: no victim to miss
    if incident.victim is None and not panicked:
        out.append("victim unknown (no `Killed process` line)")
    if incident.kind == "unknown" or incident.limit_scope is None:
        out.append("which limit was hit is unknown (no `oom-kill:` / `Task in` line)")
    if incident.kind == "memcg" and (incident.memcg is None or incident.memcg.usage_bytes is None):
        out.append("usage and limit unknown (no `memory: usage` line)")
    if incident.breakdown_bytes is None:
        out.append("memory breakdown unknown (no stats block in the report)")
    if not incident.tasks:
        out.append("task table unknown (not printed, or cut from this log)")
    if incident.timeline is None:
        out.append(
            "memory timeline unknown (not sampled by the oomwatch daemon): leak/spike not judged"
        )
    if incident.pod_uid and incident.k8s is None:
        out.append("pod and container names unknown (no Kubernetes lookup)")
    killed = incident.victim is not None or incident.header_suppressed or incident.kmsg_missing
    if incident.container_survived is None and incident.kind != "global" and killed:
        out.append("whether the container survived the kill is unknown")
    return out
