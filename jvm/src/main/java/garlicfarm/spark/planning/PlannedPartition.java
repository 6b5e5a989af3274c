package garlicfarm.spark.planning;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/**
 * One task the planner planned: the log pieces of farm partition {@code partition} (Raft
 * group; 0 for a farm read without the `partitions` option) to read at {@code endpoint}
 * ("host:port", or null for any member). Each piece is {start, stop}: the visible entries of [start,
 * stop); or {start, stop, lo, hi}: only the staged payloads [lo, hi) of the commit entry
 * at start.
 */
public record PlannedPartition(int partition, String endpoint, long[][] pieces)
    implements Serializable {

  /** The partitions of a "partitions" answer, refusing any other shape. */
  public static List<PlannedPartition> fromJson(JsonNode answer) {
    if (answer == null || !answer.isArray()) {
      throw new PlannerException(null, "a partitions answer is not a JSON array: " + answer);
    }
    List<PlannedPartition> found = new ArrayList<>(answer.size());
    for (JsonNode partition : answer) {
      JsonNode endpoint = partition.get("endpoint");
      JsonNode pieces = partition.get("pieces");
      JsonNode group = partition.path("partition");    // absent: a planner of one log
      if (!group.isMissingNode() && !(group.isIntegralNumber() && group.canConvertToInt()
          && group.intValue() >= 0)) {
        throw new PlannerException(null, "a planned partition's farm partition is not an "
            + "integer 0.." + Integer.MAX_VALUE + ": " + partition);
      }
      if (endpoint == null || !(endpoint.isNull() || endpoint.isTextual())
          || pieces == null || !pieces.isArray()) {
        throw new PlannerException(null, "not a planned partition: " + partition);
      }
      long[][] numbers = new long[pieces.size()][];
      for (int i = 0; i < numbers.length; i++) {
        JsonNode piece = pieces.get(i);
        if (!piece.isArray() || (piece.size() != 2 && piece.size() != 4)) {
          throw new PlannerException(null, "not a piece ([start, stop] or [start, stop, lo,"
              + " hi]): " + piece);
        }
        numbers[i] = new long[piece.size()];
        for (int j = 0; j < piece.size(); j++) {
          if (!piece.get(j).canConvertToLong() || !piece.get(j).isIntegralNumber()) {
            throw new PlannerException(null, "a piece holds a non-integer: " + piece);
          }
          numbers[i][j] = piece.get(j).longValue();
        }
        long[] at = numbers[i];
        boolean sane = at[0] > 0 && at[1] > at[0]
            && (at.length == 2 || (at[1] == at[0] + 1 && 0 <= at[2] && at[2] < at[3]
                && at[3] <= Integer.MAX_VALUE));
        if (!sane) {
          throw new PlannerException(null, "a piece is not a range of log indexes (or a "
              + "commit's payloads [lo, hi)): " + piece);
        }
      }
      found.add(new PlannedPartition(group.isMissingNode() ? 0 : group.intValue(),
          endpoint.isNull() ? null : endpoint.asText(), numbers));
    }
    return found;
  }
}
