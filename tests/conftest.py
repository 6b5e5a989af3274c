"""Shared test fixtures.

Paths to the protocol vectors: they live beside the project in ../shared/vectors when
developing and are copied into tests/vectors for a clean clone (CI)."""
from __future__ import annotations

import os
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
