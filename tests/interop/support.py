"""The reference peers (../shared/peers) as processes, and our nodes beside them: what the
interop tests start, wait on and stop. The fixtures are in conftest.py."""
from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from tests.support import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]          # the repository's root
PEERS = ROOT.parent / "shared" / "peers"
JRAFT = PEERS / "jraft"
DAFKA = PEERS / "dafka"
ZGUIDE = PEERS / "zguide"


# -- processes -------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    """Is `pid` a live (not zombie) process? For processes that are not our children
    (the JVMs run-node.sh starts in the background)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class Proc:
    """A process started by a test: a child (Popen) or one adopted by pid."""

    def __init__(self, name: str, popen: subprocess.Popen | None = None,
                 pid: int | None = None, log: Path | None = None) -> None:
        self.name, self.popen, self.log_path = name, popen, log
        self.pid = popen.pid if popen is not None else pid

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _alive(self.pid)

    def signal(self, sig: int) -> None:
        if self.running():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> bool:
        """True once gone, False at the deadline."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def kill(self) -> None:
        """SIGKILL (a paused process too), and wait until it is gone."""
        self.signal(signal.SIGKILL)
        if not self.wait(10):
            raise AssertionError(f"{self.name} (pid {self.pid}) survived SIGKILL")

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if not self.wait(grace):
            self.kill()

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")


class Processes:
    """Every process a test starts; `close` kills what is left (teardown)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[Proc] = []
        self.cleanups: list[Callable[[], None]] = []

    def spawn(self, name: str, argv: Sequence[str], *, env: dict | None = None,
              cwd: Path | str | None = None, stdin=subprocess.DEVNULL,
              pass_fds: Sequence[int] = ()) -> Proc:
        log = self.directory / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(list(argv), stdin=stdin, stdout=out,
                                     stderr=subprocess.STDOUT, cwd=cwd,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1",
                                          "PYTHONDONTWRITEBYTECODE": "1", **(env or {})},
                                     pass_fds=tuple(pass_fds))
        proc = Proc(name, popen, log=log)
        self.procs.append(proc)
        return proc

    def adopt(self, name: str, pid: int, log: Path | None = None) -> Proc:
        proc = Proc(name, pid=pid, log=log)
        self.procs.append(proc)
        return proc

    def on_close(self, fn: Callable[[], None]) -> None:
        self.cleanups.append(fn)

    def close(self) -> None:
        errors = []
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as exc:      # keep cleaning up
                errors.append(exc)
        for proc in self.procs:
            proc.signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(10)
            if proc.popen is not None and proc.popen.stdin:
                proc.popen.stdin.close()
        if errors:
            raise errors[0]


# -- JRaft --------------------------------------------------------------------------------------

DM_RETRY = ("System is not ready", "System faulted, please retry")
_JRAFT_RECORD = re.compile(r"^(?:commit: (\d+)\t|PreCommit:|Got message |Rollback index |"
                           r"from snapshot: |Press Enter|Uncommitted Requests: |"
                           r"Pending Messages: |Committed Messages: )", re.M)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed by the peer")
        data += chunk
    return data


