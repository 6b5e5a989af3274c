package garlicfarm.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import garlicfarm.spark.wire.FakeMember;
import garlicfarm.spark.wire.FarmException;
import garlicfarm.spark.wire.FarmSettings;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The reads' fallbacks (MemberReads, as pyspark_farm/log_access.py PieceReader does them)
 * against members on real sockets: a member behind is waited for, then the leader; entries
 * compacted away are read where a member still holds them; NOT_LEADER names the leader.
 */
class MemberReadsTest {
  private static final Map<String, Object> ARGS = Map.of("start", 5L, "stop", 9L);
  private final List<FakeMember> members = new ArrayList<>();

  private FakeMember member(long id, FakeMember.Handler handler) throws IOException {
    FakeMember m = new FakeMember(id, handler);
    members.add(m);
    return m;
  }

  /** Every member knows them all, and `leader` leads. */
  private void view(Long leader) {
    Map<Long, String> all = new java.util.TreeMap<>();
    for (int i = 0; i < members.size(); i++) {
      all.put((long) i + 1, members.get(i).endpoint());
    }
    members.forEach(m -> m.view(leader, all));
  }

  @AfterEach
  void close() throws IOException {
    for (FakeMember m : members) {
      m.close();
    }
  }

  /** Reads entering at `endpoints`, with a timeout far above what the fallbacks take here
   *  (a slow first connection on a busy machine must not end a wait). */
  private static MemberReads reads(String endpoints, String taskEndpoint) {
    return reads(endpoints, taskEndpoint, "20");
  }

  private static MemberReads reads(String endpoints, String taskEndpoint, String timeout) {
    return new MemberReads(FarmSettings.fromOptions(Map.of("endpoints", endpoints, "username", "u",
        "password", "p", "timeout", timeout)), taskEndpoint);
  }

  private static FarmException error(int code, Map<String, ?> detail) {
    return new FarmException(code, "code " + code, detail, "fake");
  }

  private static FakeMember.Handler answering(Object result) {
    return (op, args) -> result;
  }

  @Test
  void aMemberBehindIsWaitedForWhileItCatchesUp() throws IOException {
    AtomicInteger asked = new AtomicInteger();
    FakeMember a = member(1, (op, args) -> {
      if (asked.incrementAndGet() <= 2) {
        throw error(FarmException.INDEX_OVERFLOW, Map.of("last", 4L));
      }
      return "from-1";
    });
    FakeMember b = member(2, answering("from-leader"));
    view(2L);
    try (MemberReads reads = reads(b.endpoint(), a.endpoint())) {
      assertEquals("from-1", reads.read("read_journal", ARGS, 5));
      assertEquals("from-1", reads.read("read_journal", ARGS, 5));
    }
    assertEquals(4, a.ops().size());
    assertEquals(List.of(), b.ops());
  }

  @Test
  void aMemberThatStaysBehindIsLeftForTheLeader() throws IOException {
    FakeMember a = member(1, (op, args) -> {
      throw error(FarmException.INDEX_OVERFLOW, Map.of("last", 4L));
    });
    FakeMember b = member(2, answering("from-leader"));
    view(2L);
    try (MemberReads reads = reads(a.endpoint(), a.endpoint(), "1")) {    // waits 1 s for it
      long started = System.nanoTime();
      assertEquals("from-leader", reads.read("read_journal", ARGS, 5));
      double waited = (System.nanoTime() - started) / 1e9;
      assertTrue(waited > 0.5 && waited < 5, "waited " + waited + " s for the member behind");
      int behind = a.ops().size();
      assertTrue(behind >= 3, "polled with backoff: " + behind);
      assertEquals("from-leader", reads.read("read_journal", ARGS, 9));
      assertEquals(behind, a.ops().size(), "the rest of the task reads at the leader");
    }
    assertEquals(2, b.ops().size());
  }

  @Test
  void aMemberDownIsLeftForTheLeaderAtOnce() throws IOException {
    String down;
    try (ServerSocket closed = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      down = "127.0.0.1:" + closed.getLocalPort();
    }
    FakeMember b = member(1, answering("from-leader"));
    view(1L);
    try (MemberReads reads = reads(b.endpoint(), down)) {
      assertEquals("from-leader", reads.read("read_journal", ARGS, 5));
    }
  }

  @Test
  void entriesCompactedAwayAreReadWhereAMemberStillHoldsThem() throws IOException {
    FakeMember.Handler compacted = (op, args) -> {
      throw error(FarmException.INDEX_UNDERFLOW, Map.of("first", 10L));
    };
    FakeMember a = member(1, compacted);
    FakeMember b = member(2, compacted);
    FakeMember c = member(3, answering("from-3"));
    view(2L);
    try (MemberReads reads = reads(b.endpoint(), a.endpoint())) {
      assertEquals("from-3", reads.read("read_journal", ARGS, 5));
      assertEquals("from-3", reads.read("read_journal", ARGS, 6));
    }
    assertEquals(List.of("read_journal", "read_journal"), a.ops(), "asked first, then in the round");
    assertEquals(List.of("read_journal"), b.ops());
    assertEquals(2, c.ops().size(), "the task reads on where the entries are");
  }

  @Test
  void entriesCompactedAwayEverywhereSayWhereEachLogStarts() throws IOException {
    member(1, (op, args) -> {
      throw error(FarmException.INDEX_UNDERFLOW, Map.of("first", 12L));
    });
    member(2, (op, args) -> {
      throw error(FarmException.INDEX_UNDERFLOW, Map.of("first", 10L));
    });
    view(1L);
    try (MemberReads reads = reads(members.get(0).endpoint(), members.get(1).endpoint())) {
      EntriesGoneException gone = assertThrows(EntriesGoneException.class,
          () -> reads.read("read_journal", ARGS, 5));
      assertEquals(10, gone.kept());
      assertEquals(Map.of(1L, 12L, 2L, 10L), gone.firsts);
      assertTrue(gone.getMessage().contains("entry 5 is compacted away at every member"), gone.getMessage());
    }
  }

  @Test
  void notLeaderNamesTheLeader() throws IOException {
    FakeMember b = member(2, answering("from-2"));
    FakeMember a = member(1, (op, args) -> {
      throw error(FarmException.NOT_LEADER, Map.of("leader", 2L, "endpoint", b.endpoint()));
    });
    a.view(null, Map.of());         // knows no leader: its NOT_LEADER says where to go
    try (MemberReads reads = reads(a.endpoint(), null)) {
      assertEquals("from-2", reads.read("read_journal", ARGS, 5));
    }
    assertEquals(List.of("read_journal"), a.ops());
  }

  @Test
  void otherErrorsFailTheRead() throws IOException {
    FakeMember a = member(1, (op, args) -> {
      throw error(FarmException.FAILED, Map.of());
    });
    view(1L);
    try (MemberReads reads = reads(a.endpoint(), a.endpoint())) {
      FarmException e = assertThrows(FarmException.class, () -> reads.read("read_journal", ARGS, 5));
      assertEquals(FarmException.FAILED, e.code());
    }
  }

  @Test
  void holdsAsksEachMemberOnce() throws IOException {
    FakeMember a = member(1, (op, args) -> List.of(5L, 20L));
    view(1L);
    try (MemberReads reads = reads(a.endpoint(), a.endpoint())) {
      assertFalse(reads.holds(4));
      assertTrue(reads.holds(5));
      assertTrue(reads.holds(30));
    }
    assertEquals(List.of("log_bounds"), a.ops());
  }
}
