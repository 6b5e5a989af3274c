"""``garlicfarm status --serve HOST:PORT``: a live status page of one or more farms.

    garlicfarm status --serve 127.0.0.1:8080 --endpoints 127.0.0.1:9001,127.0.0.1:9002
    garlicfarm status --serve 127.0.0.1:8080 --credentials creds \\
        --farm orders=10.0.0.1:9001,10.0.0.2:9001 --farm clicks=10.0.1.1:9001

One poller thread per farm asks it for `status()` (what ``garlicfarm status`` shows)
every second, with the same connection options, and keeps the latest view and the
leader changes it saw. The server answers ``/`` (the farms), ``/farm/NAME`` (a page per
farm: members with role, health (unreachable: the leader has not heard from it within
the election timeout, or its endpoint does not answer a ping), the age of the leader's
last acknowledgement, term, commit and applied index, lag, last status entry, publisher;
the consumers' positions and lag; recent leader changes, timed by the leader's
election) and ``/api/farm/NAME`` (that page's JSON, which the page fetches
every second: no reload, plain HTML and JavaScript, no build step). The exposure rule
is `http_endpoint`'s: loopback, or the farm's credentials as HTTP Basic authentication;
``--serve-tls-cert/--serve-tls-key`` serve it over HTTPS only.
"""
from __future__ import annotations

import argparse
import dataclasses
import html
import json
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TextIO

from consensus.admin.admin_output import UsageError, plain
from consensus.admin.farm_target import FarmTarget, resolve_connection, split_endpoints
from consensus.admin.health import Health, farm_problems, member_rows, probe_endpoints
from consensus.admin.partition_status import collect_partitions, partitions_document
from consensus.runtime.http_endpoint import HttpEndpoint, Response, parse_listen, tls_context

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("garlicfarm.status_page")

POLL_INTERVAL = 1.0        #: seconds between two status requests to a farm
MAX_BACKOFF = 8.0          #: seconds between attempts to a farm that does not answer
LEADER_CHANGES_KEPT = 20
PROBE_INTERVAL = 5.0       #: seconds between two pings of every member's endpoint


def parse_farm(text: str) -> tuple[str, str]:
    """``NAME=HOST:PORT,...`` of ``--farm``."""
    name, sep, endpoints = text.partition("=")
    if not sep or not name.strip():
        raise UsageError("--farm", f"{text!r} is not NAME=HOST:PORT,...")
    split_endpoints(endpoints, f"--farm {name}")
    return name.strip(), endpoints


