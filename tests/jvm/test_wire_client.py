"""The JVM reader's client of the Garlic Farm wire (jvm/.../spark/wire), driven through its
diagnostic main (CallMain) against real nodes: its answers must equal the Python client's,
and every failure must say what went wrong and where. A fake member (the Python handshake
receiver, then frames chosen by the test) checks that sizes and types from the wire are
validated before anything is allocated."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
import time

import msgpack
import pytest

pytest.importorskip("pyspark")
from pyspark_farm import LocalFarm  # noqa: E402

CALL_TIMEOUT = 90       # seconds a CallMain run may take (JVM start included)


def _classpath(jar: str) -> str:
    import pyspark
    return jar + os.pathsep + os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")


@pytest.fixture(scope="module")
def call_main(reader_jar):
    """run(endpoint, op, args, options) -> CompletedProcess of CallMain."""
    classpath = _classpath(reader_jar)

    def run(endpoint: str, op: str, args: dict, options: dict) -> subprocess.CompletedProcess:
        env = dict(os.environ, GARLICFARM_OPTIONS=json.dumps(options))
        return subprocess.run(["java", "-cp", classpath, "garlicfarm.spark.wire.CallMain", endpoint,
                               op, json.dumps(args)], env=env, capture_output=True, text=True,
                              timeout=CALL_TIMEOUT)
    return run


def _ok(process: subprocess.CompletedProcess) -> dict:
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout)


def _failed(process: subprocess.CompletedProcess) -> str:
    assert process.returncode == 2, (process.stdout, process.stderr)
    return process.stderr


def _as_json(value):
    """A Python answer in CallMain's JSON shape (bytes as {"hex"}, map keys as text)."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


@pytest.fixture(scope="module")
def farm():
    with LocalFarm(nodes=1) as farm:
        client = farm.client()
        index, _term = client.append([b"a", b"bc"])
        endpoint = farm.options["endpoints"].split(",")[0]
        yield farm, client, endpoint, index
        client.close()


def test_ping_log_bounds_and_welcome_equal_the_python_client(farm, call_main):
    local, client, endpoint, _ = farm
    answer = _ok(call_main(endpoint, "ping", {}, local.options))
    assert answer["result"] == _as_json(client.ping(endpoint))
    assert answer["welcome"] == {"node_id": 1, "cluster": "farm", "leader_id": 1, "role": "leader",
                                 "members": {"1": endpoint}}
    before = client.log_bounds(endpoint)
    bounds = _ok(call_main("tcp://" + endpoint, "log_bounds", {}, local.options))
    after = client.log_bounds(endpoint)
    assert bounds["endpoint"] == endpoint
    first, commit, snapshot = bounds["result"]       # the commit may move on meanwhile
    assert (first, snapshot) == (before[0], before[2]) == (after[0], after[2])
    assert before[1] <= commit <= after[1]


def test_journal_calls_equal_the_python_clients_raw_answers(farm, call_main):
    local, client, endpoint, index = farm
    for op, args in (("read_journal", {"start": index, "stop": index + 1, "max_bytes": 1 << 20}),
                     ("entry_rows", {"start": index, "stop": index + 1})):
        java = _ok(call_main(endpoint, op, args, local.options))["result"]
        python = client._call(op, dict(args), leader=False, endpoint=endpoint)
        assert set(java) == set(python), op
        for field in python:
            assert java[field] == _as_json(python[field]), (op, field)
        if op == "read_journal":
            assert java["data"] == {"hex": b"abc".hex()}
            assert java["sizes"] == {"hex": struct.pack("<II", 1, 2).hex()}
        else:
            assert java["rows"] == {"hex": struct.pack("<I", 2).hex()}


def test_read_entries_without_payloads(farm, call_main):
    local, client, endpoint, index = farm
    args = {"start": 1, "stop": index + 1, "max_bytes": 1 << 20, "payloads": False}
    java = _ok(call_main(endpoint, "read_entries", args, local.options))["result"]
    python = client._call("read_entries", dict(args), leader=False, endpoint=endpoint)
    assert java == _as_json(python)
    assert [h[0] for h in java["headers"]] == list(range(1, index + 1))
    assert java["headers"][-1][2] == "journal" and "entries" not in java


