package garlicfarm.spark.wire;

import java.util.Map;

/**
 * A member's answer to Hello: who it is, whom it believes leader (null: none known) and the
 * members of the configuration it knows ({id: "host:port"}), so a reader can find the others.
 */
public record Welcome(long nodeId, String cluster, Long leaderId, String role, Map<Long, String> members) {
  public Welcome {
    members = Map.copyOf(members);
  }
}
