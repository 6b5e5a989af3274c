"""HTTP Digest authentication (RFC 2617 with qop=auth, RFC 7616's SHA-256), sans-I/O.

The Garlic Farm handshake authenticates with Digest only (Basic is refused). This module
holds the computations and the header syntax; `handshake.py` holds the state machines.

    HA1      = H(username ":" realm ":" password)
    HA2      = H(method ":" uri)
    response = H(HA1 ":" nonce ":" nc ":" cnonce ":" qop ":" HA2)

with H = MD5 or SHA-256, hex digests, strings hashed as UTF-8. The ``-sess`` variants,
``auth-int``, ``userhash`` and SHA-512-256 are not offered (RFC 7616's SHA-512-256 example
does not reproduce: tests/vectors/garlicfarm/digest_vectors.jsonl); a challenge that
offers only those is skipped.

Header parsing splits on commas with the stdlib's `urllib.request.parse_http_list`
(quoted strings and their backslash escapes are resolved there); only the scheme /
name=value step is ours.
"""
from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.request import parse_http_list

from consensus.wire.errors import HandshakeError

PROTOCOL = "handshake"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SCHEME_AND_REST = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:\s+(.*))?", re.S)
_NC = re.compile(r"[0-9A-Fa-f]{8}")


def _error(field: str, reason: str) -> HandshakeError:
    return HandshakeError(field, reason, protocol=PROTOCOL)


class DigestAlgorithm(enum.Enum):
    """The hash of a Digest exchange, by its name in the ``algorithm`` parameter."""
    MD5 = "MD5"
    SHA_256 = "SHA-256"

    def hash(self, text: str) -> str:
        name = "md5" if self is DigestAlgorithm.MD5 else "sha256"
        return hashlib.new(name, text.encode("utf-8")).hexdigest()

    @classmethod
    def named(cls, name: str | None) -> DigestAlgorithm | None:
        """The algorithm a parameter names (absent means MD5), or None if unsupported."""
        if name is None:
            return cls.MD5
        return next((a for a in cls if a.value.lower() == name.lower()), None)


def ha1(algorithm: DigestAlgorithm, username: str, realm: str, password: str) -> str:
    return algorithm.hash(f"{username}:{realm}:{password}")


def ha2(algorithm: DigestAlgorithm, method: str, uri: str) -> str:
    return algorithm.hash(f"{method}:{uri}")


def request_digest(algorithm: DigestAlgorithm, ha1_hex: str, nonce: str, nc: int,
                   cnonce: str, qop: str, ha2_hex: str) -> str:
    """The ``response`` parameter (RFC 2617 §3.2.2.1 with qop; RFC 7616 §3.4.1)."""
    return algorithm.hash(f"{ha1_hex}:{nonce}:{format_nc(nc)}:{cnonce}:{qop}:{ha2_hex}")


def format_nc(nc: int) -> str:
    return f"{nc:08x}"


# ---------------------------------------------------------------------------------------
# Header syntax (RFC 7235 challenges / credentials, auth-params).