def test_an_error_reply_keeps_its_code_and_message(farm, call_main):
    local, _, endpoint, _ = farm
    stderr = _failed(call_main(endpoint, "read_journal", {"start": 1000, "stop": 1001, "max_bytes": 1},
                               local.options))
    assert "read_journal at " + endpoint in stderr and "error code 4 INDEX_OVERFLOW" in stderr


def test_wrong_password_names_authentication_and_the_options(farm, call_main):
    local, _, endpoint, _ = farm
    stderr = _failed(call_main(endpoint, "ping", {}, dict(local.options, password="not-it")))
    assert f"authentication refused by {endpoint} for user 'spark' in cluster 'farm'" in stderr
    assert "username/password options" in stderr and "error code 7 AUTHENTICATION" in stderr
    assert "not-it" not in stderr


def test_wrong_cluster_names_the_cluster_option(farm, call_main):
    local, _, endpoint, _ = farm
    stderr = _failed(call_main(endpoint, "ping", {}, dict(local.options, cluster="elsewhere")))
    assert "no Garlic Farm cluster 'elsewhere'" in stderr and "check the cluster option" in stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_unavailable(call_main):
    endpoint = f"127.0.0.1:{_closed_port()}"
    stderr = _failed(call_main(endpoint, "ping", {}, {"username": "u", "password": "p", "timeout": "2"}))
    assert f"cannot connect to {endpoint}" in stderr and "endpoints option" in stderr
    assert "error code 3 UNAVAILABLE (worth trying another member)" in stderr


def test_a_member_that_never_answers_times_out_within_the_timeout(call_main):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)            # connects succeed; nothing is ever read or written
        endpoint = "127.0.0.1:%d" % silent.getsockname()[1]
        options = {"username": "u", "password": "p", "timeout": "1.5"}
        quick = time.monotonic()
        call_main(f"127.0.0.1:{_closed_port()}", "ping", {}, options)    # the JVM's own start
        baseline = time.monotonic() - quick
        started = time.monotonic()
        stderr = _failed(call_main(endpoint, "ping", {}, options))
        elapsed = time.monotonic() - started
    assert "timed out" in stderr and endpoint in stderr and "UNAVAILABLE" in stderr
    assert 1.4 < elapsed < baseline + 1.5 + 3.0


def test_unsupported_and_bad_options_are_named(call_main):
    base = {"username": "u", "password": "p"}
    stderr = _failed(call_main("127.0.0.1:1", "ping", {}, dict(base, **{"tls.cert": "c.pem"})))
    assert "tls.cert" in stderr and 'format("garlicfarm")' in stderr
    stderr = _failed(call_main("127.0.0.1:1", "ping", {}, dict(base, timeout="soon")))
    assert "timeout: 'soon'" in stderr
    stderr = _failed(call_main("127.0.0.1:1", "ping", {}, dict(base, **{"tls.ca": "/no/such.pem"})))
    assert "tls.ca: cannot read the PEM file '/no/such.pem'" in stderr


@pytest.fixture(scope="module")
def tls_farm():
    with LocalFarm(nodes=1, tls=True) as farm:
        yield farm, farm.options["endpoints"].split(",")[0]


def test_tls_with_the_ca_as_pem_text_or_file(tls_farm, call_main, tmp_path):
    local, endpoint = tls_farm
    assert local.options["tls.ca"].startswith("-----BEGIN ")
    assert _ok(call_main(endpoint, "ping", {}, local.options))["result"]["node"] == 1
    ca = tmp_path / "ca.pem"
    ca.write_text(local.options["tls.ca"])
    assert _ok(call_main(endpoint, "ping", {}, dict(local.options, **{"tls.ca": str(ca)})))["welcome"]


def test_tls_without_the_ca_fails_clearly(tls_farm, call_main):
    local, endpoint = tls_farm
    options = {k: v for k, v in local.options.items() if k != "tls.ca"}
    stderr = _failed(call_main(endpoint, "ping", {}, options))
    assert "requires TLS (give the tls.ca option)" in stderr and endpoint in stderr


