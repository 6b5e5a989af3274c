package garlicfarm.spark.wire;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The initiator of the Garlic Farm handshake (docs/protocol.md; consensus/wire/handshake.py):
 * request 1 fetches a Digest challenge (401) on its own connection; request 2, on a new one,
 * answers it (qop=auth, SHA-256 before MD5) and asks for the upgrade, answered 101, after
 * which the same connection carries the binary frames. A stale nonce is answered anew, up to
 * three connections in all. No challenge is cached between links: each open costs two.
 */
final class Handshake {
  private static final int MAX_HEAD = 8192;
  private static final int MAX_CONNECTIONS = 3;
  private static final SecureRandom RANDOM = new SecureRandom();

  private final String endpoint;
  private final FarmSettings settings;
  private final String path;

  private Handshake(String endpoint, FarmSettings settings) {
    this.endpoint = endpoint;
    this.settings = settings;
    this.path = "/GarlicFarm/" + settings.cluster() + "/1/websocket";
  }

  /** A stream past the 101, ready for frames. */
  static Stream connect(String endpoint, FarmSettings settings, long deadline) throws FarmException {
    return new Handshake(endpoint, settings).run(deadline);
  }

  private Stream run(long deadline) throws FarmException {
    String authorization = null;
    for (int connection = 1; connection <= MAX_CONNECTIONS; connection++) {
      Stream stream = Stream.open(endpoint, settings, deadline);
      try {
        stream.write(request(authorization));
        Response response = readHead(stream, deadline);
        if (response.status == 101 && authorization != null) {
          upgraded(endpoint, response);
          return stream;
        }
        stream.close();
        if (response.status == 404) {
          throw fail(FarmException.PROTOCOL, endpoint + " has no Garlic Farm cluster '" + settings.cluster()
              + "' (404 Not Found for " + path + "): check the cluster option");
        }
        if (response.status != 401) {
          throw fail(FarmException.PROTOCOL, endpoint + " answered the Garlic Farm handshake with "
              + response.status + " " + response.reason + ": is it a farm member? check the endpoints option");
        }
        Map<String, String> challenge = choose(endpoint, response.values("www-authenticate"));
        if (authorization != null && !"true".equalsIgnoreCase(challenge.get("stale"))) {
          throw fail(FarmException.AUTHENTICATION, "authentication refused by " + endpoint + " for user '"
              + settings.username() + "' in cluster '" + settings.cluster()
              + "': check the username/password options");
        }
        authorization = answer(challenge);
      } catch (FarmException e) {
        stream.close();
        throw e;
      }
    }
    throw fail(FarmException.PROTOCOL, endpoint + " gave no 101 after " + MAX_CONNECTIONS
        + " handshake connections (every nonce was stale): try again");
  }

  private FarmException fail(int code, String message) {
    return fail(endpoint, code, message);
  }

  private static FarmException fail(String endpoint, int code, String message) {
    return new FarmException(code, message, endpoint);
  }

  private byte[] request(String authorization) {
    StringBuilder b = new StringBuilder("GET ").append(path).append(" HTTP/1.1\r\n")
        .append("Host: ").append(endpoint).append("\r\nCache-Control: no-cache\r\n");
    if (authorization == null) {
      b.append("Connection: close\r\n");
    } else {
      b.append("Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nAuthorization: ")
          .append(authorization).append("\r\n");
    }
    return b.append("\r\n").toString().getBytes(StandardCharsets.UTF_8);
  }

  record Response(int status, String reason, List<String[]> headers) {
    List<String> values(String name) {
      List<String> out = new ArrayList<>();
      for (String[] h : headers) {
        if (h[0].equals(name)) {
          out.add(h[1]);
        }
      }
      return out;
    }
  }

  private Response readHead(Stream stream, long deadline) throws FarmException {
    ByteArrayOutputStream head = new ByteArrayOutputStream();
    int last4 = 0;
    while (last4 != 0x0d0a0d0a) {
      int b = stream.read(deadline, "waiting for the handshake's answer");
      if (b < 0) {
        throw fail(FarmException.PROTOCOL, endpoint + " closed the connection instead of answering the "
            + "Garlic Farm handshake" + (settings.tls() ? "" : " in plain TCP") + ": a member that "
            + "requires TLS" + (settings.tls() ? "" : " (give the tls.ca option)")
            + ", a JRaft node, or another service; check the endpoints option");
      }
      if (head.size() >= MAX_HEAD) {
        throw fail(FarmException.PROTOCOL, endpoint + " answered the handshake with more than " + MAX_HEAD
            + " bytes of head: not a farm member? check the endpoints option");
      }
      head.write(b);
      last4 = (last4 << 8) | b;
    }
    return parseHead(endpoint, head.toByteArray());
  }

