package garlicfarm.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("garlicfarm-columnar")}: the committed log of a Raft farm, read by the JVM
 * into columnar batches. The same rows as {@code format("garlicfarm")} with {@code kind=raft}
 * (its options, its offsets, its planning: the planning runs in Python, see
 * {@link garlicfarm.spark.planning.PythonPlanner}), without a Python worker on the
 * executors: PySpark's Python data sources hand rows to the JVM one by one, which keeps
 * them below Spark's own parquet reader (benchmarks/RESULTS.md).
 */
public final class ColumnarRaftSource implements TableProvider, DataSourceRegister {
  /** The raft source's columns (pyspark_farm/raft/rows.py RAFT_COLUMNS_DDL); with the
   *  `partitions` option {@link #PARTITION_DDL} follows. */
  public static final String COLUMNS_DDL =
      "cluster string, index long, term long, type string, value binary, timestamp timestamp";

  @Override
  public String shortName() {
    return "garlicfarm-columnar";
  }

  /** The column the `partitions` option adds, last (pyspark_farm/raft/partitions.py). */
  public static final String PARTITION_DDL = "partition int";

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return columns(options);
  }

  /**
   * The raft source's columns, with `partition int` last when the `partitions` option is
   * set: as format("garlicfarm"), the schema comes from the options alone (the planner
   * checks the option's value and the farm when the scan or stream opens).
   */
  static StructType columns(Map<String, String> options) {
    boolean partitioned = options.keySet().stream().anyMatch("partitions"::equalsIgnoreCase);
    return StructType.fromDDL(partitioned ? COLUMNS_DDL + ", " + PARTITION_DDL : COLUMNS_DDL);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    StructType columns = columns(properties);
    if (!schema.equals(columns)) {
      throw new IllegalArgumentException("garlicfarm-columnar: the schema is the raft "
          + "source's own (" + columns.toDDL() + "); drop the .schema(...) call, select or "
          + "cast columns after load(), or read with format(\"garlicfarm\") and valueFormat");
    }
    return new RaftTable(columns, properties);
  }
}
