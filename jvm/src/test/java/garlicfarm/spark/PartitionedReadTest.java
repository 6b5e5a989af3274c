package garlicfarm.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** What the `partitions` option changes on the JVM side: the schema and the offsets it
 *  carries (the planner states both; they must mean what format("garlicfarm")'s mean). */
class PartitionedReadTest {

  @Test
  void thePartitionColumnComesLastWithTheOption() {
    StructType plain = ColumnarRaftSource.columns(Map.of("endpoints", "h:1"));
    assertEquals(StructType.fromDDL(ColumnarRaftSource.COLUMNS_DDL), plain);
    StructType partitioned = ColumnarRaftSource.columns(Map.of("PARTITIONS", "0,2"));
    assertEquals(plain.size() + 1, partitioned.size());
    assertEquals("partition", partitioned.fields()[plain.size()].name());
    assertEquals(DataTypes.IntegerType, partitioned.fields()[plain.size()].dataType());
  }

  @Test
  void aSchemaWithoutThePartitionColumnIsRefusedNamingTheOne() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> new ColumnarRaftSource().getTable(StructType.fromDDL(ColumnarRaftSource.COLUMNS_DDL),
            null, Map.of("partitions", "all")));
    assertTrue(e.getMessage().contains("partition INT"), e.getMessage());
  }

  @Test
  void perPartitionOffsetsRoundTripAsTheirJson() {
    for (String json : new String[] {"{\"0\":23,\"2\":7}", "{\"index\":5}",
        "{\"0\":1,\"1\":9007199254740993,\"2\":3}"}) {
      RaftOffset offset = RaftOffset.parse(json);
      assertEquals(json, offset.json());
      assertEquals(offset, RaftOffset.parse(offset.json()), "Spark compares offsets by json()");
    }
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> RaftOffset.parse("{\"0\": "));
    assertTrue(e.getMessage().contains("is not JSON"), e.getMessage());
  }
}