class JRaftNode:
    """One dmprinter node, started and restarted with the peer's run-node.sh."""

    def __init__(self, procs: Processes, node_id: int, directory: Path) -> None:
        self.procs, self.id, self.dir = procs, node_id, directory
        self.raft_port, self.client_port = free_port(), free_port()
        self.proc: Proc | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.raft_port}"

    def start(self, peers: str | None = None) -> "JRaftNode":
        """run-node.sh (returns once the client port accepts); `peers` only the first
        time (ID:RAFTPORT,...), later starts restart from the saved state."""
        if self.proc is not None and not self.proc.running():
            # killed: a zombie until PID 1 reaps it, which run-node.sh's `kill -0` would
            # take for a running node
            (self.dir / "node.pid").unlink(missing_ok=True)
        argv = ["bash", str(JRAFT / "run-node.sh"), str(self.id), str(self.dir),
                str(self.client_port)]
        done = subprocess.run(argv + ([peers] if peers else []), capture_output=True,
                              text=True, timeout=90, env={**os.environ, "JRAFT_WAIT": "60"})
        pid_file = self.dir / "node.pid"
        if pid_file.exists():
            self.proc = self.procs.adopt(f"jraft-{self.id}", int(pid_file.read_text()),
                                         self.dir / "stdout.log")
        assert done.returncode == 0, (f"run-node.sh {self.id} failed: {done.stdout}"
                                      f"{done.stderr}\n{self.stdout()[-2000:]}")
        return self

    def kill(self) -> None:
        self.proc.kill()

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()

    def stdout(self) -> str:
        path = self.dir / "stdout.log"
        return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""

    def commits(self) -> dict[int, str]:
        """index -> the committed message as dmprinter printed it ("commit: N<TAB>text")."""
        out = self.stdout()
        found: dict[int, str] = {}
        matches = list(_JRAFT_RECORD.finditer(out))
        for i, match in enumerate(matches):
            if match.group(1) is not None:
                end = matches[i + 1].start() if i + 1 < len(matches) else len(out)
                found[int(match.group(1))] = out[match.end():end].removesuffix("\n")
        return found

    def restored_lines(self) -> list[str]:
        """The "from snapshot:" lines: messages dmprinter took from an installed snapshot."""
        return [line[len("from snapshot: "):] for line in self.stdout().split("\n")
                if line.startswith("from snapshot: ")]

    def snapshots(self) -> list[tuple[int, int, Path]]:
        """(last index, last term, file) of dmprinter's snapshot files."""
        found = []
        for path in (self.dir / "snapshots").glob("*.s"):
            index, term = path.stem.split("-")
            found.append((int(index), int(term), path))
        return sorted(found)

    def request(self, body: str, timeout: float = 15.0) -> str:
        """One dmprinter client request (u32 LE length + UTF-8 body), its reply."""
        with socket.create_connection(("127.0.0.1", self.client_port), timeout=timeout) as s:
            data = body.encode()
            s.sendall(struct.pack("<i", len(data)) + data)
            (n,) = struct.unpack("<i", _recv_exact(s, 4))
            return _recv_exact(s, n).decode("utf-8", "replace")

    def write(self, text: str, timeout: float = 30.0) -> str:
        """Print `text` through this node (dmclient.py's protocol): the body "<uuid>:text",
        sent again with the same key while the node answers "not ready" / "faulted",
        until "Printed." (committed and applied here). Returns the body."""
        body = f"{uuid.uuid4()}:{text}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self.request(body, timeout=max(1.0, deadline - time.monotonic()))
            except OSError as exc:
                reply = f"({exc})"
            if reply in ("Printed.", "Already printed."):
                return body
            if time.monotonic() >= deadline:
                raise AssertionError(f"jraft node {self.id} answered {reply!r} to {body!r} "
                                     f"until the deadline ({timeout}s)")
            time.sleep(0.1)

    def index_of(self, text: str, timeout: float = 20.0) -> int:
        """The index at which this node committed the message `text` (exactly once),
        waiting up to `timeout` for dmprinter to print it: a write acknowledged by one
        node is printed by the others when they apply it, a little later."""
        deadline = time.monotonic() + timeout
        while True:
            hits = [i for i, m in self.commits().items() if m == text]
            if hits or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        assert len(hits) == 1, f"{text!r} committed at {hits} on jraft node {self.id}"
        return hits[0]


def jraft_client_request(endpoint: str, values: Sequence[bytes], timeout: float = 15.0):
    """A plain JRaft ClientRequest (type 5, no handshake) on a Raft port; its response."""
    from consensus.wire.jraft import JRaftDecoder, client_request
    host, port = endpoint.rsplit(":", 1)
    decoder = JRaftDecoder()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(client_request(list(values)))
        while True:
            data = s.recv(65536)
            if not data:
                raise EOFError(f"{endpoint} closed the connection without answering")
            messages = decoder.feed(data)
            if messages:
                return messages[0]


class FarmNode:
    """One garlicfarm node process on `--wire jraft`, on a socket bound here (handed over
    with --listen-fd: no port race, and a restart keeps the port)."""

    def __init__(self, procs: Processes, node_id: int, directory: Path, credentials: Path,
                 args: Sequence[str]) -> None:
        self.procs, self.id, self.dir = procs, node_id, directory
        self.credentials, self.args = credentials, list(args)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.sock.set_inheritable(True)
        procs.on_close(self.sock.close)
        self.peers: dict[int, str] = {}
        self.proc: Proc | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def start(self, peers: dict[int, str] | None = None) -> "FarmNode":
        if peers is not None:
            self.peers = dict(peers)
        argv = [sys.executable, "-m", "consensus.cli", "node", "--id", str(self.id),
                "--listen", self.endpoint, "--listen-fd", str(self.sock.fileno()),
                "--peers", ",".join(f"{i}={e}" for i, e in sorted(self.peers.items())),
                "--data-dir", str(self.dir), "--wire", "jraft", "--cluster", "farm",
                "--credentials", str(self.credentials), "--status-interval", "3600",
                *self.args]
        self.proc = self.procs.spawn(f"farm-{self.id}", argv, cwd=ROOT,
                                     pass_fds=(self.sock.fileno(),))
        return self

    def kill(self) -> None:
        self.proc.kill()

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()

    def log(self) -> str:
        return self.proc.log() if self.proc else ""


