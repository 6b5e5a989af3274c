package garlicfarm.spark;

import java.util.Map;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

import garlicfarm.spark.wire.FarmSettings;

/**
 * A scan of the columns a query uses (Spark prunes the others: a column not read is
 * never built). The connection options are checked here, on the driver, so a bad one
 * fails the query before any task runs.
 */
final class RaftScan implements Scan {
  private final StructType columns;
  private final Map<String, String> options;
  private final FarmSettings settings;

  RaftScan(StructType columns, Map<String, String> options) {
    this.columns = columns;
    this.options = options;
    this.settings = FarmSettings.fromOptions(options);
  }

  @Override
  public StructType readSchema() {
    return columns;
  }

  @Override
  public String description() {
    return "garlicfarm-columnar " + String.join(",", settings.endpoints());
  }

  @Override
  public Batch toBatch() {
    return new RaftBatch(columns, options, settings);
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new RaftMicroBatchStream(columns, options, settings);
  }

  /** Keeps the columns Spark asks for, in the table's order. */
  static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
    private StructType columns;
    private final Map<String, String> options;

    Builder(StructType columns, Map<String, String> options) {
      this.columns = columns;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType required) {
      columns = required;
    }

    @Override
    public Scan build() {
      return new RaftScan(columns, options);
    }
  }
}
