package garlicfarm.spark.read;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The staged payloads [lo, hi) of the committed batch at {@code index}: rows only when
 * that commit entry made its batch visible (the member's verdict), all at the commit's
 * index, term and time. An Arrow payload (the sink's, zstd-compressed IPC) is decoded
 * here, its value column handed to Spark as is; any other payload is one row. Read from a
 * member that holds the lowest of them (a member keeps a suffix of the log, so none goes
 * missing half-way); when none does, the batch is skipped only if this slice is all of it
 * and failOnDataLoss is false, else DataLossException: never part of a batch.
 */
final class CommitSlice {
  private static final Logger LOG = LoggerFactory.getLogger(CommitSlice.class);
  static final int PREFETCH = 2;

  private final MemberReads reads;
  private final StructType columns;
  private final UTF8String cluster;
  private final BufferAllocator allocator;
  private final boolean failOnDataLoss;
  private final long index;
  private final int lo;
  private final int hi;
  private CommitHeader commit;
  private int next;                   // position in commit.staged of the next payload
  private boolean started;
  private ArrowStreamReader payload;  // the Arrow payload being read, if any
  private final ExecutorService fetcher;
  private final Deque<Future<StagedPayload>> ahead = new ArrayDeque<>();

  CommitSlice(MemberReads reads, StructType columns, UTF8String cluster,
              BufferAllocator allocator, ExecutorService fetcher, boolean failOnDataLoss,
              long index, int lo, int hi) {
    this.reads = reads;
    this.fetcher = fetcher;
    this.columns = columns;
    this.cluster = cluster;
    this.allocator = allocator;
    this.failOnDataLoss = failOnDataLoss;
    this.index = index;
    this.lo = lo;
    this.hi = hi;
  }

  /** The next batch of rows; null once the slice is read (or shows nothing). */
  ColumnarBatch next() throws IOException {
    if (commit == null && !open()) {
      return null;
    }
    try {
      while (true) {
        if (payload != null) {
          if (payload.loadNextBatch()) {
            return arrowBatch(payload.getVectorSchemaRoot());
          }
          closePayload();
        }
        if (next >= Math.min(hi, commit.staged.length)) {
          return null;
        }
        StagedPayload staged = fetched();
        started = true;
        if (!staged.contentType().equals("arrow")) {
          OnHeapColumnVector value = new OnHeapColumnVector(1, DataTypes.BinaryType);
          value.putByteArray(0, staged.payload());
          return batch(1, value);
        }
        payload = new ArrowStreamReader(new ByteArrayReadableSeekableByteChannel(
            staged.payload()), allocator, CommonsCompressionFactory.INSTANCE);
      }
    } catch (EntriesGoneException gone) {
      boolean whole = lo == 0 && hi >= commit.staged.length;
      if (whole && !started && !failOnDataLoss) {
        LOG.warn("{} (skipped: failOnDataLoss is false)", DataLossException.batch(index,
            commit.queryId, commit.batchId, commit.staged, gone, false).getMessage());
        next = commit.staged.length;
        return null;
      }
      throw DataLossException.batch(index, commit.queryId, commit.batchId, commit.staged,
          gone, started || !failOnDataLoss);
    }
  }

  /** The payload at position {@code next}, fetched ahead: the farm serves the next
   *  {@link #PREFETCH} while this thread decodes one. */
  private StagedPayload fetched() throws IOException {
    int end = Math.min(hi, commit.staged.length);
    while (ahead.size() < PREFETCH && next + ahead.size() < end) {
      long at = commit.staged[next + ahead.size()];
      ahead.add(fetcher.submit(() -> StagedPayload.of(at, entry(at, true))));
    }
    next++;
    try {
      return ahead.poll().get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw new IOException("garlicfarm-columnar: fetching a staged payload failed", e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("garlicfarm-columnar: interrupted");
    }
  }

  /** Reads the commit entry; false when it shows no rows. */
  private boolean open() throws IOException {
    Object answer;
    try {
      answer = entry(index, false);
    } catch (EntriesGoneException gone) {
      throw DataLossException.commitGone(index, gone);
    }
    commit = CommitHeader.of(index, answer);
    if (commit == null) {
      return false;
    }
    next = lo;
    long[] wanted = Arrays.copyOfRange(commit.staged, Math.min(lo, commit.staged.length),
        Math.min(hi, commit.staged.length));
    if (wanted.length > 0) {
      long low = Arrays.stream(wanted).min().getAsLong();
      if (!reads.holds(low)) {
        entry(low, false);              // moves the reads to a member holding it
      }
    }
    return true;
  }

  /** read_entries of the one entry {@code at}, its header or (payloads) all of it. */
  private Object entry(long at, boolean payloads) throws IOException {
    return reads.read("read_entries", Map.of("start", at, "stop", at + 1, "max_bytes",
        payloads ? 1L << 30 : 1L << 20, "payloads", payloads), at);
  }

  private ColumnarBatch arrowBatch(VectorSchemaRoot root) throws IOException {
    FieldVector vector = root.getVector("value");
    if (vector == null) {
      throw new IOException("garlicfarm-columnar: log index " + index + ": a committed "
          + "'arrow' payload has no 'value' column (columns: "
          + root.getSchema().getFields() + ")");
    }
    int rows = root.getRowCount();
    if (vector instanceof VarBinaryVector) {
      return batch(rows, new ArrowColumnVector(vector));
    }
    OnHeapColumnVector copy = new OnHeapColumnVector(Math.max(rows, 1), DataTypes.BinaryType);
    for (int row = 0; row < rows; row++) {
      Object value = vector.getObject(row);
      if (value == null) {
        copy.putNull(row);
      } else if (value instanceof byte[] bytes) {
        copy.putByteArray(row, bytes);
      } else if (value instanceof org.apache.arrow.vector.util.Text text) {
        copy.putByteArray(row, text.copyBytes());
      } else {
        throw new IOException("garlicfarm-columnar: log index " + index + ": the 'value' "
            + "column of a committed payload is " + vector.getField().getType()
            + ", not binary");
      }
    }
    return batch(rows, copy);
  }

  private ColumnarBatch batch(int rows, ColumnVector value) {
    return new ColumnarBatch(EntryColumns.ofEntry(columns, cluster, rows, index, commit.term,
        EntryColumns.COMMIT, commit.timestampMs, value), rows);
  }

  void close() throws IOException {
    for (Future<StagedPayload> pending : ahead) {
      pending.cancel(true);
    }
    ahead.clear();
    closePayload();
  }

  private void closePayload() throws IOException {
    if (payload != null) {
      payload.close();
      payload = null;
    }
  }

  /** A commit entry's header (read_entries without payloads), when it shows rows. */
  record CommitHeader(long term, long timestampMs, String queryId, long batchId, long[] staged) {
    /** Null unless the entry is a commit that made its batch visible. */
    static CommitHeader of(long index, Object answer) throws IOException {
      if (!(answer instanceof Map<?, ?> map) || !(map.get("headers") instanceof List<?> headers)
          || headers.size() != 1 || !(headers.get(0) instanceof List<?> header)
          || header.size() < 8 || !Long.valueOf(index).equals(header.get(0))) {
        throw new IOException("garlicfarm-columnar: read_entries(" + index + "): the member's "
            + "answer is not one entry header");
      }
      if (!"commit".equals(header.get(2)) || !(header.get(6) instanceof List<?> commit)
          || commit.size() < 5 || !Boolean.TRUE.equals(commit.get(4))) {
        return null;                  // not a commit, or one that did not take effect
      }
      if (!(header.get(1) instanceof Long term) || !(header.get(4) instanceof Long timestamp)
          || !(commit.get(1) instanceof Long batchId) || !(commit.get(2) instanceof List<?> staged)) {
        throw new IOException("garlicfarm-columnar: read_entries(" + index + "): the member's "
            + "commit header is malformed: " + header);
      }
      long[] indexes = new long[staged.size()];
      for (int i = 0; i < indexes.length; i++) {
        if (!(staged.get(i) instanceof Long at) || at <= 0) {
          throw new IOException("garlicfarm-columnar: read_entries(" + index + "): the commit "
              + "names " + staged.get(i) + ", not a log index");
        }
        indexes[i] = at;
      }
      return new CommitHeader(term, timestamp, String.valueOf(commit.get(0)), batchId, indexes);
    }
  }
}
