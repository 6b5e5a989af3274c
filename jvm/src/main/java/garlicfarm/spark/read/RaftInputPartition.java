package garlicfarm.spark.read;

import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.types.StructType;

import garlicfarm.spark.planning.PlannedPartition;
import garlicfarm.spark.wire.FarmSettings;

/**
 * One task: the farm partition it reads, the pieces the planner cut (pyspark_farm/planning.py `Piece`: {start, stop}
 * for the visible entries of a range, {start, stop, lo, hi} for the staged payloads
 * [lo, hi) of the commit entry at start), the member to read them at (null: the leader),
 * and what the executor needs to read them.
 */
public final class RaftInputPartition implements InputPartition {
  private static final long serialVersionUID = 2L;
  final int farmPartition;          // the Raft group read (the `partition` column's value)
  final String endpoint;
  final long[][] pieces;
  final FarmSettings settings;
  final StructType columns;
  final boolean failOnDataLoss;

  RaftInputPartition(int farmPartition, String endpoint, long[][] pieces, FarmSettings settings,
                     StructType columns, boolean failOnDataLoss) {
    this.farmPartition = farmPartition;
    this.endpoint = endpoint;
    this.pieces = pieces;
    this.settings = settings;
    this.columns = columns;
    this.failOnDataLoss = failOnDataLoss;
  }

  /** The planner's partitions as tasks (its options were checked by the planner). */
  public static InputPartition[] of(List<PlannedPartition> planned, FarmSettings settings,
                                    StructType columns, Map<String, String> options) {
    boolean failOnDataLoss = true;
    for (Map.Entry<String, String> option : options.entrySet()) {
      if (option.getKey().equalsIgnoreCase("failOnDataLoss")) {
        String value = option.getValue().trim().toLowerCase(Locale.ROOT);
        failOnDataLoss = !(value.equals("false") || value.equals("0") || value.equals("no"));
      }
    }
    InputPartition[] tasks = new InputPartition[planned.size()];
    for (int i = 0; i < tasks.length; i++) {
      PlannedPartition part = planned.get(i);
      tasks[i] = new RaftInputPartition(part.partition(), part.endpoint(), part.pieces(),
          settings, columns, failOnDataLoss);
    }
    return tasks;
  }
}
