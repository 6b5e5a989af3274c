"""`garlicfarm decode` / `garlicfarm encode`: the protocol inspector.

For debugging a peer: paste the bytes you captured, get one JSON object per message
(``{"protocol": ..., "message": NAME, ...fields}``); edit the JSON, encode it back to hex.
For every valid message ``encode(decode(x)) == x``. Input at fault gives exit status 1 and
one line that names the field (``garlicfarm decode: marker: crc: checksum mismatch
(expected 7f4216f9, got 7f4216f8) at byte 45``), never a traceback.

Framing follows the transport. TCP protocols (``garlicfarm`` = JRaft binary, ``marker``)
are byte streams: the HEX arguments (or all of stdin) are concatenated and may hold
several messages. ZeroMQ protocols (``chp``, ``dafka``) are multi-frame messages: each HEX
argument is one frame of one message; on stdin each line is one message, its frames
separated by spaces. ``""`` stands for an empty frame, which is how `encode` prints one,
so its output can be pasted back into a shell or piped into `decode`.

A Garlic Farm capture may start with the HTTP handshake (SPECS §1): the HTTP messages
at its start decode (with h11) to ``HttpRequest`` / ``HttpResponse`` objects, and the
JRaft binary messages after them as usual, so one side of a whole connection reads as one
transcript -- and encodes back to the same bytes.

The codec modules are imported lazily (only the protocol asked for), and each one exposes
``to_json`` / ``from_json`` plus either a stream decoder class with ``feed`` (TCP) or
``decode(frames)`` / ``encode(msg) -> list[bytes]`` (ZeroMQ), as docs/development.md says.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterator, TextIO

from consensus.wire.errors import InvalidField, ProtocolError, Truncated

EXIT_INVALID_INPUT = 1
EXIT_INTERNAL_ERROR = 3


@dataclass(frozen=True)
class Codec:
    """Where a protocol's codec lives and how its messages are framed."""
    name: str
    module_name: str
    stream_decoder: str | None   # class with feed() for TCP protocols; None for ZeroMQ
    transport: str
    channels: str | None = None  # enum of the sockets a message may come from (decode hint)
    http_head: bool = False      # a connection may start with HTTP messages (handshake)

    @property
    def framed(self) -> bool:
        """ZeroMQ: a message is a list of frames (not a slice of a byte stream)."""
        return self.stream_decoder is None

    def module(self) -> ModuleType:
        try:
            return importlib.import_module(self.module_name)
        except ImportError as error:
            raise InputError(f"{self.name}: the codec ({self.module_name}) cannot be "
                             f"loaded: {error}") from None


PROTOCOLS: dict[str, Codec] = {codec.name: codec for codec in (
    Codec("garlicfarm", "consensus.wire.extensions", "GarlicFarmDecoder",
          "handshake + JRaft binary and garlicfarm's extension frames over TCP",
          http_head=True),
    Codec("jraft", "consensus.wire.jraft", "JRaftDecoder", "JRaft binary over TCP (raw)"),
    Codec("marker", "consensus.wire.marker", "MarkerDecoder", "TaskFlux marker bytes over TCP"),
    Codec("chp", "connectors.chp.proto", None, "CHP kvmsg over ZeroMQ", "Channel"),
    Codec("dafka", "connectors.dafka.proto", None, "Dafka over ZeroMQ"),
)}


class InputError(ValueError):
    """Input the inspector cannot use (bad hex, bad JSON, unknown protocol...)."""


# ------------------------------------------------------------------------------ hex

_HEX = re.compile(r"[0-9a-fA-F]*")
_EMPTY_FRAME = '""'


def parse_hex(text: str, where: str) -> bytes:
    """Bytes from hex written with or without spaces, colons, commas and ``0x`` prefixes."""
    groups = [g[2:] if g[:2] in ("0x", "0X") else g for g in re.split(r"[\s:,]+", text)]
    digits = "".join(groups)
    if digits == _EMPTY_FRAME:
        return b""
    bad = _HEX.match(digits).end()  # type: ignore[union-attr]
    if bad < len(digits):
        raise InputError(f"{where}: not hex: {digits[bad]!r} at digit {bad + 1} "
                         "(write bytes as hex digits, optionally with spaces, colons or 0x)")
    if len(digits) % 2:
        raise InputError(f"{where}: odd number of hex digits ({len(digits)}): "
                         "a byte is two digits")
    return bytes.fromhex(digits)


