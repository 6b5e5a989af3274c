"""Whether each member of a farm is reachable, from two witnesses: the leader (how long
since each follower last answered it, `MemberView.ack_age` / `reachable`) and the
command itself (does the member's endpoint answer a ping within the dial timeout).

A member is unreachable when either says so: a follower the leader has not heard from
within the election timeout (dead, partitioned, or stalled), or an endpoint that does
not answer (dead, or cut off from operators while the leader still reaches it). Members
that left the configuration ("former": only their old status entries remain) are not
judged.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from consensus.admin.farm_target import FarmTarget

#: endpoints probed at once (a thread each); a bigger farm is probed in rounds
MAX_PROBES = 16
#: a probe's time for the ping's answer once connected (the dial timeout bounds the rest)
ANSWER_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Health:
    """One member's verdict: `reachable` None when not judged (a former member)."""
    reachable: bool | None
    problem: str | None = None


def probe_endpoints(target: "FarmTarget", endpoints: Mapping[int, str]) -> dict[int, str | None]:
    """Ping every member's endpoint at once, each bounded by the dial timeout; per member
    None when it answered as itself, else why not."""
    if not endpoints:
        return {}
    bound = target.dial_timeout

    def probe(item: tuple[int, str]) -> tuple[int, str | None]:
        from consensus.common.errors import FarmError
        node_id, endpoint = item
        try:
            with target.client(endpoints=[endpoint], timeout=bound + ANSWER_SECONDS,
                               dial_timeout=bound) as client:
                answer = client.ping(endpoint)
        except FarmError as exc:
            return node_id, f"its endpoint does not answer ({exc})"
        if answer.get("node") != node_id:
            return node_id, f"its endpoint {endpoint} answers as n{answer.get('node')}"
        return node_id, None

    with ThreadPoolExecutor(max_workers=min(MAX_PROBES, len(endpoints)),
                            thread_name_prefix="probe") as pool:
        return dict(pool.map(probe, sorted(endpoints.items())))


def judge(view: Mapping[str, Any], probes: Mapping[int, str | None] | None = None
          ) -> dict[int, Health]:
    """Each member's `Health` from a `FarmStatus` (as `plain` gives it) and, when the
    endpoints were probed, `probe_endpoints`' answers."""
    timeout = view.get("election_timeout")
    verdicts = {}
    for key, member in (view.get("members") or {}).items():
        node_id = int(key)
        if member.get("role") == "former":
            verdicts[node_id] = Health(None)
            continue
        problems = []
        if member.get("reachable") is False:
            age = member.get("ack_age")
            within = f" (election timeout {timeout:g}s)" if timeout else ""
            problems.append("the leader has not heard from it since its election" + within
                            if age is None else
                            f"the leader last heard from it {age:.1f}s ago{within}")
        probe = (probes or {}).get(node_id)
        if probe:
            problems.append(probe)
        verdicts[node_id] = Health(not problems, "; ".join(problems) or None)
    return verdicts


def farm_problems(view: Mapping[str, Any], verdicts: Mapping[int, Health]) -> list[str]:
    """What makes the farm unhealthy: no leader, unreachable members (empty: healthy)."""
    problems = [] if view.get("leader_id") is not None else ["no leader"]
    problems += [f"n{node_id} is unreachable: {health.problem}"
                 for node_id, health in sorted(verdicts.items()) if health.reachable is False]
    return problems


@dataclass
class MemberRow:
    id: int
    endpoint: str
    role: str
    voter: bool
    match: int | None
    lag: int | None                # entries behind the commit index
    status_age: float | None       # seconds since the member's last status entry
    commit: int | None             # from its last status
    last: int | None
    uptime: float | None           # seconds
    log_size: int | None
    ack_age: float | None = None   # seconds since the leader last heard from it
    reachable: bool | None = None  # None: not judged (a former member)
    problem: str | None = None     # why it is unreachable


def member_rows(view: Mapping[str, Any], now_ms: int,
                probes: Mapping[int, str | None] | None = None) -> list[MemberRow]:
    """One row per member of a `FarmStatus` (as `plain` gives it), judged by `health`
    (with the endpoints' `probes` when they were probed)."""
    members = view.get("members") or {}
    lag = view.get("lag") or {}
    verdicts = judge(view, probes)
    rows = []
    for key, m in sorted(members.items(), key=lambda kv: int(kv[0])):
        status = m.get("status") or {}
        raft = status.get("raft") or {}
        date = status.get("date")
        uptime = (status.get("router") or {}).get("uptime")
        rows.append(MemberRow(
            int(key), m.get("endpoint") or "", m.get("role") or "?", bool(m.get("voter")),
            m.get("match_index"), lag.get(str(key)),
            (now_ms - date) / 1e3 if isinstance(date, int) else None,
            raft.get("commit"), raft.get("last"),
            uptime / 1e3 if isinstance(uptime, (int, float)) else None, raft.get("logSize"),
            m.get("ack_age"), verdicts[int(key)].reachable, verdicts[int(key)].problem))
    return rows
