"""Undo how people forward a report: wrapped lines, list markers, pager marks, elisions.

A report reaches a bug tracker or a mailing list quoted (`> `, handled by the line parser),
wrapped by a mail client at 72-80 columns or by a console at its width (a kill line in
three pieces, a token cut in two: `file-r` / `ss:0kB`), chopped by a pager that marks the cut
(`>` or `$` at the edge), copied into a bullet list, or abridged by its author (`...`,
`[...]`, `<snip>`).  The rules here never invent: a wrapped line is joined only when the
join reads as a more complete kernel line than the piece alone (and the continuation adds
the kernel's fields, never a name); a field an author elided or a pager cut is unknown
(None), never zero.  They are engaged only by lines that are not log records themselves,
so an ordinary log (every line stamped) never reaches them.
"""

from __future__ import annotations

import re

from oomwatch.decode import lines as L
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.incident import Victim

# A wrap is worth trying only after a held line of one of these kinds.
_WRAPPABLE = (
    "Killed process ",
    " invoked oom-killer",
    "oom-kill:",
    "ill process ",
    "oom_reaper: ",
    ": usage ",
    "oom-killer: gfp_mask=",
)
# A continuation never starts a report line of its own (joining one would hide it).
_STARTS_LINE = ("Killed process", "invoked oom-killer", "oom-kill:", "ill process ", "oom_reaper:")
# The most a wrapped report line may grow to (the kernel's 1 KiB record, with room).
_MAX_JOINED_CHARS = 4096
# An author's elision or a pager's cut inside or at the end of a line.
_ELIDED = lazy_compile(r"\.{3,}|\u2026|\[\s*\.\.\.\s*\]|<\s*snip\s*>|\[\s*snip\s*\]", re.I)
# A list marker before a copied log line (markdown, reStructuredText).
_LIST_MARKER = lazy_compile(r"[*\u2022-][ \t]+")
_LIST_KEYS = ("oom-kill", "Killed process", "invoked oom-killer", "oom_reaper", "ill process ")
# The kill line's fields after the name, each read on its own in an abridged line.
_KILL_FIELDS = {
    "total_vm_bytes": lazy_compile(r"(?:total-vm|vsz):(\d{1,20})kB"),
    "anon_rss_bytes": lazy_compile(r"anon-rss:(\d{1,20})kB"),
    "file_rss_bytes": lazy_compile(r"file-rss:(\d{1,20})kB"),
    "shmem_rss_bytes": lazy_compile(r"shmem-rss:(\d{1,20})kB"),
    "pgtables_bytes": lazy_compile(r"pgtables:(\d{1,20})kB"),
}
_KILL_UID = lazy_compile(r"UID[: ](\d{1,20})")
_KILL_ADJ = lazy_compile(r"oom_score_adj:(-?\d{1,20})")
_KILL_HEAD = lazy_compile(
    r"(?:(?P<msg>(?i:out of memory)|Memory cgroup out of memory): )?"
    r"Killed process (?P<pid>\d{1,20})(?:, UID \d{1,20},)? \((?P<comm>.{0,64}?)\)"
    # what follows the name is the kernel's own (a field) or an author's elision: prose that
    # merely mentions a kill is not one
    r"(?=,?\s*(?:(?:total-vm|vsz|anon-rss|file-rss|shmem-rss|pgtables|oom_score_adj):|UID[: ])"
    r"|\s*(?:\.{3}|\u2026|\[\s*\.\.\.\s*\]|<\s*snip\s*>|\[\s*snip\s*\]))"
)
# A console's login prompt the first record was glued to (`node-1 login: [  12.3] ...`).
_GLUED_PROMPT = lazy_compile(r"\S{1,64} login: (?=<?\d?>?\[\s*\d{1,12}\.\d)")
_NAME_START = lazy_compile(r"Killed process \d{1,20}(?:, UID \d{1,20},)? \(")
# The last token before a cut is whole only when it ends with its unit.
_LAST_TOKEN = lazy_compile(r"[^\s,]*[,\s]*$")


def strip_list_marker(line: str) -> str:
    """`*  Out of memory: Killed process ...` -> the log line, when what follows is one."""
    marker = _LIST_MARKER.match(line)
    if marker is None or not any(key in line for key in _LIST_KEYS):
        return line
    return line[marker.end() :]


def strip_glued_prompt(line: str) -> str:
    """`node-1 login: [ 12.345] msg` (a console capture) -> the kernel's line."""
    prompt = _GLUED_PROMPT.match(line)
    return line[prompt.end() :] if prompt else line


def wants_continuation(message: str) -> bool:
    """Whether a held message is a report line a wrap may have cut (cheap; most are not)."""
    return len(message) < _MAX_JOINED_CHARS and any(k in message for k in _WRAPPABLE)