def format_frames(frames: list[bytes]) -> str:
    """Frames as `encode` prints them: hex, separated by spaces, ``""`` for an empty one."""
    return " ".join(frame.hex() or _EMPTY_FRAME for frame in frames)


# --------------------------------------------------------------------- decode / encode

@dataclass
class Decoded:
    """What one decode run found: messages (as JSON objects), errors, non-canonical notes."""
    messages: list[dict[str, Any]]
    errors: list[str]
    notes: list[str]


def decode_stream(codec: Codec, data: bytes) -> Decoded:
    """All messages in a TCP byte stream; stops at the first error the stream cannot pass
    (a corrupt packet the protocol can skip is reported and decoding goes on)."""
    module = codec.module()
    decoder = getattr(module, codec.stream_decoder)()
    result = Decoded([], [], [])
    events, decoded, fatal = [], [], None
    http: list[dict[str, Any]] = []
    try:
        http, binary = split_http_head(data) if codec.http_head else ([], data)
        result.messages += [{"protocol": codec.name, **message} for message in http]
        events = decoder.feed(binary)
        _end_of_stream(decoder, codec)
    except ProtocolError as error:
        fatal = str(error)
    for event in events:
        skipped = getattr(event, "error", None)
        if isinstance(skipped, ProtocolError):   # a packet the stream could skip (marker)
            result.errors.append(str(skipped))
            continue
        decoded.append(event)
        result.messages.append(_json_of(codec, module, event))
    if fatal is not None:
        result.errors.append(fatal)
    if (decoded or http) and not result.errors:
        again = b"".join([*map(http_bytes, http), *map(module.encode, decoded)])
        if again != data:
            at = next((i for i, (a, b) in enumerate(zip(data, again)) if a != b),
                      min(len(data), len(again)))
            result.notes.append(_non_canonical(codec, f"byte {at}"))
    return result


def _end_of_stream(decoder: Any, codec: Codec) -> None:
    """Tell the decoder the input is over; bytes left in it are a truncated message."""
    if hasattr(decoder, "eof"):
        decoder.eof()
    elif getattr(decoder, "buffered", 0):
        raise Truncated("message", f"the input ends inside a message ({decoder.buffered} "
                        "bytes left over)", protocol=codec.name)


def decode_frames(codec: Codec, frames: list[bytes], channel: str | None = None) -> Decoded:
    """One ZeroMQ message from its frames; `channel` names the socket they came from
    (CHP: the same five frames are a KVSET, a KVPUB or a KVSYNC depending on it)."""
    module = codec.module()
    hint = {} if channel is None else {"channel": _channel(codec, module, channel)}
    try:
        message = module.decode(frames, **hint)
    except ProtocolError as error:
        return Decoded([], [str(error)], [])
    result = Decoded([_json_of(codec, module, message)], [], [])
    again = module.encode(message)
    if again != list(frames):
        index = next((i for i, (a, b) in enumerate(zip(frames, again)) if a != b),
                     min(len(frames), len(again)))
        where = f"frame {index}" if index < min(len(frames), len(again)) else \
            f"the frame count ({len(again)}, not {len(frames)})"
        result.notes.append(_non_canonical(codec, where))
    return result


def _channel(codec: Codec, module: ModuleType, name: str) -> Any:
    if codec.channels is None:
        raise InputError(f"--channel: the {codec.name} protocol has no channels "
                         f"(only {', '.join(c.name for c in PROTOCOLS.values() if c.channels)}"
                         " has)")
    channels = getattr(module, codec.channels)
    try:
        return channels(name)
    except ValueError:
        raise InputError(f"--channel {name!r} is unknown for {codec.name}: choose one of "
                         + ", ".join(c.value for c in channels)) from None


def _json_of(codec: Codec, module: ModuleType, message: Any) -> dict[str, Any]:
    return {"protocol": codec.name, **module.to_json(message)}


