package garlicfarm.spark.read;

import java.io.IOException;
import java.util.Map;
import java.util.TreeMap;

/** Every member answered that its log starts after the entry a read needs. */
final class EntriesGoneException extends IOException {
  private static final long serialVersionUID = 1L;
  final long index;
  final Map<Long, Long> firsts;     // member id -> its first index

  EntriesGoneException(long index, Map<Long, Long> firsts) {
    super("entry " + index + " is compacted away at every member (first indexes: "
        + new TreeMap<>(firsts) + ")");
    this.index = index;
    this.firsts = firsts;
  }

  /** The lowest index a member still holds. */
  long kept() {
    return firsts.values().stream().mapToLong(Long::longValue).min().orElse(index + 1);
  }
}