def join_wrapped(held: str, line: str) -> str | None:
    """`held` and its continuation `line` as one line, if the join reads as a more complete
    kernel line than `held` alone and the continuation only adds fields; None otherwise."""
    piece = line.strip()
    if not piece or any(piece.startswith(k) or f" {k}" in piece for k in _STARTS_LINE):
        return None
    before = completeness(held)
    best: tuple[int, str] | None = None
    for joint in _joints(held, piece):
        joined = held.rstrip() + joint + piece
        if len(joined) > _MAX_JOINED_CHARS or not _names_kept(held, joined):
            continue
        score = completeness(joined)
        better = score is not None and (before is None or score > before)
        if better and score is not None and (best is None or score > best[0]):
            best = (score, joined)
    return best[1] if best is not None else None


def _joints(held: str, piece: str) -> tuple[str, str]:
    """How the two pieces may have been one, the likelier first: a mail client wraps at a
    blank (after a comma), a console anywhere, inside a token (`file-r` / `ss:0kB`)."""
    if held.rstrip()[-1:] == "," or held[-1:].isspace():
        return (" ", "")
    return ("", " ")


def _names_kept(held: str, joined: str) -> bool:
    """A continuation adds the kernel's fields, never changes whose line it is: a kill line
    keeps the pid and name it had, and a cut inside a name (a blank or not?) is not joined."""
    if "Killed process " not in joined:
        return True
    before = read_kill(held) if "Killed process " in held else None
    after = read_kill(joined)
    if after is None:
        return before is None
    if before is not None:
        return (before[1].pid, before[1].comm) == (after[1].pid, after[1].comm)
    name = _NAME_START.search(joined)
    cut = len(held.rstrip())
    return name is None or not name.end() < cut < name.end() + len(after[1].comm)


def completeness(message: str) -> int | None:
    """How many of its fields a report line gives (None: not a report line as it stands)."""
    if "Killed process " in message:
        killed = read_kill(message)
        if killed is None:
            return None
        v = killed[1]
        sizes = (v.total_vm_bytes, v.anon_rss_bytes, v.file_rss_bytes, v.shmem_rss_bytes)
        fields = sum(f is not None for f in (*sizes, v.uid, v.pgtables_bytes, v.oom_score_adj))
        return fields + (killed[2] is None)  # the kernel's whole line is worth one more
    if message.startswith("oom-kill:"):
        s = L.parse_oom_kill(message)
        if s is None:
            return None
        found = (s.constraint, s.nodemask, s.cpuset, s.mems_allowed, s.oom_memcg, s.task_memcg)
        return sum(f is not None for f in (*found, s.task, s.pid, s.uid)) + s.global_oom
    if " invoked oom-killer" in message:
        invoked = L.parse_invoked(message)
        if invoked is None:
            return None
        inv, note = invoked
        whole = note is None or "oomkilladj" in note  # not the abridged reading
        return sum(f is not None for f in (inv.gfp_mask, inv.order, inv.oom_score_adj)) + whole
    return _other_line(message)


def _other_line(message: str) -> int | None:
    if "ill process " in message and L.parse_kill_select(message) is not None:
        return 1
    if message.startswith("oom_reaper: ") and L.parse_reaped(message) is not None:
        return 1
    if L.parse_usage(message) is not None:
        return 1
    if message.startswith("oom-killer: "):
        invoked = L.parse_invoked(message)
        return None if invoked is None else 1 + (invoked[0].order is not None)
    return None


def read_kill(message: str) -> tuple[str | None, Victim, str | None] | None:
    """A kill line as the kernel prints it (`lines.parse_killed`), or abridged: (its
    message, the victim, a note when it was abridged)."""
    killed = L.parse_killed(message)
    if killed is not None:
        return killed[0], killed[1], None
    return abridged_kill(message)


def abridged_kill(message: str) -> tuple[str | None, Victim, str] | None:
    """A `Killed process` line an author abridged or a pager chopped: the fields it still
    shows, the rest unknown, and a note saying so.  None for a line the kernel's own
    format reads (`lines.parse_killed`) or that is no kill line."""
    head = _KILL_HEAD.match(message)
    if head is None or L.parse_killed(message) is not None:
        return None
    tail = _readable(message[head.end() :])
    values: dict[str, int | None] = {}
    for name, pattern in _KILL_FIELDS.items():
        found = pattern.search(tail)
        values[name] = int(found.group(1)) * 1024 if found else None
    uid, adj = _KILL_UID.search(tail), _KILL_ADJ.search(tail)
    victim = Victim(
        pid=int(head.group("pid")),
        comm=head.group("comm"),
        uid=int(uid.group(1)) if uid else None,
        oom_score_adj=int(adj.group(1)) if adj else None,
        **values,
    )
    note = (
        f"the kill line of pid {victim.pid} is abridged or cut: fields it does not show are unknown"
    )
    return head.group("msg"), victim, note


def _readable(tail: str) -> str:
    """The part of a kill line's fields that is whole: up to an elision or a pager's cut
    (`>`/`$` at the edge), less a last token that lost its unit there (`file-rss:18`)."""
    cut = _ELIDED.search(tail)
    if cut is not None:
        tail = tail[: cut.start()]
    elif tail[-1:] in (">", "$"):
        tail = tail[:-1]
    last = _LAST_TOKEN.search(tail)
    if last is not None and not last.group(0).rstrip(", \t").endswith("kB"):
        tail = tail[: last.start()]
    return tail
