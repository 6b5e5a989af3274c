package garlicfarm.spark.wire;

import java.io.BufferedInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.GeneralSecurityException;
import java.security.cert.CertificateException;
import javax.net.ssl.SSLHandshakeException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * One connection to a member (TCP, then TLS when tls.ca is set) whose every read and write is
 * bounded by a deadline, and whose failures become {@link FarmException}s naming the endpoint:
 * the handshake and the frames both read through it.
 */
final class Stream implements AutoCloseable {
  final String endpoint;
  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;
  private boolean received;       // a byte came: from then on a reset is a break, not a refusal

  private Stream(String endpoint, Socket socket) throws IOException {
    this.endpoint = endpoint;
    this.socket = socket;
    this.in = new BufferedInputStream(socket.getInputStream(), 65536);
    this.out = socket.getOutputStream();
  }

  static long deadline(double seconds) {
    return System.nanoTime() + (long) (seconds * 1e9);
  }

  /** Milliseconds left before the deadline (at least 1), or UNAVAILABLE once it passed. */
  static int remaining(long deadline, String what, String endpoint) throws FarmException {
    long left = deadline - System.nanoTime();
    if (left <= 0) {
      throw new FarmException(FarmException.UNAVAILABLE, "timed out " + what + " " + endpoint
          + ": the member is slow or unreachable (raise the timeout option, or check the "
          + "endpoints option)", endpoint);
    }
    return (int) Math.max(1, Math.min(Integer.MAX_VALUE, left / 1_000_000));
  }

  static Stream open(String endpoint, FarmSettings settings, long deadline) throws FarmException {
    int colon = endpoint.lastIndexOf(':');
    String host = endpoint.substring(0, colon);
    int port = Integer.parseInt(endpoint.substring(colon + 1));
    int millis = remaining(deadline, "connecting to", endpoint);
    Socket socket = new Socket();
    try {
      socket.setTcpNoDelay(true);
      socket.connect(new InetSocketAddress(host, port), millis);
    } catch (SocketTimeoutException e) {
      closeQuietly(socket);
      throw new FarmException(FarmException.UNAVAILABLE, "timed out connecting to " + endpoint
          + ": check the endpoints option and that the member runs and is reachable", endpoint);
    } catch (IOException e) {
      closeQuietly(socket);
      throw new FarmException(FarmException.UNAVAILABLE, "cannot connect to " + endpoint + " (" + e.getMessage()
          + "): check the endpoints option and that the member runs", endpoint);
    }
    Socket connected = settings.tls() ? tls(socket, host, port, settings, deadline) : socket;
    try {
      return new Stream(endpoint, connected);
    } catch (IOException e) {
      closeQuietly(connected);
      throw new FarmException(FarmException.UNAVAILABLE, "the connection to " + endpoint + " broke: " + e,
          endpoint);
    }
  }

  private static Socket tls(Socket plain, String host, int port, FarmSettings settings, long deadline)
      throws FarmException {
    String endpoint = host + ":" + port;
    int millis = remaining(deadline, "in the TLS handshake with", endpoint);
    try {
      SSLSocket socket = (SSLSocket) settings.tlsFactory().createSocket(plain, host, port, true);
      SSLParameters parameters = socket.getSSLParameters();
      parameters.setEndpointIdentificationAlgorithm("HTTPS");     // the host name, too
      socket.setSSLParameters(parameters);
      socket.setSoTimeout(millis);
      socket.startHandshake();
      return socket;
    } catch (GeneralSecurityException e) {
      closeQuietly(plain);
      throw new FarmException(FarmException.PROTOCOL, "tls.ca cannot be used (" + e + ")", endpoint);
    } catch (SSLHandshakeException e) {
      closeQuietly(plain);
      if (hasCause(e, CertificateException.class)) {
        throw new FarmException(FarmException.PROTOCOL, "TLS with " + endpoint + ": the member's "
            + "certificate did not verify against tls.ca and the host name " + host + " ("
            + e.getMessage() + "): give the CA that signed the members' certificates as tls.ca, "
            + "and endpoints by a name or address the certificates carry", endpoint);
      }
      throw new FarmException(FarmException.PROTOCOL, "TLS with " + endpoint + " failed (" + e.getMessage()
          + "): check that the member has TLS (--tls-cert) and that tls.ca is its CA", endpoint);
    } catch (IOException e) {
      closeQuietly(plain);
      throw new FarmException(FarmException.UNAVAILABLE, "the TLS handshake with " + endpoint + " did not "
          + "finish (" + e + "): the member is slow or stopping, or it has no TLS (a member "
          + "without TLS closes TLS connections: then drop the tls.ca option)", endpoint);
    }
  }

  private static boolean hasCause(Throwable e, Class<?> type) {
    for (Throwable c = e; c != null; c = c.getCause()) {
      if (type.isInstance(c)) {
        return true;
      }
    }
    return false;
  }

  void write(byte[] data) throws FarmException {
    try {
      out.write(data);
      out.flush();
    } catch (IOException e) {
      close();
      throw new FarmException(FarmException.UNAVAILABLE, "lost the connection to " + endpoint + ": " + e,
          endpoint);
    }
  }

  /** The next byte, or -1 when the member closed (or reset, before any answer) the connection. */
  int read(long deadline, String what) throws FarmException {
    byte[] one = new byte[1];
    return read(one, 0, 1, deadline, what) < 0 ? -1 : one[0] & 0xff;
  }

  /** Exactly buf.length bytes; a close before them is UNAVAILABLE. */
  void readFully(byte[] buf, long deadline, String what) throws FarmException {
    for (int off = 0; off < buf.length; ) {
      int n = read(buf, off, buf.length - off, deadline, what);
      if (n < 0) {
        close();
        throw new FarmException(FarmException.UNAVAILABLE, endpoint + " closed the connection while we were "
            + what + ": the member stopped or dropped us; try another member", endpoint);
      }
      off += n;
    }
  }

  private int read(byte[] buf, int off, int len, long deadline, String what) throws FarmException {
    int millis;
    try {
      millis = remaining(deadline, what + " from", endpoint);
    } catch (FarmException e) {
      close();
      throw e;
    }
    try {
      socket.setSoTimeout(millis);
      int n = in.read(buf, off, len);
      received |= n > 0;
      return n;
    } catch (SocketTimeoutException e) {
      close();
      throw new FarmException(FarmException.UNAVAILABLE, "timed out " + what + " from " + endpoint
          + ": the member is slow or stalled (raise the timeout option, or try another member)", endpoint);
    } catch (EOFException e) {
      return -1;
    } catch (IOException e) {
      close();
      if (!received) {
        return -1;      // reset before any answer: a refusal, which the handshake explains
      }
      throw new FarmException(FarmException.UNAVAILABLE, "the connection to " + endpoint + " broke while "
          + what + " (" + e.getMessage() + ")", endpoint);
    }
  }

  @Override
  public void close() {
    closeQuietly(socket);
  }

  private static void closeQuietly(Socket socket) {
    try {
      socket.close();
    } catch (IOException ignored) {
      // closing is best effort
    }
  }
}