class FarmPoller:
    """Asks one farm for its status every `POLL_INTERVAL` on a daemon thread (backing
    off while it does not answer) and keeps what the page shows."""

    def __init__(self, name: str, conn: FarmTarget) -> None:
        self.name = name
        self.conn = conn
        self.client = conn.client()         # here: a bad option fails the command
        self.view: dict[str, Any] | None = None
        self.probes: dict[int, str | None] = {}     # the endpoints' answers to a ping
        self.probed_at = float("-inf")              # monotonic
        self.partitions: dict[str, Any] | None = None   # several partitions: their rows
        self.error: str | None = None
        self.fetched_at: float | None = None
        self.leader_changes: deque[dict[str, Any]] = deque(maxlen=LEADER_CHANGES_KEPT)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"status-{name}")

    def start(self) -> "FarmPoller":
        self._thread.start()
        return self

    def _run(self) -> None:
        from consensus.common.errors import FarmError
        wait = POLL_INTERVAL
        with self.client as client:
            while not self._stop.is_set():
                try:
                    view = plain(client.status())
                except FarmError as exc:
                    with self._lock:
                        self.error = f"{type(exc).__name__}: {exc}"
                    wait = min(MAX_BACKOFF, wait * 2)
                except Exception:       # noqa: BLE001 - logged; the page says so
                    log.exception("farm %s: status failed", self.name)
                    with self._lock:
                        self.error = "internal error (see the log)"
                    wait = min(MAX_BACKOFF, wait * 2)
                else:
                    self._probe(view)
                    self._keep(view)
                    wait = POLL_INTERVAL
                self._stop.wait(wait)

    def _probe(self, view: dict[str, Any]) -> None:
        """Ping the members' endpoints every PROBE_INTERVAL (the leader's view covers the
        seconds between: a dead follower goes silent to it within the election timeout)."""
        if time.monotonic() - self.probed_at < PROBE_INTERVAL:
            return
        endpoints = {int(k): m["endpoint"] for k, m in (view.get("members") or {}).items()
                     if m.get("endpoint") and m.get("role") != "former"}
        probes = probe_endpoints(self.conn, endpoints)
        partitions = partitions_document(collect_partitions(self.conn, endpoints),
                                         sorted(endpoints))
        with self._lock:
            self.probes, self.probed_at = probes, time.monotonic()
            self.partitions = partitions

    def _keep(self, view: dict[str, Any]) -> None:
        now = time.time()
        with self._lock:
            if self.view is None or self.view.get("leader_id") != view.get("leader_id") or \
                    self.view.get("term") != view.get("term"):
                # timed by the election (the leader's clock), not by when we looked
                since = view.get("leader_since_ms")
                self.leader_changes.appendleft({
                    "at": since / 1000 if isinstance(since, (int, float)) else now,
                    "leader": view.get("leader_id"), "term": view.get("term")})
            self.view, self.error, self.fetched_at = view, None, now

    def document(self) -> dict[str, Any]:
        """The farm's JSON for the page."""
        with self._lock:
            view, error, fetched = self.view, self.error, self.fetched_at
            changes, probes = list(self.leader_changes), dict(self.probes)
            partitions = self.partitions
        doc: dict[str, Any] = {"name": self.name, "error": error, "fetched_at": fetched,
                               "leader_changes": changes, "members": [],
                               "partitions": (partitions or {}).get("partitions", [])}
        if view is None:
            return doc
        now_ms = int(time.time() * 1000)
        members = view.get("members") or {}
        for row in member_rows(view, now_ms, probes):
            raft = ((members.get(str(row.id)) or {}).get("status") or {}).get("raft") or {}
            doc["members"].append({**dataclasses.asdict(row), "term": raft.get("term"),
                                   "applied": raft.get("applied"),
                                   "publisher": row.id == view.get("publisher")})
        doc.update(cluster=view.get("cluster"), leader=view.get("leader_id"),
                   term=view.get("term"), commit=view.get("commit_index"),
                   publisher=view.get("publisher"),
                   consumers=list(view.get("consumers") or []),
                   problems=farm_problems(view, {m["id"]: Health(m["reachable"], m["problem"])
                                                 for m in doc["members"]}),
                   age=None if fetched is None else round(time.time() - fetched, 1))
        return doc

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is None:      # never started: the client is ours to close
            self.client.close()
        else:
            self._thread.join()


class StatusPage:
    """The HTTP endpoint and a poller per farm."""

    def __init__(self, listen: str, farms: dict[str, FarmTarget],
                 credentials: dict[str, str] | None = None,
                 tls: "ssl.SSLContext | None" = None) -> None:
        self.pollers: dict[str, FarmPoller] = {}
        try:
            for name, conn in farms.items():
                self.pollers[name] = FarmPoller(name, conn)
            routes = {"/": lambda: Response(_index(list(self.pollers)).encode(), _HTML)}
            for name, poller in self.pollers.items():
                routes[f"/farm/{name}"] = lambda n=name: Response(_page(n).encode(), _HTML)
                routes[f"/api/farm/{name}"] = lambda p=poller: Response(
                    json.dumps(p.document(), default=str).encode(), "application/json")
            self.endpoint = HttpEndpoint(listen, "--serve", routes, credentials=credentials,
                                         name="status-page", tls=tls)
        except BaseException:
            for poller in self.pollers.values():
                poller.stop()           # never started: closes its client
            raise
        for poller in self.pollers.values():
            poller.start()

    @property
    def url(self) -> str:
        return self.endpoint.url

    def close(self) -> None:
        self.endpoint.close()
        for poller in self.pollers.values():
            poller.stop()


