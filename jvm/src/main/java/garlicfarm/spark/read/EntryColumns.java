package garlicfarm.spark.read;

import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The entry's columns of a batch of rows (cluster, index, term, type, timestamp) beside
 * its values, in the order of the columns the query reads. Rows of one entry (a committed
 * payload) share them: constant vectors, no per-row work. Rows of many entries (a page of
 * journal entries) get each entry's values repeated over its records.
 */
final class EntryColumns {
  static final UTF8String JOURNAL = UTF8String.fromString("journal");
  static final UTF8String COMMIT = UTF8String.fromString("commit");

  private EntryColumns() {
  }

  /** The columns of {@code rows} values of one entry; {@code values} is the value column. */
  static ColumnVector[] ofEntry(StructType columns, UTF8String cluster, int rows, long index,
                                long term, UTF8String type, long timestampMs,
                                ColumnVector values) {
    StructField[] fields = columns.fields();
    ColumnVector[] out = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      if (name.equals("value")) {
        out[i] = values;
        continue;
      }
      ConstantColumnVector constant = new ConstantColumnVector(rows, fields[i].dataType());
      switch (name) {
        case "index" -> constant.setLong(index);
        case "term" -> constant.setLong(term);
        case "timestamp" -> constant.setLong(timestampMs * 1000);
        case "type" -> constant.setUtf8String(type);
        case "cluster" -> constant.setUtf8String(cluster);
        default -> throw new IllegalArgumentException("garlicfarm-columnar: no column " + name);
      }
      out[i] = constant;
    }
    return out;
  }

  /**
   * The columns of journal entries: entry k's {@code counts[k]} records carry its index,
   * term and timestamp; {@code values} already holds the records in order.
   */
  static ColumnVector[] ofEntries(StructType columns, UTF8String cluster, int rows,
                                  long[] index, long[] term, long[] timestampMs, int[] counts,
                                  ColumnVector values) {
    StructField[] fields = columns.fields();
    ColumnVector[] out = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      DataType type = fields[i].dataType();
      switch (name) {
        case "value" -> out[i] = values;
        case "index" -> out[i] = repeated(rows, type, index, counts, 1);
        case "term" -> out[i] = repeated(rows, type, term, counts, 1);
        case "timestamp" -> out[i] = repeated(rows, type, timestampMs, counts, 1000);
        case "type", "cluster" -> {
          ConstantColumnVector constant = new ConstantColumnVector(rows, type);
          constant.setUtf8String(name.equals("type") ? JOURNAL : cluster);
          out[i] = constant;
        }
        default -> throw new IllegalArgumentException("garlicfarm-columnar: no column " + name);
      }
    }
    return out;
  }

  private static ColumnVector repeated(int rows, DataType type, long[] perEntry, int[] counts,
                                       long scale) {
    OnHeapColumnVector vector = new OnHeapColumnVector(Math.max(rows, 1), type);
    int row = 0;
    for (int k = 0; k < counts.length; k++) {
      vector.putLongs(row, counts[k], perEntry[k] * scale);
      row += counts[k];
    }
    return vector;
  }
}
