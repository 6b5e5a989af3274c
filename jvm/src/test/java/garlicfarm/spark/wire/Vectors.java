package garlicfarm.spark.wire;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The files the Python tests read too, from the checkout (the system property
 * garlicfarm.root, which the pom sets): tests/jvm/wire_vectors.json and tests/vectors/.
 */
public final class Vectors {
  public static final ObjectMapper JSON = new ObjectMapper();

  private Vectors() {
  }

  public static Path root() {
    String root = System.getProperty("garlicfarm.root");
    if (root == null) {
      throw new IllegalStateException("garlicfarm.root is not set: run the tests with Maven (jvm/pom.xml)");
    }
    return Path.of(root);
  }

  public static JsonNode wire() {
    return read(root().resolve("tests/jvm/wire_vectors.json"));
  }

  public static List<JsonNode> lines(String relative) {
    try {
      List<JsonNode> out = new ArrayList<>();
      for (String line : Files.readAllLines(root().resolve(relative))) {
        if (!line.isBlank()) {
          out.add(JSON.readTree(line));
        }
      }
      return out;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static JsonNode read(Path path) {
    try {
      return JSON.readTree(path.toFile());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A vector's JSON value as the codec's Java value: integers Long, {"$hex"} byte[]. */
  public static Object value(JsonNode node) {
    if (node.isNull()) {
      return null;
    }
    if (node.isBoolean()) {
      return node.booleanValue();
    }
    if (node.isIntegralNumber()) {
      return node.longValue();
    }
    if (node.isNumber()) {
      return node.doubleValue();
    }
    if (node.isTextual()) {
      return node.textValue();
    }
    if (node.isArray()) {
      List<Object> out = new ArrayList<>();
      node.forEach(item -> out.add(value(item)));
      return out;
    }
    if (node.size() == 1 && node.has("$hex")) {
      return HexFormat.of().parseHex(node.get("$hex").textValue());
    }
    Map<String, Object> out = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      out.put(e.getKey(), value(e.getValue()));
    }
    return out;
  }

  /** Deep equality where byte[] compare by content and maps by their entries in order. */
  public static void assertSame(Object expected, Object actual, String where) {
    if (expected instanceof byte[] bytes) {
      assertArrayEquals(bytes, assertInstanceOf(byte[].class, actual, where), where);
    } else if (expected instanceof List<?> list) {
      List<?> got = assertInstanceOf(List.class, actual, where);
      assertEquals(list.size(), got.size(), where);
      for (int i = 0; i < list.size(); i++) {
        assertSame(list.get(i), got.get(i), where + "[" + i + "]");
      }
    } else if (expected instanceof Map<?, ?> map) {
      Map<?, ?> got = assertInstanceOf(Map.class, actual, where);
      assertEquals(List.copyOf(map.keySet()), List.copyOf(got.keySet()), where);
      for (Map.Entry<?, ?> e : map.entrySet()) {
        assertSame(e.getValue(), got.get(e.getKey()), where + "." + e.getKey());
      }
    } else {
      assertEquals(expected, actual, where);
    }
  }
}
