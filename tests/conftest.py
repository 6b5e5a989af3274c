"""Shared test fixtures.

Paths to the protocol vectors: they live beside the project in ../shared/vectors when
developing and are copied into tests/vectors for a clean clone (CI)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"

# Spark's Python workers must run the interpreter that has garlicfarm installed.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    return VECTORS


@pytest.fixture(scope="session")
def reader_jar() -> str:
    """The JVM reader's jar (`format("garlicfarm-columnar")`), built by Maven (jvm/pom.xml)
    when missing or older than a source: `make test` builds it first, a bare pytest run here."""
    from pyspark_farm.jvm import jar_file, jar_path
    jar = jar_file()           # the name this Python's PySpark line looks for
    sources = [p for p in (ROOT / "jvm").rglob("*")
               if p.is_file() and "target" not in p.relative_to(ROOT / "jvm").parts]
    if not jar.is_file() or any(p.stat().st_mtime > jar.stat().st_mtime for p in sources):
        subprocess.run(["mvn", "-B", "-q", "-DskipTests", "-f", str(ROOT / "jvm" / "pom.xml"),
                        "package"], check=True, capture_output=True, timeout=600)
    return jar_path()
