package garlicfarm.spark.read;

import java.io.IOException;
import java.util.Arrays;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's rows: its pieces in order, each a run of journal entries or a slice of a
 * committed batch, read in its farm partition (and, with the `partitions` option, a
 * constant `partition` column beside the entries' columns). A batch is valid until the
 * next call to next() (an Arrow payload's vectors are reused by its next record batch),
 * as Spark's ColumnarToRow expects.
 */
final class PartitionBatches implements PartitionReader<ColumnarBatch> {
  /** The column the `partitions` option adds (pyspark_farm/raft/partitions.py). */
  static final String PARTITION_COLUMN = "partition";
  private final RaftInputPartition partition;
  private final StructType entryColumns;     // the columns read, less `partition`
  private final int partitionAt;             // where `partition` is among them; -1: absent
  private final MemberReads reads;
  private final BufferAllocator allocator;
  private final UTF8String cluster;
  private final ExecutorService fetcher = Executors.newSingleThreadExecutor(runnable -> {
    Thread thread = new Thread(runnable, "garlicfarm-columnar-fetch");
    thread.setDaemon(true);
    return thread;
  });
  private int piece;
  private JournalRun journal;
  private CommitSlice slice;
  private ColumnarBatch current;

  PartitionBatches(RaftInputPartition partition) {
    this.partition = partition;
    this.reads = new MemberReads(partition.settings, partition.endpoint, partition.farmPartition);
    this.partitionAt = Arrays.asList(partition.columns.fieldNames())
        .indexOf(PARTITION_COLUMN);
    this.entryColumns = partitionAt < 0 ? partition.columns : new StructType(
        Arrays.stream(partition.columns.fields())
            .filter(f -> !f.name().equals(PARTITION_COLUMN)).toArray(StructField[]::new));
    TaskContext task = TaskContext.get();
    this.allocator = ArrowUtils.rootAllocator().newChildAllocator(
        "garlicfarm-columnar" + (task == null ? "" : "-" + task.taskAttemptId()), 0,
        Long.MAX_VALUE);
    this.cluster = UTF8String.fromString(partition.settings.cluster());
  }

  @Override
  public boolean next() throws IOException {
    ColumnarBatch entries = nextOfEntries();
    current = entries == null || partitionAt < 0 ? entries : withPartition(entries);
    return current != null;
  }

  /** {@code entries}' columns with the constant `partition` column in its place. */
  private ColumnarBatch withPartition(ColumnarBatch entries) {
    int rows = entries.numRows();
    ColumnVector[] out = new ColumnVector[entries.numCols() + 1];
    ConstantColumnVector constant = new ConstantColumnVector(rows, DataTypes.IntegerType);
    constant.setInt(partition.farmPartition);
    for (int i = 0, from = 0; i < out.length; i++) {
      out[i] = i == partitionAt ? constant : entries.column(from++);
    }
    return new ColumnarBatch(out, rows);
  }

  /** The next batch of the entries' columns, or null after the last piece. */
  private ColumnarBatch nextOfEntries() throws IOException {
    while (true) {
      if (journal != null) {
        ColumnarBatch batch = journal.next();
        if (batch != null) {
          return batch;
        }
        journal = null;
      }
      if (slice != null) {
        ColumnarBatch batch = slice.next();
        if (batch != null) {
          return batch;
        }
        slice.close();
        slice = null;
      }
      if (piece >= partition.pieces.length) {
        return null;
      }
      long[] next = partition.pieces[piece++];    // a shape PlannedPartition checked
      if (next.length == 2) {
        journal = new JournalRun(reads, entryColumns, cluster, partition.failOnDataLoss,
            next[0], next[1]);
      } else {
        slice = new CommitSlice(reads, entryColumns, cluster, allocator, fetcher,
            partition.failOnDataLoss, next[0], Math.toIntExact(next[2]),
            Math.toIntExact(next[3]));
      }
    }
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    current = null;
    try {
      if (slice != null) {
        slice.close();
      }
    } finally {
      fetcher.shutdownNow();
      try {
        fetcher.awaitTermination(10, TimeUnit.SECONDS);   // before its links close
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      try {
        reads.close();
      } finally {
        allocator.close();
      }
    }
  }
}
