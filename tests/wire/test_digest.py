"""RFC 2617 / RFC 7616 Digest computations against the RFC examples, and header syntax."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consensus.wire.digest import (Challenge, DigestAlgorithm, DigestAuthorization, ha1, ha2,
                                   parse_auth_header, parse_authorization, parse_challenges,
                                   request_digest)
from consensus.wire.errors import HandshakeError

VECTORS = [json.loads(line) for line in
           (Path(__file__).resolve().parents[1] / "vectors" / "garlicfarm" /
            "digest_vectors.jsonl").read_text().splitlines() if line.strip()]
USABLE = [v for v in VECTORS if v["kind"] == "digest-auth"]
pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("vector", USABLE, ids=[v["name"] for v in USABLE])
def test_rfc_examples(vector: dict) -> None:
    f = vector["fields"]
    algorithm = DigestAlgorithm.named(vector["algorithm"])
    h1 = ha1(algorithm, f["username"], f["realm"], f["password"])
    h2 = ha2(algorithm, f["method"], f["uri"])
    assert (h1, h2) == (vector["HA1"], vector["HA2"])
    response = request_digest(algorithm, h1, f["nonce"], int(f["nc"], 16), f["cnonce"],
                              f["qop"], h2)
    assert response == vector["response"] == vector["expected_response_from_rfc"]
    challenge = Challenge(f["realm"], f["nonce"], vector["algorithm"], ("auth",), f["opaque"])
    answer = DigestAuthorization.answer(challenge, algorithm, f["username"], f["password"],
                                        f["method"], f["uri"], int(f["nc"], 16), f["cnonce"])
    assert answer.response == response
    assert parse_authorization(answer.to_header()) == answer
    assert answer.expected_response(h1, f["method"]) == response


def test_the_two_rfcs_spell_the_password_differently() -> None:
    rfc2617 = next(v for v in USABLE if v["source"].startswith("RFC 2617"))
    f = rfc2617["fields"]
    assert f["password"] == "Circle Of Life"
    wrong_case = ha1(DigestAlgorithm.MD5, f["username"], f["realm"], "Circle of Life")
    assert wrong_case != rfc2617["HA1"]


def test_sha512_256_is_not_offered_and_its_vector_is_flagged() -> None:
    flagged = [v for v in VECTORS if v["algorithm"] == "SHA-512-256"]
    assert flagged and all(v["kind"] == "digest-auth-unverified" and not v["match"]
                           for v in flagged)
    assert DigestAlgorithm.named("SHA-512-256") is None
    assert DigestAlgorithm.named("MD5-sess") is None
    assert DigestAlgorithm.named(None) is DigestAlgorithm.MD5
    assert DigestAlgorithm.named("sha-256") is DigestAlgorithm.SHA_256


def test_several_challenges_in_one_header_and_other_schemes() -> None:
    value = ('Digest realm="a, b", qop="auth,auth-int", algorithm=SHA-256, nonce="n1", '
             'opaque="o", Digest realm="a, b", nonce="n2", stale=TRUE, Basic realm="x"')
    challenges, others = parse_challenges([value])
    assert challenges == [Challenge("a, b", "n1", "SHA-256", ("auth", "auth-int"), "o"),
                          Challenge("a, b", "n2", "MD5", (), None, True)]
    assert others == ["Basic"]


@pytest.mark.parametrize("value, field", [
    ('Basic dXNlcjpwYXNz', "Authorization"),
    ('Digest username="u", realm="r", nonce="n", uri="/", response="x", qop=auth, nc=1, '
     'cnonce="c"', "Authorization.nc"),
    ('Digest username="u", realm="r", nonce="n", uri="/", response="x", nc=00000001, '
     'cnonce="c"', "Authorization.qop"),
    ('Digest username="u", realm="r", nonce="n", uri="/", response="x", qop=auth-int, '
     'nc=00000001, cnonce="c"', "Authorization.qop"),
    ('Digest username="u", realm="r", nonce="n", uri="/", response="x", qop=auth, '
     'nc=00000001, cnonce="c", algorithm=SHA-512-256', "Authorization.algorithm"),
    ('Digest username="u", username="v"', "username"),
    ('Digest realm="r", Digest realm="s"', "Authorization"),
    ('=x', "auth-scheme"),
])
def test_authorization_refusals_name_the_parameter(value: str, field: str) -> None:
    with pytest.raises(HandshakeError) as caught:
        parse_authorization(value)
    assert caught.value.field == field


def test_challenge_without_nonce_is_refused() -> None:
    with pytest.raises(HandshakeError) as caught:
        parse_challenges(['Digest realm="r"'])
    assert caught.value.field == "WWW-Authenticate.nonce"


printable = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"),
                    max_size=16)


@settings(max_examples=80, deadline=None)
@given(realm=printable, nonce=printable, opaque=st.none() | printable, stale=st.booleans(),
       algorithm=st.sampled_from(["MD5", "SHA-256"]))
def test_challenge_header_round_trips(realm: str, nonce: str, opaque: str | None, stale: bool,
                                      algorithm: str) -> None:
    challenge = Challenge(realm, nonce, algorithm, ("auth",), opaque, stale)
    assert parse_challenges([challenge.to_header()]) == ([challenge], [])


@settings(max_examples=80, deadline=None)
@given(username=printable.filter(bool), realm=printable, uri=printable, cnonce=printable,
       nc=st.integers(1, 0xFFFFFFFF), algorithm=st.sampled_from(list(DigestAlgorithm)))
def test_authorization_header_round_trips(username: str, realm: str, uri: str, cnonce: str,
                                          nc: int, algorithm: DigestAlgorithm) -> None:
    answer = DigestAuthorization.answer(Challenge(realm, "n,\"x", algorithm.value), algorithm,
                                        username, "pw", "GET", uri, nc, cnonce)
    assert parse_authorization(answer.to_header()) == answer


@settings(max_examples=200, deadline=None)
@given(value=st.text(max_size=80) | st.lists(
    st.sampled_from(['Digest', 'Basic', ' ', ',', '=', '"', '\\', 'realm', 'nonce="x"',
                     'qop=auth', 'nc=00000001', 'username="u"', 'a=b']), max_size=14).map("".join))
def test_header_parsers_raise_only_handshake_errors(value: str) -> None:
    for parse in (parse_auth_header, parse_authorization, lambda v: parse_challenges([v])):
        try:
            parse(value)
        except HandshakeError:
            pass