def _non_canonical(codec: Codec, where: str) -> str:
    return (f"note: {codec.name}: accepted (as a lenient peer would), but the input is not "
            f"in canonical form: encoding the message differs at {where}")


def encode_json(obj: Any, protocol: str | None, where: str) -> tuple[Codec, list[bytes]]:
    """The wire bytes of one JSON message: one element for TCP, the frames for ZeroMQ.
    A ``"protocol"`` key (as `decode` writes it) may stand in for `protocol`."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object like "
                         '{"message": ..., ...fields}, not ' + type(obj).__name__)
    fields = dict(obj)
    named = fields.pop("protocol", None)
    if protocol and named and named != protocol:
        raise InputError(f'{where}: protocol: the JSON says {named!r} but --protocol is '
                         f"{protocol!r}")
    codec = codec_named(protocol or named, "--protocol (or a \"protocol\" key)")
    if codec.http_head and fields.get("message") in _HTTP_MESSAGES:
        return codec, [http_bytes(fields)]
    module = codec.module()
    message = module.from_json(fields)
    wire = module.encode(message)
    return codec, (list(wire) if codec.framed else [wire])


# ------------------------------------------- the HTTP messages that open a Garlic Farm link

_HTTP_MESSAGES = ("HttpRequest", "HttpResponse")
_REQUEST_LINE = re.compile(rb"[A-Z]+ /")
_HEAD_END = b"\r\n\r\n"


def split_http_head(data: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The HTTP messages a Garlic Farm connection starts with (the handshake: requests on
    the initiator's side, responses on the receiver's), as JSON objects, and the binary
    JRaft bytes after them. h11 parses each message head; bodies follow Content-Length."""
    messages = []
    while data.startswith(b"HTTP/") or _REQUEST_LINE.match(data):
        end = data.find(_HEAD_END)
        if end < 0:
            raise Truncated("http", "the input ends inside an HTTP head (no blank line)",
                            protocol="handshake")
        head, data = data[:end + len(_HEAD_END)], data[end + len(_HEAD_END):]
        message = _parse_http_head(head)
        length = next((int(v) for n, v in message["headers"]
                       if n.lower() == "content-length" and v.isdigit()), 0)
        if len(data) < length:
            raise Truncated("http.body", f"Content-Length is {length} but {len(data)} bytes "
                            "follow the head", protocol="handshake")
        if length:
            message["body"], data = data[:length].hex(), data[length:]
        messages.append(message)
    return messages, data


def _parse_http_head(head: bytes) -> dict[str, Any]:
    import h11   # only when a transcript has HTTP in it
    if head.startswith(b"HTTP/"):
        # h11 reads a response only after a request was sent: send one that allows a 101.
        connection = h11.Connection(h11.CLIENT)
        connection.send(h11.Request(method="GET", target="/", headers=[
            ("Host", "peer"), ("Connection", "Upgrade"), ("Upgrade", "websocket")]))
    else:
        connection = h11.Connection(h11.SERVER)
    connection.receive_data(head)
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as error:
        raise InvalidField("http", f"not a valid HTTP/1.1 head: {error}",
                           protocol="handshake") from None
    headers = [[n.decode("latin-1"), v.decode("latin-1")]
               for n, v in event.headers.raw_items()]
    version = event.http_version.decode()
    if isinstance(event, h11.Request):
        return {"message": "HttpRequest", "method": event.method.decode(),
                "target": event.target.decode("latin-1"), "version": version,
                "headers": headers}
    return {"message": "HttpResponse", "status": event.status_code,
            "reason": event.reason.decode("latin-1"), "version": version, "headers": headers}


