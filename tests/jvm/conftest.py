"""Fixtures of the JVM reader's tests: its jar, built when missing or older than a source
(`make test` builds it first; a bare pytest run builds it here)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def reader_jar() -> str:
    from pyspark_farm.jvm import JAR, jar_path
    sources = [p for p in (ROOT / "jvm").rglob("*") if p.is_file() and "lib" not in p.parts
               and "build" not in p.parts]
    if not JAR.is_file() or any(p.stat().st_mtime > JAR.stat().st_mtime for p in sources):
        subprocess.run([str(ROOT / "jvm" / "build.sh"), sys.executable], check=True,
                       capture_output=True, timeout=600)
    return jar_path()