  /** A complete response head (status line, headers, blank line), checked. */
  static Response parseHead(String endpoint, byte[] bytes) throws FarmException {
    String[] lines = new String(bytes, StandardCharsets.UTF_8).split("\r\n");
    String[] status = lines[0].split(" ", 3);
    if (status.length < 2 || !status[0].startsWith("HTTP/1.") || !status[1].matches("[0-9]{3}")) {
      throw fail(endpoint, FarmException.PROTOCOL, endpoint + " did not answer the handshake in HTTP/1.1 ("
          + lines[0] + "): not a farm member? check the endpoints option");
    }
    List<String[]> headers = new ArrayList<>();
    for (int i = 1; i < lines.length; i++) {
      int colon = lines[i].indexOf(':');
      if (colon <= 0) {
        throw fail(endpoint, FarmException.PROTOCOL, endpoint + " sent a malformed handshake header: "
            + lines[i]);
      }
      headers.add(new String[]{lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT),
                   lines[i].substring(colon + 1).trim()});
    }
    return new Response(Integer.parseInt(status[1]), status.length > 2 ? status[2] : "", headers);
  }

  /** A 101 must say Upgrade: websocket and Connection: Upgrade. */
  static void upgraded(String endpoint, Response response) throws FarmException {
    if (!hasToken(response.values("upgrade"), "websocket") || !hasToken(response.values("connection"), "upgrade")) {
      throw fail(endpoint, FarmException.PROTOCOL, endpoint + "'s 101 does not say Upgrade: websocket with "
          + "Connection: Upgrade: not a farm member? check the endpoints option");
    }
  }

  private static boolean hasToken(List<String> values, String token) {
    return values.stream().flatMap(v -> List.of(v.split(",")).stream())
        .anyMatch(part -> part.trim().equalsIgnoreCase(token));
  }

  /** The strongest usable Digest challenge: qop=auth, SHA-256 before MD5. */
  static Map<String, String> choose(String endpoint, List<String> headerValues) throws FarmException {
    List<Map<String, String>> challenges = new ArrayList<>();
    for (String value : headerValues) {
      challenges.addAll(parseChallenges(value));
    }
    for (String algorithm : new String[]{"SHA-256", "MD5"}) {
      for (Map<String, String> c : challenges) {
        boolean auth = List.of(c.getOrDefault("qop", "").split(",")).stream()
            .anyMatch(q -> q.trim().equals("auth"));
        if (c.get("").equalsIgnoreCase("digest") && auth && c.containsKey("realm") && c.containsKey("nonce")
            && c.getOrDefault("algorithm", "MD5").equalsIgnoreCase(algorithm)) {
          return c;
        }
      }
    }
    throw fail(endpoint, FarmException.PROTOCOL, endpoint + "'s 401 offers no usable Digest challenge (need qop=auth "
        + "with SHA-256 or MD5; got " + headerValues + ")");
  }

  /**
   * The challenges in one WWW-Authenticate value: each a map of its lower-cased parameters,
   * the scheme under "". Commas inside quoted strings do not split; backslash escapes resolve.
   */
  static List<Map<String, String>> parseChallenges(String value) {
    List<String> items = new ArrayList<>();
    StringBuilder item = new StringBuilder();
    boolean quoted = false;
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (quoted && c == '\\' && i + 1 < value.length()) {
        item.append(value.charAt(++i));
      } else if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        items.add(item.toString());
        item.setLength(0);
      } else {
        item.append(c);
      }
    }
    items.add(item.toString());
    List<Map<String, String>> out = new ArrayList<>();
    for (String raw : items) {
      String text = raw.trim();
      int eq = text.indexOf('=');
      int space = text.indexOf(' ');
      if (!text.isEmpty() && (eq < 0 || (space >= 0 && space < eq))) {   // a scheme starts a challenge
        out.add(new HashMap<>(Map.of("", space < 0 ? text : text.substring(0, space))));
        text = space < 0 ? "" : text.substring(space + 1).trim();
        eq = text.indexOf('=');
      }
      if (eq > 0 && !out.isEmpty()) {
        out.get(out.size() - 1).put(text.substring(0, eq).trim().toLowerCase(Locale.ROOT),
                      text.substring(eq + 1).trim());
      }
    }
    return out;
  }

  private String answer(Map<String, String> challenge) {
    String algorithm = challenge.getOrDefault("algorithm", "MD5").equalsIgnoreCase("MD5") ? "MD5" : "SHA-256";
    byte[] random = new byte[16];
    RANDOM.nextBytes(random);
    String cnonce = HexFormat.of().formatHex(random);
    String nc = "00000001";
    String realm = challenge.get("realm");
    String nonce = challenge.get("nonce");
    String response = digest(algorithm, settings.username(), realm, settings.password(), "GET", path,
                 nonce, nc, cnonce);
    StringBuilder b = new StringBuilder("Digest username=").append(quote(settings.username()))
        .append(", realm=").append(quote(realm)).append(", nonce=").append(quote(nonce))
        .append(", uri=").append(quote(path)).append(", algorithm=").append(algorithm)
        .append(", response=").append(quote(response));
    if (challenge.containsKey("opaque")) {
      b.append(", opaque=").append(quote(challenge.get("opaque")));
    }
    return b.append(", qop=auth, nc=").append(nc).append(", cnonce=").append(quote(cnonce)).toString();
  }

  /** RFC 2617 / 7616 with qop=auth: H(H(user:realm:password):nonce:nc:cnonce:auth:H(method:uri)). */
  static String digest(String algorithm, String username, String realm, String password, String method,
             String uri, String nonce, String nc, String cnonce) {
    String ha1 = hash(algorithm, username + ":" + realm + ":" + password);
    String ha2 = hash(algorithm, method + ":" + uri);
    return hash(algorithm, ha1 + ":" + nonce + ":" + nc + ":" + cnonce + ":auth:" + ha2);
  }

  private static String hash(String algorithm, String text) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance(algorithm)
          .digest(text.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(algorithm + " is missing from this JVM", e);
    }
  }

  private static String quote(String value) {
    return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
