"""LocalFarm beyond loopback: where it listens and what it advertises, its own TLS, and
the PEM options that carry the CA to executors (tests/cluster runs it across network
namespaces with Spark)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from consensus.common.errors import FarmError
from pyspark_farm import LocalFarm
from pyspark_farm.connection import CONNECTION_OPTIONS, FarmClientOptions, pem_file
from pyspark_farm.errors import OptionError

pytestmark = pytest.mark.timeout(120)


def connection(options: dict) -> FarmClientOptions:
    return FarmClientOptions.from_options(CONNECTION_OPTIONS.parse(options))


def test_a_tls_farm_is_reached_with_its_options_alone(tmp_path):
    with LocalFarm(nodes=1, tls=True, data_dir=tmp_path / "farm") as farm:
        options = farm.options
        assert options["tls.ca"].startswith("-----BEGIN CERTIFICATE-----")
        with connection(options).client() as client:
            index, _ = client.append([b"over tls"])
            assert [e.records for e in client.read_entries(index, index + 1)] == [[b"over tls"]]
        plain = {k: v for k, v in options.items() if k != "tls.ca"}
        with pytest.raises(FarmError, match="requires TLS"):
            with connection(plain).client(timeout=5) as client:
                client.last_applied()
    ca_file = Path(pem_file(options["tls.ca"]))
    assert ca_file.read_text() == options["tls.ca"]
    assert stat.S_IMODE(ca_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(ca_file.parent.stat().st_mode) == 0o700
    assert (tmp_path / "farm" / "tls" / "node.key").stat().st_mode & 0o077 == 0


def test_a_farm_on_every_address_advertises_the_one_given():
    with LocalFarm(nodes=2, host="0.0.0.0", advertise="127.0.0.1") as farm:
        assert farm.tls, "off loopback, TLS is on unless turned off"
        assert all(e.startswith("127.0.0.1:") for e in farm.endpoints.split(","))
        with connection(farm.options).client() as client:
            assert client.append([b"x"])


def test_a_wildcard_farm_without_advertise_is_refused():
    with pytest.raises(ValueError, match="advertise"):
        LocalFarm(host="0.0.0.0")


def test_tls_options_check_pem_text_and_never_quote_it():
    secret = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAsecret"
    with pytest.raises(OptionError) as refused:
        CONNECTION_OPTIONS.parse({"endpoints": "127.0.0.1:1", "tls.key": secret})
    assert refused.value.option == "tls.key"
    assert "secret" not in str(refused.value) and "-----END" in str(refused.value)
    assert pem_file("/some/path.pem") == "/some/path.pem"
    assert pem_file(None) is None


def test_the_pem_folder_must_be_private(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folder = tmp_path / f"garlicfarm-tls-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(PermissionError, match="not a private folder"):
        pem_file("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
