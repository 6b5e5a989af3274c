package garlicfarm.spark.wire;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Pattern;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;

/**
 * How to reach a farm, read from a data source's options on the driver and shipped to the
 * executors (a tls.ca file is read here, so executors need no copy of it). Checks every value
 * up front so a bad option fails the query at planning with a message naming the option.
 */
public final class FarmSettings implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final Pattern CLUSTER = Pattern.compile("[A-Za-z0-9._~-]+");
  private static final List<String> UNSUPPORTED = List.of("tls.cert", "tls.key", "proxy");

  private final List<String> endpoints;
  private final String cluster;
  private final String username;
  private final String password;
  private final double timeoutSeconds;
  private final String caPem;
  private transient SSLSocketFactory tlsFactory;

  private FarmSettings(List<String> endpoints, String cluster, String username, String password,
             double timeoutSeconds, String caPem) {
    this.endpoints = List.copyOf(endpoints);
    this.cluster = cluster;
    this.username = username;
    this.password = password;
    this.timeoutSeconds = timeoutSeconds;
    this.caPem = caPem;
  }

  /**
   * From the data source's options (keys case-insensitive): endpoints (required), cluster
   * (default "farm"), username, password, timeout (seconds per call, default 10), tls.ca (a
   * PEM file's path or the PEM text). Unknown keys are ignored. Throws
   * IllegalArgumentException naming the option at fault and what to do.
   */
  public static FarmSettings fromOptions(Map<String, String> options) {
    Map<String, String> opts = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    options.forEach((k, v) -> { if (v != null) opts.put(k, v); });
    for (String name : UNSUPPORTED) {
      if (opts.containsKey(name)) {
        throw new IllegalArgumentException(name + ": the JVM reader does not support it yet; "
            + "read with format(\"garlicfarm\") instead");
      }
    }
    List<String> endpoints = parseEndpoints(opts.get("endpoints"));
    String cluster = opts.getOrDefault("cluster", "farm").trim();
    if (!CLUSTER.matcher(cluster).matches()) {
      throw new IllegalArgumentException("cluster: '" + cluster + "' must be letters, digits, "
          + "'.', '_', '~' or '-' (the farm's cluster name, default farm)");
    }
    String username = opts.get("username");
    String password = opts.get("password");
    if (username == null || username.isEmpty() || password == null) {
      throw new IllegalArgumentException("username/password: the Garlic Farm wire authenticates "
          + "every connection: give the username and password options");
    }
    if (username.chars().anyMatch(c -> c < 32 || c == 127)) {
      throw new IllegalArgumentException("username: must have no control characters");
    }
    return new FarmSettings(endpoints, cluster, username, password,
        parseTimeout(opts.getOrDefault("timeout", "10")), readCa(opts.get("tls.ca")));
  }

  static List<String> parseEndpoints(String text) {
    List<String> out = new ArrayList<>();
    for (String item : text == null ? new String[0] : text.split(",")) {
      item = item.trim();
      if (item.isEmpty()) {
        continue;
      }
      String hostPort = item.contains("://") ? item.substring(item.indexOf("://") + 3) : item;
      int colon = hostPort.lastIndexOf(':');
      String host = colon > 0 ? hostPort.substring(0, colon).replace("[", "").replace("]", "") : "";
      int port = -1;
      try {
        port = Integer.parseInt(hostPort.substring(colon + 1));
      } catch (NumberFormatException ignored) {
        // reported below
      }
      if (host.isEmpty() || port < 1 || port > 65535 || host.matches(".*[\\s/].*")) {
        throw new IllegalArgumentException("endpoints: '" + item + "' is not HOST:PORT "
            + "(give the farm members as host:port,host:port)");
      }
      out.add(host + ":" + port);
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("endpoints: give at least one HOST:PORT of a farm member");
    }
    return out;
  }

  private static double parseTimeout(String text) {
    double seconds;
    try {
      seconds = Double.parseDouble(text.trim());
    } catch (NumberFormatException e) {
      seconds = Double.NaN;
    }
    if (!(seconds > 0) || Double.isInfinite(seconds)) {
      throw new IllegalArgumentException("timeout: '" + text + "' is not a positive number of "
          + "seconds (the limit of one call to a member, default 10)");
    }
    return seconds;
  }

  private static String readCa(String value) {
    if (value == null) {
      return null;
    }
    String pem = value;
    if (!value.trim().startsWith("-----BEGIN ")) {
      try {
        pem = Files.readString(Path.of(value.trim()), StandardCharsets.US_ASCII);
      } catch (IOException | RuntimeException e) {
        throw new IllegalArgumentException("tls.ca: cannot read the PEM file '" + value + "' ("
            + e + "): give the path of the farm's CA certificate, or the PEM text itself");
      }
    }
    try {
      if (certificates(pem).isEmpty()) {
        throw new GeneralSecurityException("no certificate in it");
      }
    } catch (GeneralSecurityException e) {
      throw new IllegalArgumentException("tls.ca: not a PEM CA certificate (" + e.getMessage()
          + "): give the CA that signed the farm members' certificates");
    }
    return pem;
  }

  private static Collection<? extends Certificate> certificates(String pem) throws GeneralSecurityException {
    return CertificateFactory.getInstance("X.509")
        .generateCertificates(new ByteArrayInputStream(pem.getBytes(StandardCharsets.US_ASCII)));
  }

  public List<String> endpoints() {
    return endpoints;
  }

  public String cluster() {
    return cluster;
  }

  public double timeoutSeconds() {
    return timeoutSeconds;
  }

  /** Whether connections use TLS (tls.ca given). */
  public boolean tls() {
    return caPem != null;
  }

  String username() {
    return username;
  }

  String password() {
    return password;
  }

  /** Sockets that trust exactly tls.ca's certificates; null without TLS. */
  synchronized SSLSocketFactory tlsFactory() throws GeneralSecurityException {
    if (caPem != null && tlsFactory == null) {
      KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
      try {
        trust.load(null, null);
      } catch (IOException e) {
        throw new GeneralSecurityException(e);
      }
      int i = 0;
      for (Certificate certificate : certificates(caPem)) {
        trust.setCertificateEntry("ca" + i++, certificate);
      }
      TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      tmf.init(trust);
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(null, tmf.getTrustManagers(), null);
      tlsFactory = context.getSocketFactory();
    }
    return tlsFactory;
  }

  @Override
  public String toString() {
    return "FarmSettings(endpoints=" + endpoints + ", cluster=" + cluster + ", username=" + username
        + ", timeout=" + timeoutSeconds + "s, tls=" + tls() + ")";
  }
}