def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(value: str) -> str:
    """Strip the quotes; parse_http_list has already resolved the backslash escapes."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_auth_header(value: str, max_items: int = 64) -> list[tuple[str, dict[str, str]]]:
    """``[(scheme, {param: value})]`` for a WWW-Authenticate or Authorization value, which
    may hold several challenges. Parameter names are lowercased; duplicates are refused.
    A token68 (Basic's credentials) is kept under the key ``""``."""
    items = parse_http_list(value)
    if len(items) > max_items:
        raise _error("auth-params", f"more than {max_items} items")
    parsed: list[tuple[str, dict[str, str]]] = []
    for raw in items:
        item = raw.strip()
        name, eq, rest = item.partition("=")
        if not (eq and _TOKEN.fullmatch(name.strip())):     # not a parameter: a scheme
            match = _SCHEME_AND_REST.fullmatch(item)
            if match is None:
                raise _error("auth-scheme", f"{item!r} is neither a scheme nor a parameter")
            parsed.append((match.group(1), {}))
            item = (match.group(2) or "").strip()
            if not item:
                continue
            name, eq, rest = item.partition("=")
            if not (eq and _TOKEN.fullmatch(name.strip())) or not rest.strip("="):
                parsed[-1][1][""] = item                     # token68 (Basic's credentials)
                continue
        if not parsed:
            raise _error("auth-scheme", f"parameter {item!r} before any scheme")
        key = name.strip().lower()
        params = parsed[-1][1]
        if key in params:
            raise _error(key, "given twice")
        params[key] = _unquote(rest.strip())
    return parsed


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate: Digest`` challenge. `algorithm` is the name as sent."""
    realm: str
    nonce: str
    algorithm: str = "MD5"
    qop: tuple[str, ...] = ("auth",)
    opaque: str | None = None
    stale: bool = False

    def to_header(self) -> str:
        parts = [f"realm={quote(self.realm)}", f"qop={quote(','.join(self.qop))}",
                 f"algorithm={self.algorithm}", f"nonce={quote(self.nonce)}"]
        if self.opaque is not None:
            parts.append(f"opaque={quote(self.opaque)}")
        if self.stale:
            parts.append("stale=true")
        return "Digest " + ", ".join(parts)


def parse_challenges(values: Iterable[str]) -> tuple[list[Challenge], list[str]]:
    """The Digest challenges in some WWW-Authenticate values, and the other schemes seen."""
    challenges, others = [], []
    for value in values:
        for scheme, params in parse_auth_header(value):
            if scheme.lower() != "digest":
                others.append(scheme)
                continue
            for required in ("realm", "nonce"):
                if required not in params:
                    raise _error(f"WWW-Authenticate.{required}", "missing from a Digest challenge")
            qop = tuple(q.strip() for q in params.get("qop", "").split(",") if q.strip())
            challenges.append(Challenge(
                realm=params["realm"], nonce=params["nonce"],
                algorithm=params.get("algorithm", "MD5"), qop=qop,
                opaque=params.get("opaque"), stale=params.get("stale", "").lower() == "true"))
    return challenges, others


@dataclass(frozen=True, slots=True)
class DigestAuthorization:
    """The ``Authorization: Digest`` parameters of a request 2."""
    username: str
    realm: str
    nonce: str
    uri: str
    response: str
    algorithm: DigestAlgorithm
    nc: int
    cnonce: str
    opaque: str | None = None
    qop: str = "auth"

    def to_header(self) -> str:
        parts = [f"username={quote(self.username)}", f"realm={quote(self.realm)}",
                 f"nonce={quote(self.nonce)}", f"uri={quote(self.uri)}",
                 f"algorithm={self.algorithm.value}", f"response={quote(self.response)}"]
        if self.opaque is not None:
            parts.append(f"opaque={quote(self.opaque)}")
        parts += [f"qop={self.qop}", f"nc={format_nc(self.nc)}", f"cnonce={quote(self.cnonce)}"]
        return "Digest " + ", ".join(parts)

    @classmethod
    def answer(cls, challenge: Challenge, algorithm: DigestAlgorithm, username: str,
               password: str, method: str, uri: str, nc: int, cnonce: str) -> DigestAuthorization:
        """The authorization that answers ``challenge`` for these credentials."""
        digest = request_digest(algorithm, ha1(algorithm, username, challenge.realm, password),
                                challenge.nonce, nc, cnonce, "auth", ha2(algorithm, method, uri))
        return cls(username, challenge.realm, challenge.nonce, uri, digest, algorithm, nc,
                   cnonce, challenge.opaque)

    def expected_response(self, ha1_hex: str, method: str) -> str:
        """What `response` must be, given the user's HA1 (the receiver's check)."""
        return request_digest(self.algorithm, ha1_hex, self.nonce, self.nc, self.cnonce,
                              self.qop, ha2(self.algorithm, method, self.uri))


def parse_authorization(value: str) -> DigestAuthorization:
    """Parse an Authorization value. Only Digest with qop=auth, nc and cnonce (RFC 2617
    §3.2.2 / RFC 7616 §3.4) is accepted; Basic and the rest raise `HandshakeError`."""
    parsed = parse_auth_header(value)
    if len(parsed) != 1:
        raise _error("Authorization", f"expected one credential, got {len(parsed)}")
    scheme, params = parsed[0]
    if scheme.lower() != "digest":
        raise _error("Authorization", f"the {scheme} scheme is refused: Garlic Farm "
                     f"authenticates with Digest only")
    for required in ("username", "realm", "nonce", "uri", "response", "qop", "nc", "cnonce"):
        if required not in params:
            raise _error(f"Authorization.{required}", "missing (qop=auth with nc and cnonce "
                         "is required)")
    if params["qop"] != "auth":
        raise _error("Authorization.qop", f"{params['qop']!r} is not offered; use auth")
    if not _NC.fullmatch(params["nc"]):
        raise _error("Authorization.nc", f"{params['nc']!r} is not 8 hex digits")
    algorithm = DigestAlgorithm.named(params.get("algorithm"))
    if algorithm is None:
        raise _error("Authorization.algorithm", f"{params['algorithm']!r} is not offered")
    return DigestAuthorization(
        username=params["username"], realm=params["realm"], nonce=params["nonce"],
        uri=params["uri"], response=params["response"].lower(), algorithm=algorithm,
        nc=int(params["nc"], 16), cnonce=params["cnonce"], opaque=params.get("opaque"),
        qop=params["qop"])
