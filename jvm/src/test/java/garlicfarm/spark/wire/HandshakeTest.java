package garlicfarm.spark.wire;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The handshake's sans-I/O parts: the digest against the RFC vectors the Python tests use
 *  (tests/vectors/garlicfarm/digest_vectors.jsonl), challenges, and malformed answers. */
class HandshakeTest {
  private static final String AT = "h:1";

  @Test
  void digestsEqualTheRfcExamples() {
    int checked = 0;
    for (JsonNode v : Vectors.lines("tests/vectors/garlicfarm/digest_vectors.jsonl")) {
      if (!v.get("kind").asText().equals("digest-auth")) {
        continue;                   // SHA-512-256: not offered (the Python tests say so too)
      }
      JsonNode f = v.get("fields");
      String response = Handshake.digest(v.get("algorithm").asText(), f.get("username").asText(),
          f.get("realm").asText(), f.get("password").asText(), f.get("method").asText(), f.get("uri").asText(),
          f.get("nonce").asText(), f.get("nc").asText(), f.get("cnonce").asText());
      assertEquals(v.get("expected_response_from_rfc").asText(), response, v.get("name").asText());
      checked++;
    }
    assertEquals(3, checked, "the RFC 2617 and RFC 7616 (MD5, SHA-256) examples");
  }

  @Test
  void challengesSplitOnlyOutsideQuotes() {
    List<Map<String, String>> found = Handshake.parseChallenges(
        "Digest realm=\"a, b\", qop=\"auth,auth-int\", algorithm=SHA-256, nonce=\"n\\\"1\", "
        + "Basic realm=\"x\", Digest realm=\"farm\", nonce=\"n2\", qop=\"auth\"");
    assertEquals(3, found.size());
    assertEquals(Map.of("", "Digest", "realm", "a, b", "qop", "auth,auth-int", "algorithm", "SHA-256",
        "nonce", "n\"1"), found.get(0));
    assertEquals("Basic", found.get(1).get(""));
    assertEquals("n2", found.get(2).get("nonce"));
  }

  @Test
  void sha256IsChosenBeforeMd5AndQopAuthIsRequired() throws FarmException {
    Map<String, String> chosen = Handshake.choose(AT, List.of(
        "Digest realm=\"farm\", nonce=\"m\", qop=\"auth\", algorithm=MD5",
        "Digest realm=\"farm\", nonce=\"s\", qop=\"auth\", algorithm=SHA-256"));
    assertEquals("s", chosen.get("nonce"));
    assertEquals("m", Handshake.choose(AT, List.of("Digest realm=\"farm\", nonce=\"m\", qop=\"auth\""))
        .get("nonce"), "no algorithm means MD5");
    FarmException none = assertThrows(FarmException.class, () -> Handshake.choose(AT, List.of(
        "Digest realm=\"farm\", nonce=\"n\", qop=\"auth-int\"", "Digest realm=\"farm\", nonce=\"n\", "
        + "qop=\"auth\", algorithm=SHA-512-256", "Basic realm=\"farm\"")));
    assertEquals(FarmException.PROTOCOL, none.code());
    assertTrue(none.getMessage().contains("h:1's 401 offers no usable Digest challenge"), none.getMessage());
  }

  private static Handshake.Response head(String text) throws FarmException {
    return Handshake.parseHead(AT, text.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void aWellFormedHeadParses() throws FarmException {
    Handshake.Response r = head("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Digest a=1\r\n"
        + "www-authenticate:  Digest b=2 \r\nContent-Length: 0\r\n\r\n");
    assertEquals(401, r.status());
    assertEquals("Unauthorized", r.reason());
    assertEquals(List.of("Digest a=1", "Digest b=2"), r.values("www-authenticate"));
  }

  @Test
  void malformedHeadsAreProtocolErrorsNamingTheEndpoint() {
    for (String[] c : new String[][] {
        {"SSH-2.0-OpenSSH_9.6\r\n\r\n", "did not answer the handshake in HTTP/1.1 (SSH-2.0-OpenSSH_9.6)"},
        {"HTTP/1.1 2xx OK\r\n\r\n", "did not answer the handshake in HTTP/1.1"},
        {"HTTP/1.1\r\n\r\n", "did not answer the handshake in HTTP/1.1"},
        {"HTTP/2 200 OK\r\n\r\n", "did not answer the handshake in HTTP/1.1"},
        {"HTTP/1.1 401 Unauthorized\r\nno colon here\r\n\r\n", "malformed handshake header: no colon here"},
        {"HTTP/1.1 401 Unauthorized\r\n: empty name\r\n\r\n", "malformed handshake header: : empty name"}}) {
      FarmException e = assertThrows(FarmException.class, () -> head(c[0]), c[0]);
      assertEquals(FarmException.PROTOCOL, e.code(), c[0]);
      assertTrue(e.getMessage().startsWith(AT + " ") && e.getMessage().contains(c[1]), e.getMessage());
      assertEquals(AT, e.endpoint());
    }
  }

  @Test
  void a101MustSayUpgradeWebsocket() throws FarmException {
    Handshake.Response good = head("HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\n"
        + "Connection: keep-alive, Upgrade\r\n\r\n");
    assertDoesNotThrow(() -> Handshake.upgraded(AT, good));
    for (String bad : new String[] {"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: close\r\n\r\n"}) {
      Handshake.Response r = head(bad);
      FarmException e = assertThrows(FarmException.class, () -> Handshake.upgraded(AT, r), bad);
      assertTrue(e.getMessage().contains("101 does not say Upgrade: websocket"), e.getMessage());
    }
  }
}
