package garlicfarm.spark;

import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;

import garlicfarm.spark.planning.PlannedPartition;
import garlicfarm.spark.planning.PythonPlanner;
import garlicfarm.spark.read.RaftInputPartition;
import garlicfarm.spark.read.RaftReaderFactory;
import garlicfarm.spark.wire.FarmSettings;

/** A batch read of a range of the log: planned once, by the Python planner. */
final class RaftBatch implements Batch {
  private final StructType columns;
  private final Map<String, String> options;
  private final List<Map<String, Object>> indexFilters;
  private final FarmSettings settings;

  RaftBatch(StructType columns, Map<String, String> options,
            List<Map<String, Object>> indexFilters, FarmSettings settings) {
    this.columns = columns;
    this.options = options;
    this.indexFilters = indexFilters;
    this.settings = settings;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    PythonPlanner planner = Planners.open("batch", options, indexFilters);
    try {
      return RaftInputPartition.of(
          PlannedPartition.fromJson(planner.request("partitions", Map.of())), settings, columns,
          options);
    } finally {
      Planners.release(planner);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RaftReaderFactory();
  }
}
