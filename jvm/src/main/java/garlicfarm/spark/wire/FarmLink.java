package garlicfarm.spark.wire;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One authenticated connection to one farm member, for the JVM reader's calls (read_journal,
 * entry_rows, ...): the Garlic Farm handshake, Hello / Welcome, then Call / Reply frames
 * (docs/protocol.md, "Extension frames"). Calls on a link run one at a time. A link that timed
 * out, broke or received a corrupt frame is closed (its state is unknown); an error Reply
 * leaves it usable.
 */
public final class FarmLink implements AutoCloseable {
  /** The largest frame body accepted (the nodes' own limit on a log data size). */
  public static final int MAX_BODY = 256 << 20;
  private static final int HEAD = 21;
  private static final int FIRST_EXTENSION = 0x24;
  private static final int LAST_EXTENSION = 0x35;
  private static final int HELLO = 0x30;
  private static final int WELCOME = 0x31;
  private static final int CALL = 0x32;
  private static final int REPLY = 0x33;
  private static final int EVENT = 0x35;
  private static final SecureRandom RANDOM = new SecureRandom();

  private final String endpoint;
  private final FarmSettings settings;
  private final Stream stream;
  private Welcome welcome;
  private long nextCallId = 1;
  private volatile boolean closed;

  private record Frame(int type, List<Object> fields) {
  }

  private FarmLink(String endpoint, FarmSettings settings, Stream stream) {
    this.endpoint = endpoint;
    this.settings = settings;
    this.stream = stream;
  }

  /**
   * Connects (TCP; TLS when tls.ca is set, verifying the member's certificate and host name
   * against that CA), handshakes, sends Hello and reads the Welcome, all within the
   * settings' timeout. The endpoint is "host:port" (a tcp:// prefix is allowed).
   */
  public static FarmLink open(String endpoint, FarmSettings settings) throws FarmException {
    String target = FarmSettings.parseEndpoints(endpoint).get(0);
    long deadline = Stream.deadline(settings.timeoutSeconds());
    FarmLink link = new FarmLink(target, settings, Handshake.connect(target, settings, deadline));
    try {
      byte[] clientId = new byte[16];
      RANDOM.nextBytes(clientId);
      link.stream.write(frame(HELLO, Msgpack.pack(List.of(clientId, 1L))));
      Frame frame = link.read(deadline, "waiting for the Welcome");
      if (frame.type != WELCOME) {
        throw link.protocol("answered Hello with a frame of type 0x" + Integer.toHexString(frame.type)
            + ", not a Welcome");
      }
      link.welcome = link.welcome(frame.fields);
      return link;
    } catch (FarmException e) {
      link.close();
      throw e;
    }
  }

  public Welcome welcome() {
    return welcome;
  }

  public String endpoint() {
    return endpoint;
  }

  /** False once closed (by close(), or after a timeout, a broken connection or a corrupt frame). */
  public boolean isOpen() {
    return !closed;
  }

  /**
   * One Call, blocking until its Reply (within the settings' timeout). Args go as a msgpack map
   * (Long/Integer, Double, String, byte[], Boolean, null, List, Map); the result comes back as
   * Long (every integer), Double, Boolean, String, byte[], List, Map or null. A Reply with an
   * error code throws FarmException with that code, the member's message and detail.
   */
  public synchronized Object call(String op, Map<String, ?> args) throws FarmException {
    if (closed) {
      throw new FarmException(FarmException.UNAVAILABLE, "the link to " + endpoint + " is closed: open a new one",
          endpoint);
    }
    long callId = nextCallId++;
    long deadline = Stream.deadline(settings.timeoutSeconds());
    String what = "waiting for the answer to " + op;
    stream.write(frame(CALL, Msgpack.pack(List.of(callId, op, args == null ? Map.of() : args))));
    while (true) {
      Frame frame = read(deadline, what);
      if (frame.type == EVENT) {
        continue;
      }
      if (frame.type != REPLY) {
        throw protocol("answered " + op + " with a frame of type 0x" + Integer.toHexString(frame.type));
      }
      List<Object> f = frame.fields;
      long id = field(f, 5, 0, "Reply.call_id", Long.class);
      if (id != callId) {
        throw protocol("answered call " + callId + " (" + op + ") with the Reply of call " + id);
      }
      long code = field(f, 5, 1, "Reply.code", Long.class);
      String message = field(f, 5, 3, "Reply.message", String.class);
      Map<?, ?> detail = field(f, 5, 4, "Reply.detail", Map.class);
      if (code != 0) {
        throw new FarmException((int) code, op + " at " + endpoint + " failed ("
            + FarmException.codeName((int) code) + "): " + message, detail, endpoint);
      }
      return f.get(2);
    }
  }