def farms_of(args: argparse.Namespace) -> dict[str, FarmTarget]:
    """Each farm's connection: ``--farm NAME=ENDPOINTS`` (repeatable; the other options
    shared), or the one farm of the usual connection options."""
    if not args.serve:
        raise UsageError("--farm", "names the farms of the status page: give --serve "
                                   "HOST:PORT too")
    specs = [parse_farm(f) for f in args.farm or []]
    if specs and args.endpoints is None:
        args.endpoints = specs[0][1]
    base = resolve_connection(args)
    if not specs:
        return {base.cluster: base}
    farms = {}
    for name, endpoints in specs:
        if name in farms:
            raise UsageError("--farm", f"farm {name!r} is named twice")
        farms[name] = dataclasses.replace(base, endpoints=split_endpoints(endpoints, "--farm"),
                                          cluster=name if args.cluster is None else base.cluster)
    return farms


def serve_status(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until SIGINT/SIGTERM (the `status --serve` command)."""
    import signal
    if not args.serve and (args.serve_tls_cert or args.serve_tls_key):
        raise UsageError("--serve-tls-cert", "protects the status page: give --serve "
                                             "HOST:PORT too")
    tls = tls_context(args.serve_tls_cert, args.serve_tls_key, "--serve-tls")
    farms = farms_of(args)
    base = next(iter(farms.values()))
    credentials = {base.username: base.password} if base.username and base.password \
        else None
    parse_listen(args.serve, "--serve", credentials)   # before any farm is asked
    page = StatusPage(args.serve, farms, credentials, tls)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    out.write(f"status page on {page.url}/ ({', '.join(f'{page.url}/farm/{n}' for n in farms)})"
              "\n")
    out.flush()
    stop.wait()
    page.close()
    return 0


_HTML = "text/html; charset=utf-8"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th:nth-child(-n+3), td:nth-child(-n+3) { text-align: left; }
tr.leader td { font-weight: bold; background: #eef7ee; }
tr.unreachable td { color: #b00; background: #fbeaea; }
.error { color: #b00; } .muted { color: #888; }
"""


def _index(names: list[str]) -> str:
    links = "".join(f'<li><a href="/farm/{html.escape(n)}">{html.escape(n)}</a></li>'
                    for n in names)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>garlicfarm</title>"
            f"<style>{_STYLE}</style></head><body><h1>garlicfarm farms</h1><ul>{links}</ul>"
            "</body></html>")


def _page(name: str) -> str:
    return _PAGE.replace("__STYLE__", _STYLE).replace("__NAME__", html.escape(name)) \
        .replace("__API__", json.dumps(f"/api/farm/{name}"))


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>farm __NAME__</title><style>__STYLE__</style></head>
<body>
<h1>farm __NAME__</h1>
<p>leader <b id="leader">?</b> &middot; term <span id="term">?</span> &middot;
commit <span id="commit">?</span> &middot; publisher <span id="publisher">?</span>
<span id="age" class="muted"></span></p>
<p id="error" class="error"></p>
<ul id="problems" class="error"></ul>
<table id="members"><thead><tr><th>id</th><th>endpoint</th><th>role</th><th>health</th>
<th>last ack</th><th>term</th><th>commit</th><th>applied</th><th>match</th><th>lag</th>
<th>last status</th><th>publisher</th></tr></thead><tbody></tbody></table>
<h2 id="partitions-title" hidden>partitions</h2>
<table id="partitions" hidden><thead><tr><th>partition</th><th>replicas</th><th>leader</th>
<th>term</th>
<th>commit</th><th>lag</th><th>quiesced</th></tr></thead><tbody></tbody></table>
<h2>consumers</h2>
<table id="consumers"><thead><tr><th>consumer</th><th>position</th><th>lag entries</th>
<th>lag rows</th><th>last seen</th></tr></thead><tbody></tbody></table>
<h2>recent leader changes</h2><ul id="changes"></ul>
<p class="muted"><a href="/">all farms</a></p>
<script>
const API = __API__;
const show = v => (v === null || v === undefined) ? "-" : String(v);
const node = v => (v === null || v === undefined) ? "none" : "n" + v;
function cell(row, text) { const td = document.createElement("td"); td.textContent = text;
  row.appendChild(td); }