class MixedCluster:
    """JRaft dmprinter nodes and garlicfarm nodes in one Raft cluster (`--wire jraft`)."""

    def __init__(self, procs: Processes, directory: Path, jraft_ids: Sequence[int],
                 farm_ids: Sequence[int], farm_args: Sequence[str] = ()) -> None:
        self.procs = procs
        self.password = secrets.token_hex(12)
        credentials = directory / "credentials"
        credentials.write_text(f"farm:{self.password}\n")
        credentials.chmod(0o600)
        self.jraft = {i: JRaftNode(procs, i, directory / f"jraft-{i}") for i in jraft_ids}
        self.farm = {i: FarmNode(procs, i, directory / f"farm-{i}", credentials, farm_args)
                     for i in farm_ids}
        self._probe = None

    @property
    def endpoints(self) -> dict[int, str]:
        return {**{i: n.endpoint for i, n in self.jraft.items()},
                **{i: n.endpoint for i, n in self.farm.items()}}

    def start_jraft(self, *ids: int) -> None:
        spec = ",".join(f"{i}:{e.rsplit(':', 1)[1]}" for i, e in sorted(self.endpoints.items()))
        for i in ids:
            self.jraft[i].start(spec)

    def start_farm(self, *ids: int) -> None:
        for i in ids:
            self.farm[i].start({k: e for k, e in self.endpoints.items() if k != i})

    def client(self, **kw):
        from consensus.client.client import FarmClient
        options = dict(endpoints=[n.endpoint for n in self.farm.values()], cluster="farm",
                       username="farm", password=self.password, timeout=15.0)
        options.update(kw)
        return FarmClient(**options)

    @property
    def probe(self):
        """A client with a short timeout for polling members that may be down."""
        if self._probe is None:
            self._probe = self.client(timeout=2.0)
            self.procs.on_close(self._probe.close)
        return self._probe

    def ping(self, node_id: int) -> dict | None:
        """Our member's {node, role, leader, term}; None while it does not answer."""
        from consensus.common.errors import FarmError
        if not self.farm[node_id].running():
            return None
        try:
            return self.probe.ping(self.farm[node_id].endpoint)
        except FarmError:
            return None

    def commit_of(self, node_id: int) -> int:
        """Our member's commit (and applied) index; -1 while it does not answer."""
        from consensus.common.errors import FarmError
        if not self.farm[node_id].running():
            return -1
        try:
            return self.probe.log_bounds(self.farm[node_id].endpoint)[1]
        except FarmError:
            return -1

    def describe(self) -> str:
        parts = []
        for i, node in self.farm.items():
            parts.append(f"farm {i} ({'running' if node.running() else 'gone'}):\n"
                         + "\n".join(node.log().splitlines()[-8:]))
        for i, node in self.jraft.items():
            parts.append(f"jraft {i} ({'running' if node.running() else 'gone'}): "
                         f"last commits {sorted(node.commits())[-3:]}")
        return "\n".join(parts)


# -- Dafka --------------------------------------------------------------------------------------

C_BEACON_MS, C_BEACON_TIMEOUT_MS, C_HEAD_MS = 200, 2000, 200


@dataclass
class CLines:
    """What a `dafka_console_consumer` printed: (topic, partition, content) per record."""
    proc: Proc

    def records(self) -> list[tuple[str, str, str]]:
        out = []
        for line in self.proc.log().split("\n"):
            parts = line.split(" ", 2)
            if len(parts) == 3 and re.fullmatch(r"[0-9A-F]{32}", parts[1]):
                out.append((parts[0], parts[1], parts[2]))
        return out


