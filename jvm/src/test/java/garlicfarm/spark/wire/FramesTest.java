package garlicfarm.spark.wire;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The frame codec against the vectors Python's codec wrote (tests/jvm/wire_vectors.json). */
class FramesTest {
  private static final JsonNode WIRE = Vectors.wire();

  private static List<JsonNode> frames(String direction) {
    List<JsonNode> out = new ArrayList<>();
    WIRE.get("frames").forEach(f -> {
      if (direction == null || f.get("direction").asText().equals(direction)) {
        out.add(f);
      }
    });
    return out;
  }

  private static byte[] bytes(JsonNode frame) {
    return HexFormat.of().parseHex(frame.get("hex").asText());
  }

  @Test
  void errorCodesAreThoseOfPython() throws ReflectiveOperationException {
    int count = 0;
    for (Iterator<Map.Entry<String, JsonNode>> it = WIRE.get("error_codes").fields(); it.hasNext(); count++) {
      Map.Entry<String, JsonNode> code = it.next();
      assertEquals(code.getValue().intValue(), FarmException.class.getField(code.getKey()).getInt(null),
          code.getKey());
      assertEquals(code.getKey(), FarmException.codeName(code.getValue().intValue()));
    }
    assertEquals("CODE " + (count + 1), FarmException.codeName(count + 1), "a code Python does not have");
  }