def test_tls_with_another_ca_fails_verification(tls_farm, call_main, tmp_path):
    from pyspark_farm.farm_certificates import make_farm_certificates
    local, endpoint = tls_farm
    other = make_farm_certificates(tmp_path, ["127.0.0.1"], "farm")
    stderr = _failed(call_main(endpoint, "ping", {}, dict(local.options, **{"tls.ca": other.ca_pem})))
    assert "did not verify against tls.ca" in stderr and "error code 8 PROTOCOL" in stderr


class _FakeMember:
    """Accepts the handshake for u/p like a member (offering `algorithms`), then answers the
    Hello with `frames`."""

    def __init__(self, frames: bytes, algorithms=None) -> None:
        from consensus.wire.digest import DigestAlgorithm
        from consensus.wire.handshake import HandshakeReceiver, NonceStore
        self.frames = frames
        nonces = NonceStore(os.urandom)
        self.receiver = lambda: HandshakeReceiver(
            credentials=lambda u: "p" if u == "u" else None, nonces=nonces,
            algorithms=algorithms or (DigestAlgorithm.SHA_256, DigestAlgorithm.MD5))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        from consensus.wire.handshake import Accepted, NeedData
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                receiver = self.receiver()
                while isinstance(event := receiver.next_event(time.monotonic()), NeedData):
                    receiver.receive_data(conn.recv(65536))
                conn.sendall(event.data)
                if isinstance(event, Accepted):
                    conn.recv(65536)        # the Hello
                    conn.sendall(self.frames)
                    conn.recv(65536)        # the Call
                    conn.recv(1)            # until the client closes

    def call(self, call_main) -> subprocess.CompletedProcess:
        try:
            return call_main(self.endpoint, "ping", {},
                             {"username": "u", "password": "p", "timeout": "5"})
        finally:
            self.sock.close()


def _frame(message_type: int, fields=None, *, raw: bytes | None = None,
           size: int | None = None) -> bytes:
    body = msgpack.packb(fields, use_bin_type=True) if raw is None else raw
    return struct.pack(">Biiqi", message_type, 0, 0, 0, len(body) if size is None else size) + body


WELCOME = _frame(0x31, [7, "farm", None, "follower", b'{"addresses":{"7":"h:1","8":"h:2"}}'])


@pytest.mark.parametrize("frames, expected", [
    (_frame(0x31, raw=b"", size=(256 << 20) + 1), "bodySize 268435457 (the limit is 268435456)"),
    (_frame(0x31, raw=b"", size=-1), "bodySize -1"),
    (_frame(0x31, raw=b"\xdb\x7f\xff\xff\xff"), "longer than the 0 bytes left"),   # str32 of 2 GiB
    (_frame(0x31, [1, "farm", None, "leader"]), "the frame has 4 fields, not 5"),
    (_frame(0x33, [1, 0, None, "", {}]), "answered Hello with a frame of type 0x33"),
    (_frame(4, raw=b""), "sent a frame of type 4"),
    (WELCOME + _frame(0x33, [9, 0, None, "", {}]), "answered call 1 (ping) with the Reply of call 9"),
    (WELCOME + _frame(0x34, [b"r", 1, 1, 0, None, "", {}]), "answered ping with a frame of type 0x34"),
    (WELCOME + _frame(0x33, [1, 0, [2 ** 64 - 1], "", {}]), "whose body is bad: not msgpack"),
])
def test_sizes_and_types_from_the_wire_are_checked(call_main, frames, expected):
    stderr = _failed(_FakeMember(frames).call(call_main))
    assert expected in stderr and "error code 8 PROTOCOL" in stderr


def test_md5_only_member_events_skipped_and_values_decoded(call_main):
    from consensus.wire.digest import DigestAlgorithm
    result = {"n": -5, "f": 1.5, "b": b"\x00\xff", "t": True, "nil": None, "l": [1, "x"], 3: "k"}
    frames = (WELCOME + _frame(0x35, ["state-changed", 7, {"applied": 3}])
              + _frame(0x33, [1, 0, result, "", {}]))
    answer = _ok(_FakeMember(frames, algorithms=(DigestAlgorithm.MD5,)).call(call_main))
    assert answer["welcome"] == {"node_id": 7, "cluster": "farm", "leader_id": None,
                                 "role": "follower", "members": {"7": "h:1", "8": "h:2"}}
    assert answer["result"] == _as_json(result)