def http_bytes(obj: dict[str, Any]) -> bytes:
    """The bytes of an HttpRequest / HttpResponse JSON object (``Name: value`` lines)."""
    request = obj.get("message") == "HttpRequest"
    keys = (("method", "target") if request else ("status", "reason")) + ("version", "headers")
    for key in sorted(set(obj) - set(keys) - {"message", "body"}):
        raise InvalidField(key, f"unknown key; expected {', '.join(keys)}, body",
                           protocol="handshake")
    for key in keys:
        if key not in obj:
            raise InvalidField(key, "missing", protocol="handshake")
    headers = obj["headers"]
    if not (isinstance(headers, list) and all(
            isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h)
            for h in headers)):
        raise InvalidField("headers", 'must be a list of ["Name", "value"] pairs',
                           protocol="handshake")
    if request:
        start = f"{obj['method']} {obj['target']} HTTP/{obj['version']}"
    else:
        start = f"HTTP/{obj['version']} {obj['status']} {obj['reason']}"
    head = "".join([start + "\r\n", *(f"{n}: {v}\r\n" for n, v in headers), "\r\n"])
    body = obj.get("body", "")
    try:
        return head.encode("latin-1") + bytes.fromhex(body)
    except (UnicodeEncodeError, ValueError, TypeError) as error:
        raise InvalidField("headers" if isinstance(error, UnicodeEncodeError) else "body",
                           f"cannot be written: {error}", protocol="handshake") from None


