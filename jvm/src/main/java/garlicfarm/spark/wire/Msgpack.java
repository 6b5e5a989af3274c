package garlicfarm.spark.wire;

import java.io.IOException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;

/**
 * Frame bodies to and from plain Java values. Decoding checks every length a body declares
 * against the bytes left before allocating (a corrupt or hostile length must not cost memory)
 * and limits nesting; a bad body raises {@link Bad} naming what was wrong.
 */
final class Msgpack {
  static final int MAX_DEPTH = 64;

  /** A body that is not the msgpack the wire promises. */
  static final class Bad extends Exception {
    private static final long serialVersionUID = 1L;

    Bad(String reason) {
      super(reason);
    }
  }

  private Msgpack() {
  }

  static byte[] pack(List<?> fields) {
    try (MessageBufferPacker packer = MessagePack.newDefaultBufferPacker()) {
      write(packer, fields);
      return packer.toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException("packing to memory failed", e);
    }
  }

  private static void write(MessageBufferPacker p, Object value) throws IOException {
    if (value == null) {
      p.packNil();
    } else if (value instanceof Boolean b) {
      p.packBoolean(b);
    } else if (value instanceof Long || value instanceof Integer || value instanceof Short
        || value instanceof Byte) {
      p.packLong(((Number) value).longValue());
    } else if (value instanceof Double || value instanceof Float) {
      p.packDouble(((Number) value).doubleValue());
    } else if (value instanceof String s) {
      p.packString(s);
    } else if (value instanceof byte[] bytes) {
      p.packBinaryHeader(bytes.length);
      p.writePayload(bytes);
    } else if (value instanceof List<?> list) {
      p.packArrayHeader(list.size());
      for (Object item : list) {
        write(p, item);
      }
    } else if (value instanceof Map<?, ?> map) {
      p.packMapHeader(map.size());
      for (Map.Entry<?, ?> e : map.entrySet()) {
        write(p, e.getKey());
        write(p, e.getValue());
      }
    } else {
      throw new IllegalArgumentException("cannot send a " + value.getClass().getName() + " in a call's "
          + "args: use Long/Integer, Double, String, byte[], Boolean, null, List or Map");
    }
  }

  /** The body as one value (a frame's array of fields); the whole body must be that value. */
  static Object unpack(byte[] body) throws Bad {
    try (MessageUnpacker u = MessagePack.newDefaultUnpacker(body)) {
      Object value = read(u, body.length, 0);
      if (u.hasNext()) {
        throw new Bad("bytes after the body's value");
      }
      return value;
    } catch (IOException | RuntimeException e) {
      throw new Bad("not msgpack (" + e.getMessage() + ")");
    }
  }

  private static int length(MessageUnpacker u, long declared, int total, int perItem, String what)
      throws Bad {
    long left = total - u.getTotalReadBytes();
    if (declared < 0 || declared * perItem > left) {
      throw new Bad(what + " of " + declared + " items/bytes is longer than the " + left
          + " bytes left in the body");
    }
    return (int) declared;
  }

  private static Object read(MessageUnpacker u, int total, int depth) throws IOException, Bad {
    if (depth > MAX_DEPTH) {
      throw new Bad("nested deeper than " + MAX_DEPTH);
    }
    MessageFormat format = u.getNextFormat();
    switch (format.getValueType()) {
      case NIL:
        u.unpackNil();
        return null;
      case BOOLEAN:
        return u.unpackBoolean();
      case INTEGER:
        return u.unpackLong();      // above 2^63-1: an overflow exception, a Bad body
      case FLOAT:
        return u.unpackDouble();
      case STRING: {
        int n = length(u, u.unpackRawStringHeader(), total, 1, "a string");
        try {
          return StandardCharsets.UTF_8.newDecoder()
              .decode(ByteBuffer.wrap(u.readPayload(n))).toString();
        } catch (CharacterCodingException e) {
          throw new Bad("a string that is not UTF-8");
        }
      }
      case BINARY:
        return u.readPayload(length(u, u.unpackBinaryHeader(), total, 1, "a binary"));
      case ARRAY: {
        int n = length(u, u.unpackArrayHeader(), total, 1, "an array");
        List<Object> list = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
          list.add(read(u, total, depth + 1));
        }
        return list;
      }
      case MAP: {
        int n = length(u, u.unpackMapHeader(), total, 2, "a map");
        Map<Object, Object> map = new LinkedHashMap<>();
        for (int i = 0; i < n; i++) {
          Object key = read(u, total, depth + 1);
          map.put(key, read(u, total, depth + 1));
        }
        return map;
      }
      default:
        throw new Bad("a msgpack " + format.getValueType() + " value, which the wire does not use");
    }
  }
}
