package garlicfarm.spark.wire;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** A link of a farm partition: GroupSelect before the Hello, the member's answers checked
 *  to be in that partition, a partition the member does not host refused naming it. */
class FarmLinkPartitionTest {
  private static FarmSettings settings(FakeMember member) {
    return FarmSettings.fromOptions(Map.of("endpoints", member.endpoint(), "username", "u",
        "password", "p", "timeout", "5"));
  }

  @Test
  void aLinkOfPartitionTwoCallsInPartitionTwo() throws Exception {
    try (FakeMember member = new FakeMember(1, (op, args) -> "pong")) {
      member.partitions(3, null);
      try (FarmLink two = FarmLink.open(member.endpoint(), settings(member), 2);
           FarmLink zero = FarmLink.open(member.endpoint(), settings(member))) {
        assertEquals("pong", two.call("ping", Map.of()));
        assertEquals("pong", zero.call("ping", Map.of()));
        assertEquals(2, two.partition());
      }
      assertEquals(List.of(2L, 0L), member.groups());
    }
  }

  @Test
  void aPartitionTheMemberDoesNotHostIsRefusedNamingIt() throws Exception {
    try (FakeMember member = new FakeMember(1, (op, args) -> "pong")) {
      member.partitions(3, null);
      FarmException e = assertThrows(FarmException.class,
          () -> FarmLink.open(member.endpoint(), settings(member), 5));
      assertTrue(e.getMessage().contains("refused partition 5: partition 5 is not hosted by node 1"),
          e.getMessage());
      assertTrue(e.getMessage().contains("partitions option"), e.getMessage());
    }
  }

  @Test
  void anAnswerInAnotherPartitionIsACorruptStream() throws Exception {
    try (FakeMember member = new FakeMember(1, (op, args) -> "pong")) {
      member.partitions(3, 1L);
      FarmException e = assertThrows(FarmException.class,
          () -> FarmLink.open(member.endpoint(), settings(member), 2));
      assertEquals(FarmException.PROTOCOL, e.code());
      assertTrue(e.getMessage().contains("answered in partition 1 on a link of partition 2"),
          e.getMessage());
      assertFalse(member.ops().contains("ping"));
    }
  }
}
