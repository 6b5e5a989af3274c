package garlicfarm.spark.wire;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/**
 * A farm member on a real 127.0.0.1 socket, as much of one as the reader's client needs: the
 * handshake (a Digest challenge, then 101 for any answer: the digest itself is checked by
 * HandshakeTest and by the Python tests against real nodes), Welcome with the view it is given,
 * and Calls answered by a handler, whose FarmException becomes an error Reply.
 */
public final class FakeMember implements AutoCloseable {
  /** Answers one call: a result, or a FarmException (its code, message and detail). */
  public interface Handler {
    Object answer(String op, Map<?, ?> args) throws FarmException;
  }

  private final long id;
  private final Handler handler;
  private final ServerSocket server;
  private final List<String> ops = new ArrayList<>();
  private final List<Socket> connections = new ArrayList<>();
  private final List<Long> groups = new ArrayList<>();
  private volatile Long leaderId;
  private volatile Map<Long, String> members = Map.of();
  private volatile int hosted = 1;           // partitions 0..hosted-1 (GroupSelect)
  private volatile Long answerGroup;         // the group it answers in; null: the client's

  public FakeMember(long id, Handler handler) throws IOException {
    this.id = id;
    this.handler = handler;
    this.server = new ServerSocket(0, 16, InetAddress.getLoopbackAddress());
    Thread accept = new Thread(this::accept, "fake-member-" + id);
    accept.setDaemon(true);
    accept.start();
  }

  public String endpoint() {
    return "127.0.0.1:" + server.getLocalPort();
  }

  /** What its Welcome says: the leader it believes in and the members it knows. */
  public void view(Long leader, Map<Long, String> known) {
    this.leaderId = leader;
    this.members = Map.copyOf(known);
  }

  /** It hosts partitions 0..count-1; {@code answerIn}, when not null, is the group its
   *  answers claim (a corrupt member), else the group the client selected. */
  public void partitions(int count, Long answerIn) {
    this.hosted = count;
    this.answerGroup = answerIn;
  }

  /** The group (partition) of each call it was sent, in order. */
  public synchronized List<Long> groups() {
    return List.copyOf(groups);
  }

  /** The ops of the calls it was sent, in order. */
  public synchronized List<String> ops() {
    return List.copyOf(ops);
  }

  private void accept() {
    while (!server.isClosed()) {
      Socket socket;
      try {
        socket = server.accept();
      } catch (IOException e) {
        return;                         // closed
      }
      synchronized (this) {
        connections.add(socket);
      }
      Thread serve = new Thread(() -> serve(socket), "fake-member-" + id + "-conn");
      serve.setDaemon(true);
      serve.start();
    }
  }

  private void serve(Socket socket) {
    try (socket; InputStream in = socket.getInputStream(); OutputStream out = socket.getOutputStream()) {
      String head = head(in);
      if (!head.toLowerCase().contains("\r\nauthorization: digest ")) {
        out.write(("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Digest realm=\"farm\", nonce=\"n" + id
            + "\", qop=\"auth\", algorithm=SHA-256\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
        return;
      }
      out.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
          .getBytes(StandardCharsets.US_ASCII));
      DataInputStream frames = new DataInputStream(in);
      long group = 0;
      while (true) {
        byte[] frameHead = new byte[Frames.HEAD];
        frames.readFully(frameHead);
        byte[] body = new byte[Frames.bodySize(frameHead)];
        frames.readFully(body);
        Frames.Frame frame = Frames.decode(frameHead[0] & 0xff, body);
        if (frame.type() == Frames.GROUP_SELECT) {
          group = Frames.group(frame.fields());
          if (group >= hosted) {          // as a node refuses a group it does not host
            out.write(Frames.encode(Frames.REPLY, Arrays.asList(0L, 1L, null, "partition " + group
                + " is not hosted by node " + id, Map.of("partition", group))));
            return;
          }
          long answer = answerGroup != null ? answerGroup : group;
          out.write(Frames.groupSelect((int) answer));
        } else if (frame.type() == Frames.HELLO) {
          out.write(Frames.encode(Frames.WELCOME, Arrays.asList(id, "farm", leaderId,
              leaderId != null && leaderId == id ? "leader" : "follower", configuration())));
        } else if (frame.type() == Frames.CALL) {
          long callId = (Long) frame.fields().get(0);
          String op = (String) frame.fields().get(1);
          synchronized (this) {
            ops.add(op);
            groups.add(group);
          }
          List<Object> reply;
          try {
            reply = Arrays.asList(callId, 0L, handler.answer(op, (Map<?, ?>) frame.fields().get(2)), "", Map.of());
          } catch (FarmException e) {
            reply = Arrays.asList(callId, (long) e.code(), null, e.getMessage(), e.detail());
          }
          out.write(Frames.encode(Frames.REPLY, reply));
        }
      }
    } catch (IOException | Frames.Bad e) {
      // the client went away, or the test closed the member
    }
  }

  private byte[] configuration() {
    Map<String, String> addresses = new LinkedHashMap<>();
    members.forEach((k, v) -> addresses.put(String.valueOf(k), v));
    return ("{\"addresses\": {" + addresses.entrySet().stream()
        .map(e -> "\"" + e.getKey() + "\": \"" + e.getValue() + "\"").collect(Collectors.joining(", "))
        + "}}").getBytes(StandardCharsets.UTF_8);
  }

  private static String head(InputStream in) throws IOException {
    ByteArrayOutputStream head = new ByteArrayOutputStream();
    int last4 = 0;
    while (last4 != 0x0d0a0d0a && head.size() < 8192) {
      int b = in.read();
      if (b < 0) {
        throw new IOException("closed in the head");
      }
      head.write(b);
      last4 = (last4 << 8) | b;
    }
    return head.toString(StandardCharsets.US_ASCII);
  }

  @Override
  public synchronized void close() throws IOException {
    server.close();
    for (Socket s : connections) {
      s.close();
    }
  }
}
