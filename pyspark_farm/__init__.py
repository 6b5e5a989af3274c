"""garlicfarm's Spark side: the `garlicfarm` Python data source.

Spark finds `DefaultSource` in modules named `pyspark_*` on its own, so after
`pip install garlicfarm`, `spark.readStream.format("garlicfarm")` works with no
`spark.dataSource.register(...)` call. Options: docs/options.md; the sink's guarantee:
docs/exactly-once.md. `configure_spark(SparkSession.builder)` adds the JVM reader's jar
(`format("garlicfarm-columnar")`, docs/jvm-reader.md) for the installed PySpark.
"""
from __future__ import annotations

from .compat import PYSPARK_VERSION  # first: one clear error without a supported PySpark
from .datasource import GarlicFarmDataSource
from .errors import (DataLossError, EnvironmentSetupError, GarlicFarmSparkError, OptionError,
                     SchemaError, UnsupportedPySparkError)
from .jvm import configure_spark
from .local_farm import LocalFarm
from .session import spark_session

#: What Spark's data source lookup registers under `GarlicFarmDataSource.name()`.
DefaultSource = GarlicFarmDataSource

__all__ = ["DefaultSource", "GarlicFarmDataSource", "LocalFarm", "spark_session",
           "configure_spark", "GarlicFarmSparkError", "OptionError", "SchemaError", "DataLossError",
           "EnvironmentSetupError", "UnsupportedPySparkError", "PYSPARK_VERSION"]
