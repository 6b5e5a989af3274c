package garlicfarm.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

import garlicfarm.spark.planning.PlannedPartition;
import garlicfarm.spark.planning.PythonPlanner;
import garlicfarm.spark.read.RaftInputPartition;
import garlicfarm.spark.read.RaftReaderFactory;
import garlicfarm.spark.wire.FarmSettings;

/**
 * A stream over the log: offsets, admission control and the tasks of each micro-batch
 * come from one Python planner that lives as long as the query (it keeps the stream
 * reader of format("garlicfarm"): its clients and its scan of entry sizes), the rows
 * from the executors' columnar readers.
 */
final class RaftMicroBatchStream implements MicroBatchStream, SupportsAdmissionControl,
    SupportsTriggerAvailableNow, ReportsSourceMetrics {
  private final StructType columns;
  private final Map<String, String> options;
  private final FarmSettings settings;
  private PythonPlanner planner;

  RaftMicroBatchStream(StructType columns, Map<String, String> options, FarmSettings settings) {
    this.columns = columns;
    this.options = options;
    this.settings = settings;
  }

  private synchronized PythonPlanner planner() {
    if (planner == null) {
      planner = Planners.open("stream", options);
    }
    return planner;
  }

  @Override
  public Offset initialOffset() {
    return new RaftOffset(planner().request("initialOffset", Map.of()));
  }

  @Override
  public Offset deserializeOffset(String json) {
    return RaftOffset.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    JsonNode limit = planner().request("defaultReadLimit", Map.of());
    switch (limit.path("type").asText("all")) {
      case "maxRows":
        return ReadLimit.maxRows(limit.get("rows").asLong());
      case "minRows":
        return ReadLimit.minRows(limit.get("rows").asLong(),
            limit.path("maxTriggerDelayMs").asLong());
      default:
        return ReadLimit.allAvailable();
    }
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "garlicfarm-columnar: latestOffset(start, limit) is the one Spark calls");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    Map<String, Object> fields = new HashMap<>();
    fields.put("start", ((RaftOffset) start).value);
    fields.put("limit", limitJson(limit));
    return new RaftOffset(planner().request("latestOffset", fields));
  }

  /** Spark's limit as the planner reads it; null (its options' own) for any other. */
  private static Map<String, Object> limitJson(ReadLimit limit) {
    if (limit instanceof ReadAllAvailable) {
      return Map.of("type", "all");
    }
    if (limit instanceof ReadMaxRows rows) {
      return Map.of("type", "maxRows", "rows", rows.maxRows());
    }
    if (limit instanceof ReadMinRows rows) {
      return Map.of("type", "minRows", "rows", rows.minRows(),
          "maxTriggerDelayMs", rows.maxTriggerDelayMs());
    }
    return null;
  }

  @Override
  public Offset reportLatestOffset() {
    JsonNode latest = planner().request("reportLatestOffset", Map.of());
    return latest == null || latest.isNull() ? null : new RaftOffset(latest);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    planner().request("prepareForTriggerAvailableNow", Map.of());
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    Map<String, Object> fields = new HashMap<>();
    fields.put("start", ((RaftOffset) start).value);
    fields.put("end", ((RaftOffset) end).value);
    return RaftInputPartition.of(
        PlannedPartition.fromJson(planner().request("partitions", fields)), settings, columns,
        options);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RaftReaderFactory();
  }

  @Override
  public void commit(Offset end) {
    planner().request("commit", Map.of("end", ((RaftOffset) end).value));
  }

  /**
   * Kafka's avg/max/minOffsetsBehindLatest, in entries (log indexes, this source's offsets):
   * the latest offset Spark last saw minus the one the batch consumed, as the planner
   * works them out.
   */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    Map<String, Object> fields = new HashMap<>();
    latestConsumedOffset.ifPresent(
        offset -> fields.put("consumed", RaftOffset.parse(offset.json()).value));
    Map<String, String> metrics = new HashMap<>();
    for (Map.Entry<String, JsonNode> entry : planner().request("metrics", fields).properties()) {
      metrics.put(entry.getKey(), entry.getValue().asText());
    }
    return metrics;
  }

  @Override
  public synchronized void stop() {
    if (planner != null) {
      Planners.release(planner);
      planner = null;
    }
  }
}
