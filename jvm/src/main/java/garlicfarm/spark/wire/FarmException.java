package garlicfarm.spark.wire;

import java.io.IOException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A failure of the Garlic Farm wire, carrying the wire's error code (docs/protocol.md, "The
 * client protocol") so that a caller can tell a member worth retrying elsewhere
 * ({@link #unavailable()}) from a request that is wrong everywhere. Connection failures,
 * timeouts and closed connections are UNAVAILABLE.
 */
public class FarmException extends IOException {
  private static final long serialVersionUID = 1L;

  public static final int FAILED = 1;
  public static final int NOT_LEADER = 2;
  public static final int UNAVAILABLE = 3;
  public static final int INDEX_OVERFLOW = 4;
  public static final int INDEX_UNDERFLOW = 5;
  public static final int RETRY = 6;
  public static final int AUTHENTICATION = 7;
  public static final int PROTOCOL = 8;
  public static final int INCOMPLETE = 9;

  private final int code;
  private final Map<Object, Object> detail;
  private final String endpoint;

  public FarmException(int code, String message, Map<?, ?> detail, String endpoint) {
    super(message);
    this.code = code;
    this.detail = detail == null ? Map.of() : Collections.unmodifiableMap(new LinkedHashMap<>(detail));
    this.endpoint = endpoint;
  }

  public FarmException(int code, String message, String endpoint) {
    this(code, message, null, endpoint);
  }

  public int code() {
    return code;
  }

  /** The member's details of the error (NOT_LEADER: leader, endpoint, members); never null. */
  public Map<Object, Object> detail() {
    return detail;
  }

  public String endpoint() {
    return endpoint;
  }

  /** Connect, timeout, closed connection or UNAVAILABLE: worth trying another member. */
  public boolean unavailable() {
    return code == UNAVAILABLE;
  }

  /** The code's name on the wire (FAILED, NOT_LEADER, ...), or "CODE n" for an unknown one. */
  public static String codeName(int code) {
    String[] names = {"FAILED", "NOT_LEADER", "UNAVAILABLE", "INDEX_OVERFLOW", "INDEX_UNDERFLOW",
             "RETRY", "AUTHENTICATION", "PROTOCOL", "INCOMPLETE"};
    return code >= 1 && code <= names.length ? names[code - 1] : "CODE " + code;
  }
}
