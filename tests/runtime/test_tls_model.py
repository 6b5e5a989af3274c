"""The TLS model (issue 19.5, docs/operations.md "TLS and proxies"), with certificates made
by `openssl` here and real node processes on loopback:

- a node with `tls-ca` requires a client certificate signed by that CA, from peers and
  clients alike, unless `tls-client-cert = "optional"` (then a presented one must
  still chain to the CA);
- a client verifies the node's certificate: against `--tls-ca` when given (host names
  not checked: the farm's own CA), else against the system trust store *and* the host
  name of the endpoint;
- only `--insecure-skip-tls-verify` skips the verification, and it says so loudly;
- the errors say what the node answered and which option fixes it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from consensus.client import AuthenticationError, FarmClient, FarmError, ProtocolMismatch
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def _openssl(d, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)


def _ca(d, name: str) -> None:
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem")


def _signed(d, name: str, ca: str, san: str | None) -> None:
    _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
             f"{name}.key", "-out", f"{name}.csr")
    ext = []
    if san:
        (d / f"{name}.cnf").write_text(f"subjectAltName={san}\n")
        ext = ["-extfile", f"{name}.cnf"]
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
             f"{ca}.key", "-CAcreateserial", "-days", "2", *ext, "-out", f"{name}.pem")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The farm's CA with a node certificate (IP:127.0.0.1), a node certificate that names
    another host, a client certificate; and another CA with a client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _ca(d, "ca")
    _ca(d, "other-ca")
    _signed(d, "node", "ca", "IP:127.0.0.1")
    _signed(d, "elsewhere", "ca", "DNS:farm.example.org")
    _signed(d, "client", "ca", None)
    _signed(d, "stranger", "other-ca", None)
    return {p.stem if p.suffix == ".pem" else p.name: str(p) for p in d.iterdir()} | {
        "dir": str(d)}


def node_tls(pki, cert: str = "node", *extra: str) -> list[str]:
    return ["--tls-cert", pki[cert], "--tls-key", pki[cert].replace(".pem", ".key"),
            "--tls-ca", pki["ca"], *extra]


def client_cert(pki, name: str = "client") -> dict:
    return {"tls_cert": pki[name], "tls_key": pki[name].replace(".pem", ".key")}


def garlicfarm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("GARLICFARM_") and k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    return subprocess.run([sys.executable, "-m", "consensus.cli", *args],
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=60)


def ping(farm, **kw) -> dict:
    with FarmClient(farm.endpoints, cluster=farm.cluster, username=farm.username,
                    password=farm.password, timeout=3, **kw) as client:
        return client.ping()


def credentials(farm) -> list[str]:
    return ["--endpoints", farm.endpoints, "--cluster", farm.cluster, "--user", farm.username,
            f"--password={farm.password}", "--timeout", "3"]


@pytest.fixture(scope="module")
def farm(pki):
    """Three nodes with the farm's CA: peers present their node certificates."""
    with LocalCluster(3, cluster="tls", extra_args=node_tls(pki), status_interval=5.0) as f:
        with f.client(tls_ca=pki["ca"], timeout=30, **client_cert(pki)) as client:
            wait_until(lambda: _leader(client), 30, message="a leader over TLS")
        yield f


def _leader(client):
    try:
        return client.ping()["leader"]
    except FarmError:
        return None


def test_peers_and_clients_with_certificates_of_the_farm_ca(farm, pki):
    with farm.client(tls_ca=pki["ca"], timeout=20, **client_cert(pki)) as client:
        index, _ = client.append([b"over tls"])
        for node_id in farm.node_ids:
            endpoint = farm.endpoint_of(node_id)
            wait_until(lambda: client.log_bounds(endpoint)[1] >= index, 20)
    result = garlicfarm("status", *credentials(farm), "--tls-ca", pki["ca"], "--tls-cert",
                        pki["client"], "--tls-key", pki["client"].replace(".pem", ".key"))
    assert result.returncode == 0, result.stderr


def test_a_node_with_tls_ca_refuses_clients_without_a_certificate(farm, pki):
    with pytest.raises(AuthenticationError) as info:
        ping(farm, tls_ca=pki["ca"])
    message = str(info.value)
    assert "client certificate" in message and "--tls-cert" in message, message
    wait_until(lambda: any(b"presented no TLS client certificate" in
                           open(farm.log_path(i), "rb").read() for i in farm.node_ids), 10,
               message="the node to log the refusal")

    result = garlicfarm("status", *credentials(farm), "--tls-ca", pki["ca"])
    assert result.returncode == 1
    assert "AuthenticationError" in result.stderr and "--tls-cert" in result.stderr


def test_a_client_certificate_of_another_ca_is_refused_saying_so(farm, pki):
    with pytest.raises(AuthenticationError) as info:
        ping(farm, tls_ca=pki["ca"], **client_cert(pki, "stranger"))
    message = str(info.value)
    assert "refused our TLS client certificate" in message and "--tls-cert" in message, message
    assert "majority" not in message


