package garlicfarm.spark.wire;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One call to one farm member from the JVM, printed as JSON: what an operator runs to check
 * that a Spark host reaches the farm (TCP, TLS, credentials, cluster name) the way the JVM
 * reader does, and what the tests drive the wire client with.
 *
 * <pre>
 * GARLICFARM_OPTIONS='{"endpoints": "host:5001", "username": "spark", "password": "...", "tls.ca": "/path/ca.pem"}' \
 *   java -cp garlicfarm-spark.jar:$PYSPARK/jars/* garlicfarm.spark.wire.CallMain host:5001 ping '{}'
 * </pre>
 *
 * The options are the data source's (endpoints may be left out: ENDPOINT is used). ARGS_JSON
 * is the call's args; {"hex": "..."} in it is bytes. Prints {"welcome": ..., "result": ...}
 * with bytes as {"hex": "..."}. When the call fails: exit code 2, the error's message on stderr
 * and a line "error code N NAME" after it. Bad usage: exit code 1.
 */
public final class CallMain {
  private static final ObjectMapper JSON = new ObjectMapper();

  private CallMain() {
  }

  public static void main(String[] argv) throws Exception {
    if (argv.length != 3) {
      System.err.println("usage: CallMain ENDPOINT OP ARGS_JSON (options in GARLICFARM_OPTIONS as a JSON object)");
      System.exit(1);
    }
    Map<String, String> options = new LinkedHashMap<>(Map.of("endpoints", argv[0]));
    Map<String, Object> args = new LinkedHashMap<>();
    try {
      Map<?, ?> given = JSON.readValue(System.getenv().getOrDefault("GARLICFARM_OPTIONS", "{}"), Map.class);
      given.forEach((k, v) -> {
        if (v != null) {
          options.put(String.valueOf(k), String.valueOf(v));
        }
      });
      ((Map<?, ?>) fromJson(JSON.readValue(argv[2], Map.class))).forEach((k, v) -> args.put((String) k, v));
    } catch (JsonProcessingException e) {
      System.err.println("GARLICFARM_OPTIONS and ARGS_JSON must be JSON objects: " + e.getOriginalMessage());
      System.exit(1);
    }
    try {
      FarmSettings settings = FarmSettings.fromOptions(options);
      try (FarmLink link = FarmLink.open(argv[0], settings)) {
        Object result = link.call(argv[1], args);
        Welcome w = link.welcome();
        Map<String, Object> welcome = new LinkedHashMap<>();
        welcome.put("node_id", w.nodeId());
        welcome.put("cluster", w.cluster());
        welcome.put("leader_id", w.leaderId());
        welcome.put("role", w.role());
        welcome.put("members", w.members());
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("endpoint", link.endpoint());
        out.put("welcome", welcome);
        out.put("result", toJson(result));
        System.out.println(JSON.writeValueAsString(out));
      }
    } catch (FarmException e) {
      System.err.println(e.getMessage());
      System.err.println("error code " + e.code() + " " + FarmException.codeName(e.code())
          + (e.unavailable() ? " (worth trying another member)" : ""));
      System.exit(2);
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage());
      System.exit(2);
    }
  }

  /** JSON as call args: integers as Long, {"hex": "..."} as byte[]. */
  private static Object fromJson(Object value) {
    if (value instanceof Map<?, ?> map) {
      if (map.size() == 1 && map.get("hex") instanceof String hex) {
        return HexFormat.of().parseHex(hex);
      }
      Map<String, Object> out = new LinkedHashMap<>();
      map.forEach((k, v) -> out.put(String.valueOf(k), fromJson(v)));
      return out;
    }
    if (value instanceof List<?> list) {
      List<Object> out = new ArrayList<>();
      list.forEach(v -> out.add(fromJson(v)));
      return out;
    }
    return value instanceof Number n && !(value instanceof Double) ? (Object) n.longValue() : value;
  }

  /** A result as JSON: byte[] as {"hex": "..."}, map keys as text. */
  private static Object toJson(Object value) {
    if (value instanceof byte[] bytes) {
      return Map.of("hex", HexFormat.of().formatHex(bytes));
    }
    if (value instanceof Map<?, ?> map) {
      Map<String, Object> out = new LinkedHashMap<>();
      map.forEach((k, v) -> out.put(k instanceof byte[] b ? HexFormat.of().formatHex(b) : String.valueOf(k),
                     toJson(v)));
      return out;
    }
    if (value instanceof List<?> list) {
      List<Object> out = new ArrayList<>();
      list.forEach(v -> out.add(toJson(v)));
      return out;
    }
    return value;
  }
}
