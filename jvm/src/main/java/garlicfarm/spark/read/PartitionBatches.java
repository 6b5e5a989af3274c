package garlicfarm.spark.read;

import java.io.IOException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's rows: its pieces in order, each a run of journal entries or a slice of a
 * committed batch. A batch is valid until the next call to next() (an Arrow payload's
 * vectors are reused by its next record batch), as Spark's ColumnarToRow expects.
 */
final class PartitionBatches implements PartitionReader<ColumnarBatch> {
  private final RaftInputPartition partition;
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
    this.reads = new MemberReads(partition.settings, partition.endpoint);
    TaskContext task = TaskContext.get();
    this.allocator = ArrowUtils.rootAllocator().newChildAllocator(
        "garlicfarm-columnar" + (task == null ? "" : "-" + task.taskAttemptId()), 0,
        Long.MAX_VALUE);
    this.cluster = UTF8String.fromString(partition.settings.cluster());
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (journal != null) {
        current = journal.next();
        if (current != null) {
          return true;
        }
        journal = null;
      }
      if (slice != null) {
        current = slice.next();
        if (current != null) {
          return true;
        }
        slice.close();
        slice = null;
      }
      if (piece >= partition.pieces.length) {
        current = null;
        return false;
      }
      long[] next = partition.pieces[piece++];    // a shape PlannedPartition checked
      if (next.length == 2) {
        journal = new JournalRun(reads, partition.columns, cluster, partition.failOnDataLoss,
            next[0], next[1]);
      } else {
        slice = new CommitSlice(reads, partition.columns, cluster, allocator, fetcher,
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
