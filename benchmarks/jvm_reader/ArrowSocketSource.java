package garlicfarm.bench;

import java.io.DataInputStream;
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
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel;
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
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

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
 * UTF-8 bytes; read a status (a 4-byte big-endian length, 0 when the spec is accepted,
 * else that many bytes of UTF-8 error message); read an Arrow IPC stream (schema,
 * batches, end-of-stream marker); read the trailer, a status again (0: the stream is
 * whole). A stream cut short (no trailer) fails the task, so an error in
 * the server never passes for fewer rows.
 *
 * <p>Option mode=payloads (raft only): the server forwards each committed payload as the
 * farm stores it (an Arrow IPC stream of one binary `value` column, zstd-compressed
 * buffers) in frames: int32 1, int64 index, int64 term, int64 timestamp ms, int32 length,
 * the payload; then int32 0 and the trailer. This reader decodes the payloads itself and
 * adds the entry's columns as constant vectors (option `cluster` names the farm): what is
 * left in Python is fetching entries and deciding what is visible.
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
    private final boolean payloads;
    private final String cluster;

    SocketScan(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      String address = options.get("address");
      if (address == null || !address.contains(":")) {
        throw new IllegalArgumentException("arrowsocket: option 'address' must be host:port");
      }
      int colon = address.lastIndexOf(':');
      this.host = address.substring(0, colon);
      this.port = Integer.parseInt(address.substring(colon + 1));
      this.payloads = "payloads".equals(options.getOrDefault("mode", "stream"));
      this.cluster = options.getOrDefault("cluster", "");
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
        parts[i] = new SocketPartition(host, port, specs.get(i), i, payloads ? schema : null,
            cluster);
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
    final StructType payloadSchema;   // mode=payloads: the columns to build; else null
    final String cluster;

    SocketPartition(String host, int port, String spec, int number, StructType payloadSchema,
                    String cluster) {
      this.host = host;
      this.port = port;
      this.spec = spec;
      this.number = number;
      this.payloadSchema = payloadSchema;
      this.cluster = cluster;
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
        SocketPartition socket = (SocketPartition) partition;
        return socket.payloadSchema == null ? new SocketBatchReader(socket)
            : new PayloadBatchReader(socket);
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
      channel = connect(partition);
      allocator = ArrowUtils.rootAllocator().newChildAllocator(
          "arrowsocket-" + partition.number, 0, Long.MAX_VALUE);
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
      checkTrailer(new DataInputStream(java.nio.channels.Channels.newInputStream(channel)));
      return false;
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

  /** Connects to the partition's server and sends its spec. */
  static SocketChannel connect(SocketPartition partition) throws IOException {
    SocketChannel channel = SocketChannel.open(
        new InetSocketAddress(partition.host, partition.port));
    try {
      channel.socket().setTcpNoDelay(true);
      byte[] spec = partition.spec.getBytes(StandardCharsets.UTF_8);
      ByteBuffer request = ByteBuffer.allocate(4 + spec.length);
      request.putInt(spec.length).put(spec).flip();
      while (request.hasRemaining()) {
        channel.write(request);
      }
      checkStatus(new DataInputStream(java.nio.channels.Channels.newInputStream(channel)),
          "arrowsocket: the server closed before answering");
      return channel;
    } catch (IOException | RuntimeException e) {
      channel.close();
      throw e;
    }
  }

  /** The server's last word: 0, or why the stream ended early. */
  static void checkTrailer(DataInputStream in) throws IOException {
    checkStatus(in, "arrowsocket: the stream ended without its trailer");
  }

  /** A status: 0, or the server's error (thrown). */
  static void checkStatus(DataInputStream in, String whenMissing) throws IOException {
    int size;
    try {
      size = in.readInt();
    } catch (EOFException e) {
      throw new EOFException(whenMissing);
    }
    if (size != 0) {
      byte[] message = new byte[size];
      in.readFully(message);
      throw new IOException("arrowsocket server failed: "
          + new String(message, StandardCharsets.UTF_8));
    }
  }

  /**
   * mode=payloads: decodes each forwarded farm payload (zstd Arrow IPC) here, one
   * ColumnarBatch per record batch in it; the value column is the payload's vector, the
   * entry's columns are constants. A payload's reader (and its buffers) lives until the
   * next payload is opened or the task ends.
   */
  static final class PayloadBatchReader implements PartitionReader<ColumnarBatch> {
    private final SocketChannel channel;
    private final DataInputStream in;
    private final BufferAllocator allocator;
    private final StructType schema;
    private final UTF8String cluster;
    private static final UTF8String COMMIT = UTF8String.fromString("commit");
    private ArrowStreamReader payload;
    private long index;
    private long term;
    private long timestampMs;
    private ColumnarBatch current;
    private boolean finished;

    PayloadBatchReader(SocketPartition partition) throws IOException {
      channel = connect(partition);
      in = new DataInputStream(new java.io.BufferedInputStream(
          java.nio.channels.Channels.newInputStream(channel), 1 << 16));
      schema = partition.payloadSchema;
      cluster = UTF8String.fromString(partition.cluster);
      allocator = ArrowUtils.rootAllocator().newChildAllocator(
          "arrowsocket-payloads-" + partition.number, 0, Long.MAX_VALUE);
    }

    @Override
    public boolean next() throws IOException {
      while (!finished) {
        if (payload != null && payload.loadNextBatch()) {
          current = batch(payload.getVectorSchemaRoot());
          return true;
        }
        closePayload();
        if (in.readInt() == 0) {
          finished = true;
          current = null;
          checkTrailer(in);
          return false;
        }
        index = in.readLong();
        term = in.readLong();
        timestampMs = in.readLong();
        byte[] bytes = new byte[in.readInt()];
        in.readFully(bytes);
        payload = new ArrowStreamReader(new ByteArrayReadableSeekableByteChannel(bytes),
            allocator, CommonsCompressionFactory.INSTANCE);
      }
      return false;
    }

    private ColumnarBatch batch(VectorSchemaRoot root) {
      int rows = root.getRowCount();
      StructField[] fields = schema.fields();
      ColumnVector[] columns = new ColumnVector[fields.length];
      for (int i = 0; i < fields.length; i++) {
        String name = fields[i].name();
        if (name.equals("value")) {
          columns[i] = new ArrowColumnVector(root.getVector("value"));
          continue;
        }
        ConstantColumnVector constant = new ConstantColumnVector(rows, fields[i].dataType());
        switch (name) {
          case "index": constant.setLong(index); break;
          case "term": constant.setLong(term); break;
          case "timestamp": constant.setLong(timestampMs * 1000); break;
          case "type": constant.setUtf8String(COMMIT); break;
          case "cluster": constant.setUtf8String(cluster); break;
          default: throw new IllegalArgumentException("payloads mode: no column " + name);
        }
        columns[i] = constant;
      }
      return new ColumnarBatch(columns, rows);
    }

    private void closePayload() throws IOException {
      if (payload != null) {
        payload.close();
        payload = null;
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
        closePayload();
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
