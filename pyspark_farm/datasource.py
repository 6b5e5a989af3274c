"""The `garlicfarm` Spark data source: one format, several kinds of logs.

`spark.readStream.format("garlicfarm").option("kind", "raft")` (raft is the default)
dispatches every call to the kind's module, which owns its options, schema, readers and
writers. A kind module exposes `schema(options)`, `stream_reader(options, schema)`,
`batch_reader(options, schema)`, `stream_writer(options, schema, overwrite)` and
`batch_writer(options, schema, overwrite)`; later kinds add a line to `KINDS`.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter)
from pyspark.sql.types import StructType

from .errors import OptionError

#: kind name -> the module implementing it (imported on first use).
KINDS: dict[str, str] = {
    "raft": "pyspark_farm.raft.kind",
    "chp": "pyspark_farm.chp.kind",
    "dafka": "pyspark_farm.dafka.kind",
}
DEFAULT_KIND = "raft"


def kind_module(options) -> ModuleType:
    name = str(options.get("kind", DEFAULT_KIND) or DEFAULT_KIND).strip().lower()
    if name not in KINDS:
        raise OptionError("kind", f"unknown kind {name!r}; expected one of "
                          f"{', '.join(sorted(KINDS))}")
    return importlib.import_module(KINDS[name])


class GarlicFarmDataSource(DataSource):
    """Raft logs, Dafka partitions and CHP hashmaps as Spark sources and exactly-once
    sinks. Options: docs/options.md."""

    @classmethod
    def name(cls) -> str:
        return "garlicfarm"

    def schema(self) -> str:
        return kind_module(self.options).schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return kind_module(self.options).batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return kind_module(self.options).stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return kind_module(self.options).batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return kind_module(self.options).stream_writer(self.options, schema, overwrite)