def codec_named(name: Any, option: str = "--protocol") -> Codec:
    if name not in PROTOCOLS:
        shown = "is missing" if name is None else f"{name!r} is unknown"
        raise InputError(f"{option} {shown}: choose one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


# ------------------------------------------------------------------------------ CLI

_USAGE = {
    "decode": ("HEX", "Decode wire bytes (hex) to one JSON object per message.",
               "TCP protocols: the HEX arguments are one byte stream (several messages "
               "allowed).\nZeroMQ protocols: each HEX argument is one frame of one message; "
               'use "" for an empty frame.\nWithout HEX, read stdin (ZeroMQ: one message per '
               "line, frames separated by spaces).\nHex may contain spaces, colons and 0x. "
               "garlicfarm: the bytes may start with the HTTP handshake."
               "\n\nexample: garlicfarm decode --protocol marker 63 01 4ac9a203"),
    "encode": ("JSON", "Encode JSON messages (as `garlicfarm decode` prints them) to hex.",
               "Prints one line per message: hex; for ZeroMQ protocols the frames separated "
               'by spaces ("" = empty frame).\nWithout JSON, read JSON objects from stdin '
               "(so `decode | encode` round-trips).\n\nexample: garlicfarm encode "
               '--protocol marker \'{"message": "ConnectResponse", "success": true}\''),
}


def _parser(command: str) -> argparse.ArgumentParser:
    protocols = ", ".join(f"{c.name} ({c.transport})" for c in PROTOCOLS.values())
    positional, description, epilog = _USAGE[command]
    parser = argparse.ArgumentParser(prog=f"garlicfarm {command}", description=description,
                                     epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(positional.lower(), nargs="*", metavar=positional)
    parser.add_argument("--protocol", "-p", choices=list(PROTOCOLS),
                        required=command == "decode",
                        help=f"one of: {protocols}" + (
                            "; optional when the JSON has a \"protocol\" key"
                            if command == "encode" else ""))
    if command == "decode":
        parser.add_argument("--pretty", action="store_true", help="indented JSON")
        parser.add_argument("--channel", metavar="SOCKET", help="chp only: the socket the "
                            "frames were read from (collector, publisher, snapshot-request, "
                            "snapshot-reply, bstar); without it a kvmsg with sequence 0 is "
                            "a KVSET and any other a KVPUB")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the output (auto: when writing to a terminal)")
    return parser


def command_main(name: str, argv: list[str]) -> int:
    """Entry point used by `garlicfarm.cli` for ``decode`` and ``encode``."""
    args = _parser(name).parse_args(argv)
    out = _Output(args.color, getattr(args, "pretty", False), name)
    try:
        return _decode(args, out) if name == "decode" else _encode(args, out)
    except (InputError, ProtocolError) as error:
        out.error(str(error))
        return EXIT_INVALID_INPUT
    except Exception as error:  # a codec bug: still one line, never a traceback
        out.error(f"internal error: {type(error).__name__}: {error} "
                  "(a bug in garlicfarm; please report it with this input)")
        return EXIT_INTERNAL_ERROR


_NO_INPUT = "no bytes to decode: give HEX arguments or pipe hex into stdin"


def _decode(args: argparse.Namespace, out: "_Output") -> int:
    codec = codec_named(args.protocol)
    if args.channel is not None and not codec.framed:
        _channel(codec, codec.module(), args.channel)
    results = []
    if args.hex:
        texts = [(f"argument {i}", text) for i, text in enumerate(args.hex, 1)]
    else:   # stdin: blank lines and lines starting with # are skipped
        texts = [(f"line {n}", line) for n, line in enumerate(_read_stdin("hex").splitlines(), 1)
                 if line.strip() and not line.lstrip().startswith("#")]
    if not texts:
        raise InputError(_NO_INPUT)
    if not codec.framed:
        data = b"".join(parse_hex(text, where) for where, text in texts)
        if not data:
            raise InputError(_NO_INPUT)
        results.append(("", decode_stream(codec, data)))
    elif args.hex:
        frames = [parse_hex(text, where) for where, text in texts]
        results.append(("", decode_frames(codec, frames, args.channel)))
    else:
        for where, line in texts:
            frames = [parse_hex(t, where) for t in line.split()]
            prefix = f"{where}: " if len(texts) > 1 else ""
            results.append((prefix, decode_frames(codec, frames, args.channel)))
    failed = False
    for where, result in results:
        for message in result.messages:
            out.json(message)
        for note in result.notes:
            out.note(where + note)
        for error in result.errors:
            out.error(where + error)
            failed = True
    return EXIT_INVALID_INPUT if failed else 0


def _encode(args: argparse.Namespace, out: "_Output") -> int:
    if args.json:
        sources = [(f"argument {i}", text) for i, text in enumerate(args.json, 1)]
    else:
        sources = [("stdin", _read_stdin("JSON messages"))]
    objects = [(where if n == 1 else f"{where}, object {n}", obj) for where, text in sources
               for n, obj in enumerate(_json_values(text, where), 1)]
    for where, obj in objects:
        try:
            codec, frames = encode_json(obj, args.protocol, where)
        except ProtocolError as error:
            if len(objects) == 1:
                raise
            raise InputError(f"{where}: {error}") from None
        out.line(format_frames(frames) if codec.framed else frames[0].hex())
    return 0


def _read_stdin(what: str) -> str:
    if sys.stdin.isatty():
        print(f"reading {what} from stdin; end with Ctrl-D", file=sys.stderr)
    return sys.stdin.read()


def _json_values(text: str, where: str) -> Iterator[Any]:
    """The JSON values in `text`: one, several on separate lines, or pretty-printed."""
    decoder, at, n = json.JSONDecoder(), 0, 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            if n == 0:
                raise InputError(f"{where}: no JSON message given")
            return
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: not JSON: {error.msg} (line {error.lineno} "
                             f"column {error.colno})") from None
        n += 1
        yield value


class _Output:
    """stdout for results, stderr for errors; colour (rich) only on a terminal."""

    def __init__(self, color: str, pretty: bool, command: str) -> None:
        self.pretty = pretty
        self.prefix = f"garlicfarm {command}: "
        wanted = color == "always" or (color == "auto" and not os.environ.get("NO_COLOR"))
        self.console = self.errors = None
        if wanted and (color == "always" or sys.stdout.isatty()):
            from rich.console import Console
            self.console = Console(force_terminal=True, highlight=False, soft_wrap=True)
        if wanted and (color == "always" or sys.stderr.isatty()):
            from rich.console import Console
            self.errors = Console(stderr=True, force_terminal=True, highlight=False,
                                  soft_wrap=True)

    def json(self, obj: dict[str, Any]) -> None:
        text = json.dumps(obj, indent=2 if self.pretty else None, ensure_ascii=False)
        if self.console is None:
            _write(sys.stdout, text)
        else:
            self.console.print_json(text, indent=2 if self.pretty else None)

    def line(self, text: str) -> None:
        _write(sys.stdout, text)

    def error(self, text: str) -> None:
        self._stderr(text, "bold red")

    def note(self, text: str) -> None:
        self._stderr(text, "yellow")

    def _stderr(self, text: str, style: str) -> None:
        if self.errors is None:
            _write(sys.stderr, self.prefix + text)
        else:
            from rich.text import Text
            self.errors.print(Text(self.prefix, style=style) + Text(text))


def _write(stream: TextIO, text: str) -> None:
    stream.write(text + "\n")
    stream.flush()
