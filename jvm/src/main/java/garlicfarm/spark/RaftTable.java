package garlicfarm.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A farm's log as a table that can be scanned as a batch or read as a stream. */
final class RaftTable implements Table, SupportsRead {
  private final StructType schema;
  private final Map<String, String> options;

  RaftTable(StructType schema, Map<String, String> options) {
    this.schema = schema;
    this.options = options;
  }

  @Override
  public String name() {
    return "garlicfarm-columnar";
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    Map<String, String> merged = new HashMap<>(options);
    merged.putAll(scanOptions.asCaseSensitiveMap());
    return new RaftScan.Builder(schema, merged);
  }
}