class DafkaPeers:
    """zeromq/dafka's C tools on 127.0.0.1 (configs written with the peer's mkcfg.sh)."""

    def __init__(self, procs: Processes, directory: Path) -> None:
        self.procs, self.dir = procs, directory
        self.count = 0

    def _name(self, role: str) -> str:
        self.count += 1
        return f"c-{role}-{self.count}"

    def tower(self) -> tuple[str, str]:
        """A C tower (dafka_towerd); its (XSUB, XPUB) endpoints."""
        for _ in range(5):
            sub, pub = free_port(), free_port()
            proc = self.procs.spawn(self._name("tower"), [
                str(DAFKA / "bin" / "dafka_towerd"), "--sub", f"tcp://127.0.0.1:{sub}",
                "--pub", f"tcp://127.0.0.1:{pub}"])
            wait_until(lambda: _listening(sub) and _listening(pub) or not proc.running(),
                       15, message="the C tower to bind")
            if proc.running():
                return f"tcp://127.0.0.1:{sub}", f"tcp://127.0.0.1:{pub}"
        raise AssertionError(f"the C tower did not start: {proc.log()}")

    def config(self, towers: tuple[str, str], store_db: Path | None = None) -> Path:
        """A node config from mkcfg.sh (beacon sub/pub and address 127.0.0.1), with fast
        beacons and heads, and consumers starting from the earliest offset."""
        sub, pub = (t.rsplit(":", 1)[1] for t in towers)
        argv = ["sh", str(DAFKA / "mkcfg.sh"), sub, pub] + ([str(store_db)] if store_db else [])
        text = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert "    address = 127.0.0.1" in text, text
        text = text.replace("beacon\n", f"beacon\n    interval = {C_BEACON_MS}\n"
                            f"    timeout = {C_BEACON_TIMEOUT_MS}\n", 1)
        text += (f"producer\n    head_interval = {C_HEAD_MS}\n"
                 "consumer\n    offset\n        reset = earliest\n")
        self.count += 1
        path = self.dir / f"node-{self.count}.cfg"
        path.write_text(text)
        return path

    def store(self, towers: tuple[str, str], db: Path) -> Proc:
        return self.procs.spawn(self._name("store"), [
            str(DAFKA / "bin" / "dafka_stored"), "-c", str(self.config(towers, db))],
            cwd=self.dir)

    def consumer(self, towers: tuple[str, str], topic: str) -> CLines:
        """dafka_console_consumer TOPIC -c CFG --from-beginning, line-buffered (stdbuf)."""
        proc = self.procs.spawn(self._name("consumer"), [
            "stdbuf", "-oL", str(DAFKA / "bin" / "dafka_console_consumer"), topic,
            "-c", str(self.config(towers)), "--from-beginning"], cwd=self.dir)
        return CLines(proc)

    def producer(self, towers: tuple[str, str], topic: str) -> Proc:
        """dafka_console_producer TOPIC -c CFG; write lines to proc.popen.stdin."""
        return self.procs.spawn(self._name("producer"), [
            str(DAFKA / "bin" / "dafka_console_producer"), topic,
            "-c", str(self.config(towers))], stdin=subprocess.PIPE, cwd=self.dir)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def our_dafka_config(towers: tuple[str, str], **changes):
    """Our nodes' options next to C nodes: the towers, beacon/address 127.0.0.1 (the C
    tower's quirk), timers like the C nodes' configs above, earliest offsets."""
    from connectors.dafka import DafkaConfig
    config = DafkaConfig(tower_sub=(towers[0],), tower_pub=(towers[1],),
                         beacon_interval=C_BEACON_MS / 1000,
                         beacon_timeout=C_BEACON_TIMEOUT_MS / 1000, beacon_host="127.0.0.1",
                         bind="tcp://127.0.0.1:*", head_interval=C_HEAD_MS / 1000,
                         offset_reset="earliest", tower_wait=15.0)
    return replace(config, **changes).validate()


# -- zguide Clone -----------------------------------------------------------------------------

class Zguide:
    """The zguide's Python Clone examples, run as they are (this interpreter has pyzmq and
    tornado), from a scratch working directory."""

    def __init__(self, procs: Processes, directory: Path) -> None:
        self.procs, self.dir = procs, directory
        self.count = 0

    def run(self, script: str, *args: str, env: dict | None = None,
            stdin=subprocess.DEVNULL) -> Proc:
        """`script` (a file of the peer's folder, or a path) with ZGUIDE on sys.path."""
        self.count += 1
        name = f"zguide-{Path(script).stem}-{self.count}"
        return self.procs.spawn(name, [sys.executable, "-u", str(ZGUIDE / script), *args],
                                env={"PYTHONPATH": str(ZGUIDE), **(env or {})}, cwd=self.dir,
                                stdin=stdin)

