"""The byte vectors and protocol constants the JVM reader's codec is held to
(tests/jvm/wire_vectors.json, read by jvm/src/test/.../FramesTest.java): this test keeps
the file equal to what the Python side encodes and declares, so that a change on either
side fails a test until both agree. After a deliberate change of the wire, rewrite the
file with ``python -m tests.jvm.test_wire_vectors`` and make the Java side pass."""
from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

from consensus.common.errors import ErrorCode
from consensus.wire import extensions as ext
from consensus.wire.jraft import decode

FILE = Path(__file__).with_name("wire_vectors.json")

#: frames a client sends (the Java codec must produce these bytes) and receives (it must
#: decode them to these fields)
SENT = (
    ext.Hello(0, 0, 0, bytes(range(16)), 1),
    ext.Call(0, 0, 0, 1, "ping", {}),
    ext.Call(0, 0, 0, 7, "read_journal", {"start": 3, "stop": 2 ** 40, "max_bytes": 8 << 20}),
    ext.Call(0, 0, 0, 2 ** 31, "read_entries",
             {"payloads": False, "request_id": b"\x01\x02", "records": [b"ab", b""],
              "name": "x" * 40, "ratio": 1.5, "none": None,
              "negative": [-1, -33, -200, -40000, -(2 ** 40)], "sizes": [127, 128, 255, 256,
                                                                         65535, 65536]}),
    ext.GroupSelect(0, 0, 0, 2),            # a link of partition 2, before its Hello
    ext.GroupSelect(0, 0, 0, 2 ** 31 - 1),
)
RECEIVED = (
    ext.Welcome(1, 0, 3, 1, "farm", 2, "follower",
                b'{"addresses": {"1": "h:1", "2": "h:2"}, "voters": [1, 2]}'),
    ext.Welcome(1, 0, 0, 7, "farm", None, "candidate", b""),
    ext.Reply(1, 0, 3, 7, 0, {"n": -5, "f": 1.5, "b": b"\x00\xff", "t": True, "nil": None,
                              "l": [1, "x"], "big": 2 ** 63 - 1, "s": "\u00e9" * 20},
              "", {}),
    ext.Reply(1, 0, 3, 9, int(ErrorCode.INDEX_OVERFLOW), None, "index 1000 is beyond 12",
              {"last": 12}),
    ext.EventMessage(1, 0, 3, "state-changed", 7, {"applied": 3}),
    ext.GroupSelect(3, 0, 0, 2),            # node 3 answers in partition 2
)


def _json(value):
    if isinstance(value, bytes):
        return {"$hex": value.hex()}
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


def _vector(message: ext.ExtensionMessage, direction: str) -> dict:
    names = [f.name for f in fields(message)][3:]
    return {"name": message.NAME, "direction": direction, "type": int(message.TYPE),
            "fields": [_json(getattr(message, n)) for n in names],
            "hex": ext.encode(message).hex()}


def build() -> dict:
    """The file's content, from the Python side as it is now."""
    shape = [int(codec.type_byte) for codec in ext.EXTENSION_CODECS]
    return {
        "about": "written by tests/jvm/test_wire_vectors.py from consensus/runtime "
                 "(extensions.py, errors.py); read by the JVM reader's JUnit tests",
        "error_codes": {code.name: int(code) for code in ErrorCode},
        "frame_types": {t.name: int(t) for t in ext.ExtType},
        "extension_shape": {"first": min(shape), "last": max(shape), "head": ext._HEAD.size},
        "frames": [_vector(m, "sent") for m in SENT] + [_vector(m, "received") for m in RECEIVED],
    }


def test_the_file_holds_what_python_encodes_and_declares():
    assert json.loads(FILE.read_text()) == build(), \
        "tests/jvm/wire_vectors.json is stale: python -m tests.jvm.test_wire_vectors rewrites it"


def test_every_vector_decodes_back_to_its_message():
    for message in SENT + RECEIVED:
        assert decode(ext.encode(message), registry=ext.GARLICFARM_REGISTRY) == message


if __name__ == "__main__":
    FILE.write_text(json.dumps(build(), indent=1) + "\n")
    print(FILE, file=sys.stderr)