function render(doc) {
  document.getElementById("error").textContent = doc.error || "";
  document.getElementById("leader").textContent = node(doc.leader);
  document.getElementById("term").textContent = show(doc.term);
  document.getElementById("commit").textContent = show(doc.commit);
  document.getElementById("publisher").textContent = node(doc.publisher);
  document.getElementById("age").textContent =
    doc.age === null || doc.age === undefined ? "" : "(as of " + doc.age + " s ago)";
  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const m of doc.members) {
    const row = document.createElement("tr");
    row.dataset.id = m.id; row.dataset.role = m.role;
    row.dataset.reachable = String(m.reachable);
    if (m.role === "leader") row.className = "leader";
    if (m.reachable === false) { row.className = "unreachable"; row.title = m.problem; }
    const health = m.reachable === null ? "-" : m.reachable ? "ok" : "UNREACHABLE";
    const ago = v => (v === null || v === undefined) ? "-" : v.toFixed(1) + " s ago";
    [m.id, m.endpoint, m.role, health, ago(m.ack_age), show(m.term), show(m.commit),
     show(m.applied), show(m.match), show(m.lag), ago(m.status_age),
     m.publisher ? "yes" : ""].forEach(v => cell(row, v));
    body.appendChild(row);
  }
  const parts = doc.partitions || [];
  document.getElementById("partitions").hidden = parts.length === 0;
  document.getElementById("partitions-title").hidden = parts.length === 0;
  const partBody = document.querySelector("#partitions tbody");
  partBody.replaceChildren();
  for (const p of parts) {
    const row = document.createElement("tr");
    row.dataset.partition = p.partition;
    const quiet = (p.quiesced || []).length;
    [p.partition, (p.replicas || []).join(","), node(p.leader), show(p.term),
     show(p.commit), show(p.lag),
     quiet ? `${quiet}/${Object.keys(p.applied || {}).length}` : ""]
      .forEach(v => cell(row, v));
    partBody.appendChild(row);
  }
  const consumers = document.querySelector("#consumers tbody");
  consumers.replaceChildren();
  for (const c of doc.consumers || []) {
    const row = document.createElement("tr");
    row.dataset.consumer = c.name;
    [c.name, show(c.position), show(c.lag_entries), show(c.lag_rows),
     show(c.seen_age) + " s ago"].forEach(v => cell(row, v));
    consumers.appendChild(row);
  }
  const problems = document.getElementById("problems");
  problems.replaceChildren();
  for (const p of doc.problems || []) {
    const li = document.createElement("li"); li.textContent = p; problems.appendChild(li);
  }
  const changes = document.getElementById("changes");
  changes.replaceChildren();
  for (const c of doc.leader_changes) {
    const li = document.createElement("li");
    li.textContent = new Date(c.at * 1000).toLocaleString() + ": leader " +
      node(c.leader) + " (term " + show(c.term) + ")";
    changes.appendChild(li);
  }
}
async function refresh() {
  try {
    const answer = await fetch(API, {cache: "no-store"});
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    render(await answer.json());
  } catch (e) {
    document.getElementById("error").textContent = "the status server: " + e;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script>
</body></html>
"""