  @Override
  public void close() {
    closed = true;
    stream.close();
  }

  private static byte[] frame(int type, byte[] body) {
    return ByteBuffer.allocate(HEAD + body.length).put((byte) type).putInt(0).putInt(0).putLong(0)
        .putInt(body.length).put(body).array();
  }

  /** The next frame: an extension frame whose size is checked before its body is read. */
  @SuppressWarnings("unchecked")
  private Frame read(long deadline, String what) throws FarmException {
    byte[] head = new byte[HEAD];
    stream.readFully(head, deadline, what);
    ByteBuffer h = ByteBuffer.wrap(head);
    int type = h.get(0) & 0xff;
    int size = h.getInt(17);
    if (type < FIRST_EXTENSION || type > LAST_EXTENSION) {
      throw protocol("sent a frame of type " + type + " while we were " + what + " (a client expects only "
          + "extension frames)");
    }
    if (size < 0 || size > MAX_BODY) {
      throw protocol("sent a frame of type 0x" + Integer.toHexString(type) + " with bodySize " + size
          + " (the limit is " + MAX_BODY + ")");
    }
    byte[] body = new byte[size];
    stream.readFully(body, deadline, what);
    Object fields;
    try {
      fields = Msgpack.unpack(body);
    } catch (Msgpack.Bad e) {
      throw protocol("sent a frame of type 0x" + Integer.toHexString(type) + " whose body is bad: "
          + e.getMessage());
    }
    if (!(fields instanceof List)) {
      throw protocol("sent a frame of type 0x" + Integer.toHexString(type) + " whose body is not an array");
    }
    return new Frame(type, (List<Object>) fields);
  }

  private <T> T field(List<Object> fields, int count, int index, String name, Class<T> type) throws FarmException {
    Object value = fields.size() == count ? fields.get(index) : null;
    if (!type.isInstance(value)) {
      throw protocol("sent a " + name + " that is not a " + type.getSimpleName()
          + (fields.size() == count ? "" : " (the frame has " + fields.size() + " fields, not " + count + ")"));
    }
    return type.cast(value);
  }

  private FarmException protocol(String what) {
    close();
    return new FarmException(FarmException.PROTOCOL, endpoint + " " + what + ": a corrupt stream, or not a "
        + "garlicfarm member of this version", endpoint);
  }

  private Welcome welcome(List<Object> f) throws FarmException {
    long nodeId = field(f, 5, 0, "Welcome.node_id", Long.class);
    String cluster = field(f, 5, 1, "Welcome.cluster", String.class);
    Object leader = f.get(2);
    if (leader != null && !(leader instanceof Long)) {
      throw protocol("sent a Welcome.leader_id that is neither an integer nor nil");
    }
    String role = field(f, 5, 3, "Welcome.role", String.class);
    byte[] configuration = field(f, 5, 4, "Welcome.configuration", byte[].class);
    return new Welcome(nodeId, cluster, (Long) leader, role, members(configuration));
  }

  /** {id: endpoint} of a configuration's JSON; empty for a member with no configuration yet. */
  private static Map<Long, String> members(byte[] configuration) {
    Map<Long, String> members = new LinkedHashMap<>();
    try {
      Object addresses = new ObjectMapper().readValue(configuration, Map.class).get("addresses");
      if (addresses instanceof Map<?, ?> map) {
        for (Map.Entry<?, ?> e : map.entrySet()) {
          if (e.getValue() instanceof String address) {
            members.put(Long.parseLong(String.valueOf(e.getKey())), address);
          }
        }
      }
    } catch (IOException | RuntimeException e) {
      members.clear();
    }
    return members;
  }
}
