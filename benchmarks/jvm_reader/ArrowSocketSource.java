package garlicfarm.bench;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A benchmark-only DataSource V2 reading Arrow IPC streams from a TCP server, columnar:
 * the design of parquet's vectorized reader (ColumnarBatch over column vectors, turned
 * into rows by Spark's ColumnarToRow) with the rows coming from elsewhere.
 *
 * <pre>
 * spark.read.format("arrowsocket").schema(ddl)
 *     .option("address", "host:port")
 *     .option("specs", "spec1\nspec2")   // one opaque string per Spark partition
 *     .load()
 * </pre>
 *
 * Protocol, per partition: connect; send the spec as a 4-byte big-endian length and its
 * UTF-8 bytes; read an Arrow IPC stream (schema, batches, end-of-stream marker); read a
 * trailer: a 4-byte big-endian length, 0 when the stream is whole, else that many bytes
 * of UTF-8 error message. A stream cut short (no trailer) fails the task, so an error in
 * the server never passes for fewer rows.
 */
public final class ArrowSocketSource implements TableProvider, DataSourceRegister {

  @Override
  public String shortName() {
    return "arrowsocket";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    String ddl = options.get("schema");
    if (ddl == null) {
      throw new IllegalArgumentException("arrowsocket: give a schema (.schema(...) or option 'schema')");
    }
    return StructType.fromDDL(ddl);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SocketTable(schema, new CaseInsensitiveStringMap(properties));
  }

  /** The table: one batch scan, no pruning or filters (Spark filters what it reads). */
  static final class SocketTable implements Table, SupportsRead {
    private final StructType schema;
    private final CaseInsensitiveStringMap options;

    SocketTable(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.options = options;
    }

    @Override
    public String name() {
      return "arrowsocket";
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
      CaseInsensitiveStringMap merged = scanOptions.isEmpty() ? options : scanOptions;
      return () -> new SocketScan(schema, merged);
    }
  }

  /** The scan and its batch: one input partition per spec. */
  static final class SocketScan implements Scan, Batch {
    private final StructType schema;
    private final String host;
    private final int port;
    private final List<String> specs;

    SocketScan(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      String address = options.get("address");
      if (address == null || !address.contains(":")) {
        throw new IllegalArgumentException("arrowsocket: option 'address' must be host:port");
      }
      int colon = address.lastIndexOf(':');
      this.host = address.substring(0, colon);
      this.port = Integer.parseInt(address.substring(colon + 1));
      this.specs = new ArrayList<>();
      for (String spec : options.getOrDefault("specs", "").split("\n")) {
        if (!spec.isEmpty()) {
          specs.add(spec);
        }
      }
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      InputPartition[] parts = new InputPartition[specs.size()];
      for (int i = 0; i < parts.length; i++) {
        parts[i] = new SocketPartition(host, port, specs.get(i), i);
      }
      return parts;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new SocketReaderFactory();
    }
  }

  /** One task: where to connect and what to ask for. */
  static final class SocketPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String host;
    final int port;
    final String spec;
    final int number;

    SocketPartition(String host, int port, String spec, int number) {
      this.host = host;
      this.port = port;
      this.spec = spec;
      this.number = number;
    }
  }

  /** Columnar readers only: the row path is the point of comparison, not a fallback. */
  static final class SocketReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("arrowsocket reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      try {
        return new SocketBatchReader((SocketPartition) partition);
      } catch (IOException e) {
        throw new RuntimeException("arrowsocket: cannot open partition "
            + ((SocketPartition) partition).number, e);
      }
    }
  }

  /**
   * Reads one partition's stream. The batches' buffers belong to this reader's child
   * allocator; each loadNextBatch reuses the root's vectors, so a ColumnarBatch is valid
   * until the next call to next() (what Spark's ColumnarToRow expects). close() frees
   * the vectors, then the allocator (which would report a leak), then the socket.
   */
  static final class SocketBatchReader implements PartitionReader<ColumnarBatch> {
    private final SocketChannel channel;
    private final BufferAllocator allocator;
    private final ArrowStreamReader reader;
    private ColumnarBatch current;
    private boolean finished;

    SocketBatchReader(SocketPartition partition) throws IOException {
      channel = SocketChannel.open(new InetSocketAddress(partition.host, partition.port));
      try {
        channel.socket().setTcpNoDelay(true);
        byte[] spec = partition.spec.getBytes(StandardCharsets.UTF_8);
        ByteBuffer request = ByteBuffer.allocate(4 + spec.length);
        request.putInt(spec.length).put(spec).flip();
        while (request.hasRemaining()) {
          channel.write(request);
        }
        allocator = ArrowUtils.rootAllocator().newChildAllocator(
            "arrowsocket-" + partition.number, 0, Long.MAX_VALUE);
      } catch (IOException | RuntimeException e) {
        channel.close();
        throw e;
      }
      reader = new ArrowStreamReader(channel, allocator, CommonsCompressionFactory.INSTANCE);
    }

    @Override
    public boolean next() throws IOException {
      if (finished) {
        return false;
      }
      if (reader.loadNextBatch()) {
        VectorSchemaRoot root = reader.getVectorSchemaRoot();
        List<FieldVector> vectors = root.getFieldVectors();
        ColumnVector[] columns = new ColumnVector[vectors.size()];
        for (int i = 0; i < columns.length; i++) {
          columns[i] = new ArrowColumnVector(vectors.get(i));
        }
        current = new ColumnarBatch(columns, root.getRowCount());
        return true;
      }
      finished = true;
      current = null;
      checkTrailer();
      return false;
    }

    /** The server's last word: 0, or why the stream ended early. */
    private void checkTrailer() throws IOException {
      ByteBuffer length = readFully(4);
      int size = length.getInt();
      if (size != 0) {
        String message = StandardCharsets.UTF_8.decode(readFully(size)).toString();
        throw new IOException("arrowsocket server failed: " + message);
      }
    }

    private ByteBuffer readFully(int size) throws IOException {
      ByteBuffer buffer = ByteBuffer.allocate(size);
      while (buffer.hasRemaining()) {
        if (channel.read(buffer) < 0) {
          throw new EOFException("arrowsocket: the stream ended without its trailer");
        }
      }
      buffer.flip();
      return buffer;
    }

    @Override
    public ColumnarBatch get() {
      return current;
    }

    @Override
    public void close() throws IOException {
      current = null;
      try {
        reader.close();        // the vectors' buffers, and the channel
      } finally {
        try {
          allocator.close();
        } finally {
          channel.close();
        }
      }
    }
  }
}
