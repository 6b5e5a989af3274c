"""The `dafka` kind: Dafka partitions as a Spark source, and an exactly-once sink whose
sequences come from partition indexes in the farm (docs/exactly-once.md, "Dafka")."""
