package garlicfarm.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream offset as the Python planner states it ({"index": N}: the next entry to read,
 * as in format("garlicfarm")'s checkpoints); the JVM only carries it.
 */
final class RaftOffset extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  final JsonNode value;

  RaftOffset(JsonNode value) {
    this.value = value;
  }

  static RaftOffset parse(String json) {
    try {
      return new RaftOffset(JSON.readTree(json));
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("garlicfarm-columnar: the checkpoint's offset "
          + json + " is not JSON: was the checkpoint written by another source?", e);
    }
  }

  @Override
  public String json() {
    return value.toString();
  }
}