  @Test
  void frameTypesAndShapeAreThoseOfPython() throws ReflectiveOperationException {
    List<String> declared = new ArrayList<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = WIRE.get("frame_types").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> type = it.next();
      Field field;
      try {
        field = Frames.class.getDeclaredField(type.getKey());
      } catch (NoSuchFieldException e) {
        continue;                   // a type the client does not use
      }
      assertEquals(type.getValue().intValue(), field.getInt(null), type.getKey());
      declared.add(type.getKey());
    }
    assertEquals(List.of("HELLO", "WELCOME", "CALL", "REPLY", "EVENT", "GROUP_SELECT"), declared);
    JsonNode shape = WIRE.get("extension_shape");
    assertEquals(shape.get("first").intValue(), Frames.FIRST_EXTENSION);
    assertEquals(shape.get("last").intValue(), Frames.LAST_EXTENSION);
    assertEquals(shape.get("head").intValue(), Frames.HEAD);
  }

  @Test
  void whatAClientSendsIsPythonsBytes() {
    List<JsonNode> sent = frames("sent");
    assertEquals(6, sent.size());
    for (JsonNode frame : sent) {
      @SuppressWarnings("unchecked")
      List<Object> fields = (List<Object>) Vectors.value(frame.get("fields"));
      assertEquals(frame.get("hex").asText(), HexFormat.of().formatHex(
          Frames.encode(frame.get("type").intValue(), fields)), frame.get("name").asText());
    }
    JsonNode hello = sent.get(0);
    assertArrayEquals(bytes(hello), Frames.hello((byte[]) ((List<?>) Vectors.value(hello.get("fields"))).get(0)));
    assertArrayEquals(bytes(sent.get(1)), Frames.call(1, "ping", null));
    assertArrayEquals(bytes(sent.get(4)), Frames.groupSelect(2));
    assertArrayEquals(bytes(sent.get(5)), Frames.groupSelect(Integer.MAX_VALUE));
  }

  @Test
  void groupSelectsAsTheReaderChecksThem() throws Frames.Bad {
    List<JsonNode> received = frames("received");
    JsonNode select = received.get(received.size() - 1);
    assertEquals("GroupSelect", select.get("name").asText());
    assertEquals(2L, Frames.group(decode(select).fields()));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.group(List.of(-1L))))
        .contains("GroupSelect.group -1 outside 0..2147483647"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.group(List.of(1L << 31))))
        .contains("outside"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.group(List.of("2"))))
        .contains("GroupSelect.group that is not a Long"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.group(List.of(1L, 2L))))
        .contains("the frame has 2 fields, not 1"));
    assertThrows(IllegalArgumentException.class, () -> Frames.groupSelect(-1));
  }

  @Test
  void everyVectorDecodesToItsFields() throws Frames.Bad {
    for (JsonNode frame : frames(null)) {
      byte[] all = bytes(frame);
      byte[] head = Arrays.copyOf(all, Frames.HEAD);
      String name = frame.get("name").asText();
      assertEquals(frame.get("type").intValue(), Frames.type(head, "testing"), name);
      assertEquals(all.length - Frames.HEAD, Frames.bodySize(head), name);
      Frames.Frame decoded = Frames.decode(frame.get("type").intValue(),
          Arrays.copyOfRange(all, Frames.HEAD, all.length));
      Vectors.assertSame(Vectors.value(frame.get("fields")), decoded.fields(), name);
    }
  }

  @Test
  void welcomesAndRepliesAsTheReaderSeesThem() throws Frames.Bad {
    List<JsonNode> received = frames("received");
    Welcome w = Frames.welcome(decode(received.get(0)).fields());
    assertEquals(new Welcome(1, "farm", 2L, "follower", Map.of(1L, "h:1", 2L, "h:2")), w);
    Welcome lone = Frames.welcome(decode(received.get(1)).fields());
    assertNull(lone.leaderId());
    assertTrue(lone.members().isEmpty(), "no configuration yet: no members");
    Frames.Reply ok = Frames.reply(decode(received.get(2)).fields());
    assertEquals(7, ok.callId());
    assertEquals(0, ok.code());
    assertEquals(Long.MAX_VALUE, ((Map<?, ?>) ok.result()).get("big"));
    Frames.Reply error = Frames.reply(decode(received.get(3)).fields());
    assertEquals(FarmException.INDEX_OVERFLOW, error.code());
    assertEquals("index 1000 is beyond 12", error.message());
    assertEquals(Map.of("last", 12L), error.detail());
  }

  private static Frames.Frame decode(JsonNode frame) throws Frames.Bad {
    byte[] all = bytes(frame);
    return Frames.decode(all[0] & 0xff, Arrays.copyOfRange(all, Frames.HEAD, all.length));
  }

  private static byte[] head(int type, int size) {
    return ByteBuffer.allocate(Frames.HEAD).put((byte) type).putInt(0).putInt(0).putLong(0).putInt(size).array();
  }

  private static String bad(Frames.Bad e) {
    return e.getMessage();
  }

  @Test
  void headsOutsideTheExtensionShapeOrLimitsAreRefused() {
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.type(head(4, 0), "reading")))
        .contains("sent a frame of type 4 while we were reading"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.type(head(0x39, 0), "reading")))
        .contains("type 57"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.bodySize(head(0x31, -1))))
        .contains("bodySize -1"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.bodySize(head(0x31, Frames.MAX_BODY + 1))))
        .contains("bodySize 268435457 (the limit is 268435456)"));
    assertDoesNotThrowBad(() -> Frames.bodySize(head(0x31, Frames.MAX_BODY)));
  }

  private interface Step {
    Object run() throws Frames.Bad;
  }

  private static void assertDoesNotThrowBad(Step step) {
    try {
      step.run();
    } catch (Frames.Bad e) {
      throw new AssertionError("refused: " + e.getMessage(), e);
    }
  }

  @Test
  void malformedBodiesAreNamed() {
    // str32 declaring 2 GiB in a 5-byte body
    assertTrue(bad(assertThrows(Frames.Bad.class,
        () -> Frames.decode(0x31, new byte[] {(byte) 0xdb, 0x7f, (byte) 0xff, (byte) 0xff, (byte) 0xff})))
        .contains("longer than the 0 bytes left"));
    // array32 of 2^31-1 items in a 5-byte body: refused before allocating
    assertTrue(bad(assertThrows(Frames.Bad.class,
        () -> Frames.decode(0x33, new byte[] {(byte) 0xdd, 0x7f, (byte) 0xff, (byte) 0xff, (byte) 0xff})))
        .contains("an array of 2147483647"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.decode(0x33, new byte[] {(byte) 0xc1})))
        .contains("not msgpack"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.decode(0x33, new byte[] {1})))
        .contains("whose body is not an array"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.decode(0x33, new byte[] {(byte) 0x90, 1})))
        .contains("bytes after the body's value"));
    // uint64 above 2^63-1
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.decode(0x33,
        new byte[] {(byte) 0x91, (byte) 0xcf, -1, -1, -1, -1, -1, -1, -1, -1}))).contains("not msgpack"));
    byte[] deep = new byte[Msgpack.MAX_DEPTH + 2];
    Arrays.fill(deep, (byte) 0x91);
    deep[deep.length - 1] = 0;
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.decode(0x33, deep)))
        .contains("nested deeper than " + Msgpack.MAX_DEPTH));
  }

  @Test
  void fieldsOfTheWrongShapeOrTypeAreNamed() {
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.welcome(List.of(1L, "farm", "x", "leader", new byte[0]))))
        .contains("Welcome.leader_id that is neither an integer nor nil"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.welcome(List.of(1L, "farm", 1L, "leader"))))
        .contains("the frame has 4 fields, not 5"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.reply(List.of("1", 0L, 0L, "", Map.of()))))
        .contains("Reply.call_id that is not a Long"));
    assertTrue(bad(assertThrows(Frames.Bad.class, () -> Frames.reply(List.of(1L, 0L, 0L, "", List.of()))))
        .contains("Reply.detail that is not a Map"));
  }
}
