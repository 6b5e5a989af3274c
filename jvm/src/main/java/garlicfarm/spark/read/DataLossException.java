package garlicfarm.spark.read;

import java.io.IOException;

/**
 * Committed entries a task had to read are gone from every member (compacted into a
 * snapshot): the messages of pyspark_farm/errors.py DataLossError, so a user reads the
 * same advice whichever reader ran.
 */
public final class DataLossException extends IOException {
  private static final long serialVersionUID = 1L;

  private DataLossException(String message) {
    super(message);
  }

  static DataLossException range(long requested, EntriesGoneException gone) {
    long kept = gone.kept();
    return new DataLossException("garlicfarm: entries " + span(requested, kept - 1)
        + " were compacted into a snapshot: no member holds them any more (first indexes: "
        + gone.firsts + "). Set the option failOnDataLoss to false to skip them and "
        + "continue from index " + kept + ", or restart the query with a new checkpoint "
        + "and startingOffsets 'earliest'.");
  }

  static DataLossException batch(long commitIndex, String queryId, long batchId, long[] staged,
                                 EntriesGoneException gone, boolean partial) {
    long kept = gone.kept();
    long[] missing = java.util.Arrays.stream(staged).filter(s -> s < kept).sorted().toArray();
    if (missing.length == 0) {
      missing = java.util.Arrays.stream(staged).sorted().toArray();
    }
    String outcome = partial
        ? "Part of the batch may have been returned already (its entries were compacted "
          + "while the query read it), so this task fails rather than return part of a "
          + "batch: run the query again, and the batch is reported (or, with failOnDataLoss "
          + "false, skipped whole) before any of its rows is read."
        : "Its rows cannot be read from this farm; with the option failOnDataLoss false, "
          + "readers skip the whole batch (never a part of it) and go on.";
    return new DataLossException("garlicfarm: the committed batch at index " + commitIndex
        + " (query " + queryId + ", batch " + batchId + ") needs staged entries "
        + span(missing[0], missing[missing.length - 1]) + " (" + missing.length + " of its "
        + staged.length + " payloads) that no member holds any more (first indexes: "
        + gone.firsts + "). " + outcome);
  }

  static DataLossException commitGone(long commitIndex, EntriesGoneException gone) {
    return new DataLossException("garlicfarm: the committed batch at index " + commitIndex
        + " was compacted away at every member while the query read it (first indexes: "
        + gone.firsts + "). Other tasks may have returned part of its rows, so this task "
        + "fails rather than skip its part: run the query again, and it starts after the "
        + "batch (failOnDataLoss false) or reports it before reading.");
  }

  private static String span(long first, long last) {
    return last <= first ? Long.toString(first) : first + ".." + last;
  }
}
