package garlicfarm.spark.wire;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The extension frames a client sees, sans I/O (consensus/wire/extensions.py, whose
 * constants these must equal: tests/jvm/wire_vectors.json holds Python's, and a JUnit test
 * compares): {@code type u8 | source i32 | destination i32 | term i64 | bodySize i32 | body},
 * the body a msgpack array of the message's fields. Every size and field type is checked;
 * a bad frame raises {@link Bad} saying what the member sent.
 */
final class Frames {
  /** The largest frame body accepted (the nodes' own limit on a log data size). */
  static final int MAX_BODY = 256 << 20;
  static final int HEAD = 21;
  /** The extension shape's type range (0x20-0x23 reuse JRaft's shapes). */
  static final int FIRST_EXTENSION = 0x24;
  static final int LAST_EXTENSION = 0x38;     // 0x37-0x38: Quiesce, NodeHeartbeat (peers only)
  /** The frames that follow (in that direction) belong to farm partition (Raft group) `group`. */
  static final int GROUP_SELECT = 0x36;
  /** The largest group number the wire carries (protocol.md: 0..2^31-1). */
  static final long MAX_GROUP = Integer.MAX_VALUE;
  static final int HELLO = 0x30;
  static final int WELCOME = 0x31;
  static final int CALL = 0x32;
  static final int REPLY = 0x33;
  static final int EVENT = 0x35;
  /** The Hello's protocol version. */
  static final long VERSION = 1;

  /** What a member sent that is not a frame of this wire (a phrase after its endpoint). */
  static final class Bad extends Exception {
    private static final long serialVersionUID = 1L;

    Bad(String what) {
      super(what);
    }
  }

  record Frame(int type, List<Object> fields) {
  }

  /** A Reply's fields: {@code result} when {@code code} is 0, else the error. */
  record Reply(long callId, long code, Object result, String message, Map<?, ?> detail) {
  }

  private Frames() {
  }

  /** A frame of {@code type} with header fields 0 (what a client sends). */
  static byte[] encode(int type, List<?> fields) {
    byte[] body = Msgpack.pack(fields);
    return ByteBuffer.allocate(HEAD + body.length).put((byte) type).putInt(0).putInt(0).putLong(0)
        .putInt(body.length).put(body).array();
  }

  static byte[] hello(byte[] clientId) {
    return encode(HELLO, List.of(clientId, VERSION));
  }

  /** GroupSelect(group) as a client sends it (source, destination and term 0). */
  static byte[] groupSelect(int group) {
    if (group < 0) {
      throw new IllegalArgumentException("a group is 0.." + MAX_GROUP + ", not " + group);
    }
    return encode(GROUP_SELECT, List.of((long) group));
  }

  static byte[] concat(byte[] first, byte[] second) {
    return ByteBuffer.allocate(first.length + second.length).put(first).put(second).array();
  }

  /** A GroupSelect's group, checked to be in 0..MAX_GROUP. */
  static long group(List<Object> f) throws Bad {
    long group = field(f, 1, 0, "GroupSelect.group", Long.class);
    if (group < 0 || group > MAX_GROUP) {
      throw new Bad("sent a GroupSelect.group " + group + " outside 0.." + MAX_GROUP);
    }
    return group;
  }

  static byte[] call(long callId, String op, Map<String, ?> args) {
    return encode(CALL, List.of(callId, op, args == null ? Map.of() : args));
  }

  /** The type of the frame a 21-byte head starts: an extension frame's. */
  static int type(byte[] head, String what) throws Bad {
    ByteBuffer h = ByteBuffer.wrap(head);
    int type = h.get(0) & 0xff;
    if (type < FIRST_EXTENSION || type > LAST_EXTENSION) {
      throw new Bad("sent a frame of type " + type + " while we were " + what + " (a client expects only "
          + "extension frames)");
    }
    return type;
  }

  /** The body size a head declares, checked against MAX_BODY before anything is allocated. */
  static int bodySize(byte[] head) throws Bad {
    int size = ByteBuffer.wrap(head).getInt(17);
    if (size < 0 || size > MAX_BODY) {
      throw new Bad("sent a frame of type 0x" + Integer.toHexString(head[0] & 0xff) + " with bodySize " + size
          + " (the limit is " + MAX_BODY + ")");
    }
    return size;
  }

  /** The fields of a frame's body. */
  @SuppressWarnings("unchecked")
  static Frame decode(int type, byte[] body) throws Bad {
    Object fields;
    try {
      fields = Msgpack.unpack(body);
    } catch (Msgpack.Bad e) {
      throw new Bad("sent a frame of type 0x" + Integer.toHexString(type) + " whose body is bad: "
          + e.getMessage());
    }
    if (!(fields instanceof List)) {
      throw new Bad("sent a frame of type 0x" + Integer.toHexString(type) + " whose body is not an array");
    }
    return new Frame(type, (List<Object>) fields);
  }

  static Welcome welcome(List<Object> f) throws Bad {
    long nodeId = field(f, 5, 0, "Welcome.node_id", Long.class);
    String cluster = field(f, 5, 1, "Welcome.cluster", String.class);
    Object leader = f.get(2);
    if (leader != null && !(leader instanceof Long)) {
      throw new Bad("sent a Welcome.leader_id that is neither an integer nor nil");
    }
    String role = field(f, 5, 3, "Welcome.role", String.class);
    byte[] configuration = field(f, 5, 4, "Welcome.configuration", byte[].class);
    return new Welcome(nodeId, cluster, (Long) leader, role, members(configuration));
  }

  static Reply reply(List<Object> f) throws Bad {
    return new Reply(field(f, 5, 0, "Reply.call_id", Long.class), field(f, 5, 1, "Reply.code", Long.class),
        f.get(2), field(f, 5, 3, "Reply.message", String.class), field(f, 5, 4, "Reply.detail", Map.class));
  }

  private static <T> T field(List<Object> fields, int count, int index, String name, Class<T> type) throws Bad {
    Object value = fields.size() == count ? fields.get(index) : null;
    if (!type.isInstance(value)) {
      throw new Bad("sent a " + name + " that is not a " + type.getSimpleName()
          + (fields.size() == count ? "" : " (the frame has " + fields.size() + " fields, not " + count + ")"));
    }
    return type.cast(value);
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
