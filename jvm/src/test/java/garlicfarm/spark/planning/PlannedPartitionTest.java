package garlicfarm.spark.planning;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The partitions answer's shapes (pyspark_farm/jvm/planner.py partitions_json). */
class PlannedPartitionTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static List<PlannedPartition> parse(String json) throws Exception {
    return PlannedPartition.fromJson(JSON.readTree(json));
  }

  @Test
  void rangesAndPayloadSlices() throws Exception {
    List<PlannedPartition> found = parse("[{\"endpoint\": \"n1:7000\", \"pieces\": [[3, 5], [9, 10, 2, 4]]},"
        + " {\"endpoint\": null, \"pieces\": []}]");
    assertEquals("n1:7000", found.get(0).endpoint());
    assertArrayEquals(new long[][] {{3, 5}, {9, 10, 2, 4}}, found.get(0).pieces());
    assertNull(found.get(1).endpoint());
    assertEquals(0, found.get(1).pieces().length);
  }

  @Test
  void theFarmPartitionOfATask() throws Exception {
    List<PlannedPartition> found = parse("[{\"partition\": 2, \"endpoint\": null, \"pieces\": [[3, 5]]},"
        + " {\"endpoint\": null, \"pieces\": [[3, 5]]}]");
    assertEquals(2, found.get(0).partition());
    assertEquals(0, found.get(1).partition(), "a planner of one log names none: partition 0");
    for (String bad : new String[] {"-1", "2147483648", "1.5", "\"1\"", "null"}) {
      String json = "[{\"partition\": " + bad + ", \"endpoint\": null, \"pieces\": []}]";
      PlannerException e = assertThrows(PlannerException.class, () -> parse(json), json);
      assertTrue(e.getMessage().contains("farm partition is not an integer"), e.getMessage());
    }
  }

  @Test
  void everyOtherShapeIsRefusedNamingIt() {
    for (String[] c : new String[][] {
        {"{}", "not a JSON array"},
        {"[{\"pieces\": [[1, 2]]}]", "not a planned partition"},
        {"[{\"endpoint\": 7, \"pieces\": [[1, 2]]}]", "not a planned partition"},
        {"[{\"endpoint\": null, \"pieces\": {}}]", "not a planned partition"},
        {"[{\"endpoint\": null, \"pieces\": [[1, 2, 3]]}]", "not a piece"},
        {"[{\"endpoint\": null, \"pieces\": [5]}]", "not a piece"},
        {"[{\"endpoint\": null, \"pieces\": [[1.5, 2]]}]", "a non-integer"},
        {"[{\"endpoint\": null, \"pieces\": [[\"1\", 2]]}]", "a non-integer"},
        {"[{\"endpoint\": null, \"pieces\": [[1, 99999999999999999999]]}]", "a non-integer"},
        {"[{\"endpoint\": null, \"pieces\": [[0, 2]]}]", "not a range of log indexes"},
        {"[{\"endpoint\": null, \"pieces\": [[5, 5]]}]", "not a range of log indexes"},
        {"[{\"endpoint\": null, \"pieces\": [[5, 7, 0, 1]]}]", "not a range of log indexes"},
        {"[{\"endpoint\": null, \"pieces\": [[5, 6, 2, 2]]}]", "not a range of log indexes"},
        {"[{\"endpoint\": null, \"pieces\": [[5, 6, -1, 2]]}]", "not a range of log indexes"},
        {"[{\"endpoint\": null, \"pieces\": [[5, 6, 0, 2147483648]]}]", "not a range of log indexes"}}) {
      PlannerException e = assertThrows(PlannerException.class, () -> parse(c[0]), c[0]);
      assertTrue(e.getMessage().contains(c[1]), c[0] + ": " + e.getMessage());
    }
  }
}
