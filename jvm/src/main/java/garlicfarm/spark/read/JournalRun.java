package garlicfarm.spark.read;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The visible journal entries of [start, stop), a page at a time: {@code read_journal}
 * answers a page as little-endian columns (docs/runtime-requests.md S8), checked here as
 * consensus/wire/journal_pages.py page_from_answer checks it, then one batch per page.
 */
final class JournalRun {
  private static final long PAGE_BYTES = 8 << 20;

  private final MemberReads reads;
  private final StructType columns;
  private final UTF8String cluster;
  private final boolean failOnDataLoss;
  private long start;
  private final long stop;

  JournalRun(MemberReads reads, StructType columns, UTF8String cluster, boolean failOnDataLoss,
             long start, long stop) {
    this.reads = reads;
    this.columns = columns;
    this.cluster = cluster;
    this.failOnDataLoss = failOnDataLoss;
    this.start = start;
    this.stop = stop;
  }

  /** The next page's rows; null once the range is read. */
  ColumnarBatch next() throws IOException {
    while (start < stop) {
      Map<?, ?> answer;
      try {
        Object reply = reads.read("read_journal",
            Map.of("start", start, "stop", stop, "max_bytes", PAGE_BYTES), start);
        if (!(reply instanceof Map<?, ?> map)) {
          throw bad("is not a map");
        }
        answer = map;
      } catch (EntriesGoneException gone) {
        if (failOnDataLoss) {
          throw DataLossException.range(start, gone);
        }
        start = Math.max(start + 1, gone.kept());   // skipped, as the Python reader warns
        continue;
      }
      ColumnarBatch batch = page(answer);
      if (batch != null) {
        return batch;
      }
    }
    return null;
  }

  /** One checked page; advances {@code start}; null when it holds no rows. */
  private ColumnarBatch page(Map<?, ?> answer) throws IOException {
    if (!(answer.get("stop") instanceof Long end) || end <= start || end > stop) {
      throw bad("ends at " + answer.get("stop") + ", outside (" + start + ", " + stop + "]");
    }
    if (!(answer.get("data") instanceof byte[] data)) {
      throw bad("has no records buffer");
    }
    long[] index = longs(answer, "index");
    long[] term = longs(answer, "term");
    long[] timestamp = longs(answer, "timestamp");
    int[] counts = uints(answer, "count");
    int[] sizes = uints(answer, "sizes");
    if (index.length != term.length || index.length != timestamp.length
        || index.length != counts.length) {
      throw bad("has columns of different lengths");
    }
    long records = 0;
    for (int k = 0; k < index.length; k++) {
      if (index[k] < start || index[k] >= end || (k > 0 && index[k] <= index[k - 1])) {
        throw bad("lists entries outside the range or out of order");
      }
      records += counts[k];
    }
    long bytes = 0;
    for (int size : sizes) {
      bytes += size;
    }
    if (records != sizes.length || bytes != data.length) {
      throw bad("counts " + records + " records of " + bytes + " bytes, and sends "
          + sizes.length + " of " + data.length);
    }
    start = end;
    if (sizes.length == 0) {
      return null;
    }
    int rows = sizes.length;
    OnHeapColumnVector values = new OnHeapColumnVector(rows, DataTypes.BinaryType);
    int offset = 0;
    for (int row = 0; row < rows; row++) {
      values.putByteArray(row, data, offset, sizes[row]);
      offset += sizes[row];
    }
    return new ColumnarBatch(EntryColumns.ofEntries(columns, cluster, rows, index, term,
        timestamp, counts, values), rows);
  }

  private long[] longs(Map<?, ?> answer, String name) throws IOException {
    if (!(answer.get(name) instanceof byte[] raw) || raw.length % 8 != 0) {
      throw bad("has a malformed '" + name + "' column");
    }
    long[] out = new long[raw.length / 8];
    ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
    return out;
  }

  private int[] uints(Map<?, ?> answer, String name) throws IOException {
    if (!(answer.get(name) instanceof byte[] raw) || raw.length % 4 != 0) {
      throw bad("has a malformed '" + name + "' column");
    }
    int[] out = new int[raw.length / 4];
    ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
    for (int value : out) {
      if (value < 0) {               // above 2^31: no record or entry is that large
        throw bad("has an impossible '" + name + "' value");
      }
    }
    return out;
  }

  private IOException bad(String what) {
    return new IOException("garlicfarm-columnar: read_journal(" + start + ", " + stop
        + "): the member's answer " + what);
  }
}