def test_clients_verify_the_node_by_default(farm, pki):
    # A certificate but no CA: the node is checked against the system trust store, which
    # does not know the farm's CA: refused (a man in the middle would be too).
    with pytest.raises(ProtocolMismatch) as info:
        ping(farm, **client_cert(pki))
    message = str(info.value)
    assert "certificate verify failed" in message and "system trust store" in message
    assert "--tls-ca" in message and "--insecure-skip-tls-verify" in message
    assert "majority" not in message

    # The node's certificate signed by another CA than the one the client trusts.
    with pytest.raises(ProtocolMismatch, match="did not verify against --tls-ca"):
        ping(farm, tls_ca=pki["other-ca"], **client_cert(pki))

    # The CLI: --tls asks for TLS with the system trust store, no certificate given.
    args = credentials(farm) + ["--tls-cert", pki["client"], "--tls-key",
                                pki["client"].replace(".pem", ".key")]
    refused = garlicfarm("status", "--tls", *args)
    assert refused.returncode == 1 and "system trust store" in refused.stderr
    # ... and a trust store that holds the farm's CA (SSL_CERT_FILE) verifies the node,
    # host name included (the certificate names IP:127.0.0.1).
    trusted = garlicfarm("status", "--tls", *args, env={"SSL_CERT_FILE": pki["ca"]})
    assert trusted.returncode == 0, trusted.stderr


def test_skipping_verification_takes_the_loud_option(farm, pki):
    answer = ping(farm, insecure_skip_tls_verify=True, **client_cert(pki))
    assert answer["node"] in farm.node_ids
    result = garlicfarm("status", *credentials(farm), "--insecure-skip-tls-verify",
                        "--tls-cert", pki["client"], "--tls-key",
                        pki["client"].replace(".pem", ".key"))
    assert result.returncode == 0, result.stderr
    assert "WARNING" in result.stderr and "NOT verified" in result.stderr


def test_host_names_are_checked_against_the_system_trust_store(pki):
    """A certificate of a trusted CA for another host name is refused when the client
    trusts the system store (anyone can get a public CA's certificate for their own
    name); with --tls-ca (the farm's own CA) host names are not checked."""
    with LocalCluster(1, cluster="tlsname", extra_args=node_tls(pki, "elsewhere"),
                      status_interval=5.0) as farm:
        with farm.client(tls_ca=pki["ca"], timeout=30, **client_cert(pki)) as client:
            wait_until(lambda: _leader(client), 30, message="a leader")
        args = credentials(farm) + ["--tls-cert", pki["client"], "--tls-key",
                                    pki["client"].replace(".pem", ".key")]
        refused = garlicfarm("status", "--tls", *args, env={"SSL_CERT_FILE": pki["ca"]})
        assert refused.returncode == 1
        assert "IP address mismatch" in refused.stderr or "mismatch" in refused.stderr, \
            refused.stderr
        ok = garlicfarm("status", "--tls-ca", pki["ca"], *args)
        assert ok.returncode == 0, ok.stderr


def test_client_certificates_can_be_made_optional(pki):
    with LocalCluster(1, cluster="tlsopt", status_interval=5.0,
                      extra_args=node_tls(pki, "node", "--tls-client-cert", "optional")) as farm:
        with farm.client(tls_ca=pki["ca"], timeout=30) as client:     # no certificate
            wait_until(lambda: _leader(client), 30, message="a leader")
            client.append([b"no client certificate"])
        with pytest.raises(AuthenticationError, match="refused our TLS client certificate"):
            ping(farm, tls_ca=pki["ca"], **client_cert(pki, "stranger"))


def test_nodes_without_tls_ca_verify_their_peers_too(pki, monkeypatch):
    """Nodes dial their peers as clients do: without a tls-ca, a peer's certificate must
    verify against the system trust store (here it cannot: the farm's CA is not there);
    --insecure-skip-tls-verify is the loud way round."""
    cert = ["--tls-cert", pki["node"], "--tls-key", pki["node"].replace(".pem", ".key")]
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with LocalCluster(2, cluster="peers", extra_args=cert, status_interval=5.0) as farm:
        wait_until(lambda: b"did not verify against the system trust store" in
                   open(farm.log_path(1), "rb").read(), 20, message="node 1 to refuse node 2")
        with FarmClient(farm.endpoints, cluster="peers", username=farm.username,
                        password=farm.password, timeout=1, tls_ca=pki["ca"]) as client:
            assert client.ping()["leader"] is None            # no vote crossed
    with LocalCluster(2, cluster="peers", extra_args=cert + ["--insecure-skip-tls-verify"],
                      status_interval=5.0) as farm:
        with farm.client(tls_ca=pki["ca"], timeout=30) as client:
            wait_until(lambda: _leader(client), 30, message="a leader")
        assert b"TLS WITHOUT VERIFICATION" in open(farm.log_path(1), "rb").read()
