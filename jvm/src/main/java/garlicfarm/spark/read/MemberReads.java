package garlicfarm.spark.read;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import garlicfarm.spark.wire.FarmException;
import garlicfarm.spark.wire.FarmLink;
import garlicfarm.spark.wire.FarmSettings;
import garlicfarm.spark.wire.Welcome;

/**
 * Where one task's reads go, with the fallbacks of the Python reader
 * (pyspark_farm/log_access.py PieceReader): the member the task was given, waited for
 * with backoff while it is behind (INDEX_OVERFLOW); the leader when it stays behind or is
 * gone; and where the entries were compacted away (INDEX_UNDERFLOW), any member that
 * still holds them, where the task then reads on. The same committed range gives the
 * same entries at every member, so switching never changes the rows. Thread-safe: a
 * task's fetching thread reads ahead through it.
 */
final class MemberReads implements AutoCloseable {
  private static final int NOT_LEADER = 2;
  private static final int INDEX_OVERFLOW = 4;
  private static final int INDEX_UNDERFLOW = 5;

  private final FarmSettings settings;
  private final int partition;      // the farm partition (Raft group) every link reads
  private final long waitNanos;
  private final Map<String, FarmLink> links = new HashMap<>();
  private final Map<String, Long> firsts = new HashMap<>();
  private String endpoint;          // the member reads go to; null: the leader
  private String leader;            // the leader's endpoint, when known

  MemberReads(FarmSettings settings, String endpoint) {
    this(settings, endpoint, 0);
  }

  /** Reads of farm partition {@code partition}: every link opens in that Raft group. */
  MemberReads(FarmSettings settings, String endpoint, int partition) {
    this.settings = settings;
    this.partition = partition;
    this.endpoint = endpoint;
    this.waitNanos = (long) (settings.timeoutSeconds() * 1e9);
  }

  /** {@code op} (a read of entries from {@code start}) with the fallbacks above. */
  synchronized Object read(String op, Map<String, ?> args, long start) throws IOException {
    String at = endpoint;
    try {
      if (at != null) {
        long deadline = System.nanoTime() + waitNanos;
        long delayMs = 10;
        while (true) {
          try {
            return link(at).call(op, args);
          } catch (FarmException e) {
            forgetIfBroken(at, e);
            if (e.code() == INDEX_UNDERFLOW) {
              throw e;
            }
            if (e.code() != INDEX_OVERFLOW
                || System.nanoTime() + delayMs * 1_000_000 > deadline) {
              break;                        // gone, failing, or still behind: the leader
            }
            sleep(delayMs);                 // a follower catching up: poll with backoff
            delayMs = Math.min(delayMs * 2, 200);
          }
        }
        endpoint = at = null;               // the rest of the task reads at the leader
      }
      return atLeader(op, args);
    } catch (FarmException e) {
      if (e.code() != INDEX_UNDERFLOW) {
        throw e;
      }
      return anywhere(op, args, start);
    }
  }

  /** Does the member reads go to still hold {@code index}? Asked once per member (a
   *  log's start only moves up; a later compaction shows as INDEX_UNDERFLOW on the read).
   *  A member that does not answer counts as holding it: the read then falls back. */
  synchronized boolean holds(long index) {
    String at = endpoint == null ? "" : endpoint;
    Long first = firsts.get(at);
    if (first == null) {
      try {
        Object bounds = endpoint == null ? atLeader("log_bounds", Map.of())
            : link(endpoint).call("log_bounds", Map.of());
        first = (Long) ((List<?>) bounds).get(0);
        firsts.put(at, first);
      } catch (IOException | RuntimeException e) {
        return true;
      }
    }
    return index >= first;
  }

  private Object atLeader(String op, Map<String, ?> args) throws IOException {
    long deadline = System.nanoTime() + waitNanos;
    long delayMs = 50;
    while (true) {
      String at = leaderEndpoint();
      try {
        return link(at).call(op, args);
      } catch (FarmException e) {
        forgetIfBroken(at, e);
        if (e.code() == NOT_LEADER) {
          Object hint = e.detail().get("endpoint");
          leader = hint instanceof String s && !s.isEmpty() ? s : null;
        } else if (e.unavailable()) {
          leader = null;
        } else {
          throw e;
        }
        if (System.nanoTime() + delayMs * 1_000_000 > deadline) {
          throw e;
        }
        sleep(delayMs);
        delayMs = Math.min(delayMs * 2, 1000);
      }
    }
  }

  /** The leader's endpoint as a member's Welcome names it (any endpoint when none does:
   *  its answer NOT_LEADER names the leader). */
  private String leaderEndpoint() throws IOException {
    if (leader != null) {
      return leader;
    }
    FarmException last = null;
    for (String candidate : settings.endpoints()) {
      try {
        Welcome welcome = link(candidate).welcome();
        if (welcome.leaderId() != null && welcome.leaderId() == welcome.nodeId()) {
          return leader = candidate;
        }
        String named = welcome.leaderId() == null ? null
            : welcome.members().get(welcome.leaderId());
        if (named != null) {
          return leader = named;
        }
        return candidate;
      } catch (FarmException e) {
        forgetIfBroken(candidate, e);
        last = e;
      }
    }
    throw last != null ? last : new IOException("garlicfarm-columnar: no endpoints");
  }

  /** {@code op} at a member that still holds {@code start}, in rounds with backoff; reads
   *  go on there. EntriesGoneException when every member's log starts after it. */
  private Object anywhere(String op, Map<String, ?> args, long start) throws IOException {
    long deadline = System.nanoTime() + waitNanos;
    long delayMs = 50;
    while (true) {
      Map<Long, String> members = members();
      Map<Long, Long> answered = new TreeMap<>();
      boolean silent = false;
      for (Map.Entry<Long, String> member : new TreeMap<>(members).entrySet()) {
        String at = member.getValue();
        try {
          Object answer = link(at).call(op, args);
          endpoint = at;
          return answer;
        } catch (FarmException e) {
          forgetIfBroken(at, e);
          if (e.code() == INDEX_UNDERFLOW && e.detail().get("first") instanceof Long first) {
            answered.put(member.getKey(), first);
          } else {
            silent = true;                  // down, or not that far yet
          }
        }
      }
      if (!silent) {
        throw new EntriesGoneException(start, answered);
      }
      if (System.nanoTime() + delayMs * 1_000_000 >= deadline) {
        throw new IOException("garlicfarm-columnar: entry " + start + " is compacted away "
            + "at some members of the farm and the others did not answer in time (first "
            + "indexes: " + answered + ")");
      }
      sleep(delayMs);
      delayMs = Math.min(delayMs * 2, 500);
    }
  }

  /** Every member that keeps a log, as the leader's Welcome lists them. */
  private Map<Long, String> members() throws IOException {
    return link(leaderEndpoint()).welcome().members();
  }

  private FarmLink link(String at) throws FarmException {
    FarmLink link = links.get(at);
    if (link == null) {
      link = FarmLink.open(at, settings, partition);
      links.put(at, link);
    }
    return link;
  }

  /** A link that failed with a broken connection is dropped: the next call redials. */
  private void forgetIfBroken(String at, FarmException e) {
    if (e.unavailable()) {
      FarmLink link = links.remove(at);
      if (link != null) {
        link.close();
      }
    }
  }

  private static void sleep(long ms) throws InterruptedIOException {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("garlicfarm-columnar: interrupted");
    }
  }

  @Override
  public synchronized void close() {
    for (FarmLink link : links.values()) {
      link.close();
    }
    links.clear();
  }
}
