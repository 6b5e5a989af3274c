package garlicfarm.spark.read;

import java.io.IOException;
import java.util.List;
import java.util.Map;

import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;

/**
 * A staged entry's payload and content type, from read_entries' answer: an Application
 * entry holding a farm command (consensus/wire/envelope.py: 0xC1, version 1, an 8-byte
 * timestamp, then the msgpack array [5 STAGE, request_id, query_id, batch_id, partition,
 * attempt, content_type, payload]).
 */
record StagedPayload(String contentType, byte[] payload) {
  private static final int MAGIC = 0xC1;
  private static final int VERSION = 1;
  private static final int HEAD = 10;
  private static final int STAGE = 5;

  static StagedPayload of(long index, Object answer) throws IOException {
    if (!(answer instanceof Map<?, ?> map) || !(map.get("entries") instanceof List<?> entries)
        || entries.size() != 1 || !(entries.get(0) instanceof List<?> entry)
        || entry.size() != 4 || !Long.valueOf(index).equals(entry.get(0))
        || !(entry.get(3) instanceof byte[] data)) {
      throw notStaged(index, "the member's answer is not that one entry");
    }
    if (data.length < HEAD || (data[0] & 0xFF) != MAGIC || data[1] != VERSION) {
      throw notStaged(index, "it holds no farm command");
    }
    try (MessageUnpacker body = MessagePack.newDefaultUnpacker(data, HEAD, data.length - HEAD)) {
      if (body.unpackArrayHeader() != 8 || body.unpackInt() != STAGE) {
        throw notStaged(index, "its command is not a STAGE");
      }
      for (int skipped = 0; skipped < 4; skipped++) {
        body.skipValue();             // request id, query id, batch id, partition
      }
      body.skipValue();               // attempt
      String contentType = body.unpackString();
      byte[] payload = body.readPayload(body.unpackBinaryHeader());
      return new StagedPayload(contentType, payload);
    } catch (org.msgpack.core.MessagePackException e) {
      throw notStaged(index, "its STAGE command is malformed (" + e.getMessage() + ")");
    }
  }

  private static IOException notStaged(long index, String why) {
    return new IOException("garlicfarm-columnar: the commit names entry " + index
        + ", which is not a staged entry: " + why);
  }
}
