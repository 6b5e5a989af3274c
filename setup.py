"""garlicfarm: Spark Structured Streaming over Raft logs, Dafka partitions and CHP hashmaps."""
from setuptools import find_packages, setup

setup(
    name="garlicfarm",
    version="0.1.0",
    description=(
        "Exactly-once Spark Structured Streaming sources and sinks for Raft logs "
        "(Garlic Farm / JRaft / marker wire), Dafka partitions and CHP hashmaps."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["consensus*", "connectors*", "pyspark_farm*", "garlicfarm*"]),
    package_dir={"": "."},
    # the JVM reader's jar, when jvm/build.sh built it (pyspark_farm/jvm/__init__.py)
    package_data={"pyspark_farm.jvm": ["*.jar"]},
    # PySpark is the runtime's (Databricks, a Spark distribution): it is not a requirement,
    # and nothing here pins an upper bound that would make pip replace a runtime's PySpark,
    # pandas or pyarrow. `pip install 'garlicfarm[spark]'` brings PySpark for a laptop or CI.
    # Importing pyspark_farm without PySpark 4.x fails naming the supported versions
    # (pyspark_farm/compat.py, docs/compatibility.md).
    install_requires=[
        "pyarrow>=15",
        "numpy>=1.24",  # bulk reads: Dafka and CHP bulk codecs, the storage CRC fold
        "pandas>=2.0",  # pyspark's Arrow paths need it on the workers
        "pyzmq>=25",
        "crcmod>=1.7",
        "msgpack>=1.0",
        "h11>=0.14",
        "rich>=13",
        "prometheus_client>=0.20",  # --metrics (consensus/runtime/metrics.py)
    ],
    extras_require={
        # PySpark 4.0 to 4.x (tested: 4.0, 4.1, 4.2, 4.3). pandas below 3: PySpark 4.2+
        # warns "does not yet fully support pandas >= 3.0.0" (a FutureWarning) on every
        # start with pandas 3, and 4.0 / 4.1 were released before it.
        "spark": ["pyspark>=4.0,<5", "pandas>=2.0,<3"],
        # Spark Connect clients (SparkSession.builder.remote(...)): grpcio and friends.
        "connect": ["pyspark[connect]>=4.0,<5"],
        # LocalFarm(tls=True) makes the embedded farm's certificates (pyspark_farm/
        # farm_certificates.py); a listening-on-the-network farm turns TLS on by default.
        "tls": ["cryptography>=42"],
        "test": [
            "cryptography>=42",
            "pytest>=8",
            "pytest-timeout>=2.3",
            "chispa>=0.10",
            "hypothesis>=6.100",
            "nbclient>=0.10",
            "nbformat>=5.9",
            "ipykernel>=6.29",
            # tests/interop runs the zguide's Python Clone examples (../shared/peers):
            # their servers use pyzmq's tornado event loop (tested: tornado 6.6.1).
            "tornado>=6.1",
            # the status page's test drives Debian's chromium (no browser download)
            "playwright>=1.40",
        ],
        "bench": ["pysyncobj>=0.3.12", "matplotlib>=3.5"],
    },
    entry_points={"console_scripts": ["garlicfarm = garlicfarm.cli:main"]},
)
