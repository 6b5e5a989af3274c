package garlicfarm.spark.wire;

import java.security.SecureRandom;
import java.util.Map;

/**
 * One authenticated connection to one farm member, for the JVM reader's calls (read_journal,
 * entry_rows, ...): the Garlic Farm handshake, Hello / Welcome, then Call / Reply frames
 * (docs/protocol.md, "Extension frames"). Calls on a link run one at a time. A link that timed
 * out, broke or received a corrupt frame is closed (its state is unknown); an error Reply
 * leaves it usable.
 */
public final class FarmLink implements AutoCloseable {
  private static final SecureRandom RANDOM = new SecureRandom();

  private final String endpoint;
  private final FarmSettings settings;
  private final int partition;
  private final Stream stream;
  private Welcome welcome;
  private long nextCallId = 1;
  private volatile boolean closed;

  private FarmLink(String endpoint, FarmSettings settings, int partition, Stream stream) {
    this.endpoint = endpoint;
    this.settings = settings;
    this.partition = partition;
    this.stream = stream;
  }

  /**
   * Connects (TCP; TLS when tls.ca is set, verifying the member's certificate and host name
   * against that CA), handshakes, sends Hello and reads the Welcome, all within the
   * settings' timeout. The endpoint is "host:port" (a tcp:// prefix is allowed).
   */
  public static FarmLink open(String endpoint, FarmSettings settings) throws FarmException {
    return open(endpoint, settings, 0);
  }

  /**
   * {@link #open(String, FarmSettings)} in farm partition (Raft group) {@code partition}: a
   * GroupSelect goes before the Hello when it is not 0 (docs/protocol.md, "Groups"), so
   * every call of the link is that partition's. A member that does not host it answers
   * with an error Reply: a FarmException naming the partition.
   */
  public static FarmLink open(String endpoint, FarmSettings settings, int partition)
      throws FarmException {
    if (partition < 0) {
      throw new IllegalArgumentException("a farm partition is 0 or more, not " + partition);
    }
    String target = FarmSettings.parseEndpoints(endpoint).get(0);
    long deadline = Stream.deadline(settings.timeoutSeconds());
    FarmLink link = new FarmLink(target, settings, partition,
        Handshake.connect(target, settings, deadline));
    try {
      byte[] clientId = new byte[16];
      RANDOM.nextBytes(clientId);
      link.stream.write(partition == 0 ? Frames.hello(clientId)
          : Frames.concat(Frames.groupSelect(partition), Frames.hello(clientId)));
      Frames.Frame frame = link.read(deadline, "waiting for the Welcome");
      Frames.Reply reply = frame.type() == Frames.REPLY && partition != 0
          ? link.checked(() -> Frames.reply(frame.fields())) : null;
      if (reply != null && reply.code() != 0) {   // the partition is not hosted there
        link.close();
        throw new FarmException((int) reply.code(), target + " refused partition " + partition
            + ": " + reply.message() + " (check the partitions option against the farm's "
            + "--partitions)", reply.detail(), target);
      }
      if (frame.type() != Frames.WELCOME) {
        throw link.protocol("answered Hello with a frame of type 0x" + Integer.toHexString(frame.type())
            + ", not a Welcome");
      }
      link.welcome = link.checked(() -> Frames.welcome(frame.fields()));
      return link;
    } catch (FarmException e) {
      link.close();
      throw e;
    }
  }

  public Welcome welcome() {
    return welcome;
  }

  public String endpoint() {
    return endpoint;
  }

  /** False once closed (by close(), or after a timeout, a broken connection or a corrupt frame). */
  public boolean isOpen() {
    return !closed;
  }

  /**
   * One Call, blocking until its Reply (within the settings' timeout). Args go as a msgpack map
   * (Long/Integer, Double, String, byte[], Boolean, null, List, Map); the result comes back as
   * Long (every integer), Double, Boolean, String, byte[], List, Map or null. A Reply with an
   * error code throws FarmException with that code, the member's message and detail.
   */
  public synchronized Object call(String op, Map<String, ?> args) throws FarmException {
    if (closed) {
      throw new FarmException(FarmException.UNAVAILABLE, "the link to " + endpoint + " is closed: open a new one",
          endpoint);
    }
    long callId = nextCallId++;
    long deadline = Stream.deadline(settings.timeoutSeconds());
    String what = "waiting for the answer to " + op;
    stream.write(Frames.call(callId, op, args));
    while (true) {
      Frames.Frame frame = read(deadline, what);
      if (frame.type() == Frames.EVENT) {
        continue;
      }
      if (frame.type() != Frames.REPLY) {
        throw protocol("answered " + op + " with a frame of type 0x" + Integer.toHexString(frame.type()));
      }
      Frames.Reply reply = checked(() -> Frames.reply(frame.fields()));
      if (reply.callId() != callId) {
        throw protocol("answered call " + callId + " (" + op + ") with the Reply of call " + reply.callId());
      }
      if (reply.code() != 0) {
        throw new FarmException((int) reply.code(), op + " at " + endpoint + " failed ("
            + FarmException.codeName((int) reply.code()) + "): " + reply.message(), reply.detail(), endpoint);
      }
      return reply.result();
    }
  }

  @Override
  public void close() {
    closed = true;
    stream.close();
  }

  /** The farm partition (Raft group) this link reads. */
  public int partition() {
    return partition;
  }

  /**
   * The next frame: an extension frame whose size is checked before its body is read. A
   * member answers a link of partition p > 0 with GroupSelect(p) first: it is checked
   * (another group is a corrupt stream) and skipped.
   */
  private Frames.Frame read(long deadline, String what) throws FarmException {
    while (true) {
      byte[] head = new byte[Frames.HEAD];
      stream.readFully(head, deadline, what);
      int type = checked(() -> Frames.type(head, what));
      byte[] body = new byte[checked(() -> Frames.bodySize(head))];
      stream.readFully(body, deadline, what);
      Frames.Frame frame = checked(() -> Frames.decode(type, body));
      if (type != Frames.GROUP_SELECT) {
        return frame;
      }
      long group = checked(() -> Frames.group(frame.fields()));
      if (group != partition) {
        throw protocol("answered in partition " + group + " on a link of partition " + partition);
      }
    }
  }

  private interface Decoding<T> {
    T run() throws Frames.Bad;
  }

  /** A decoding step whose Bad frame closes the link as a PROTOCOL failure. */
  private <T> T checked(Decoding<T> step) throws FarmException {
    try {
      return step.run();
    } catch (Frames.Bad e) {
      throw protocol(e.getMessage());
    }
  }

  private FarmException protocol(String what) {
    close();
    return new FarmException(FarmException.PROTOCOL, endpoint + " " + what + ": a corrupt stream, or not a "
        + "garlicfarm member of this version", endpoint);
  }
}
