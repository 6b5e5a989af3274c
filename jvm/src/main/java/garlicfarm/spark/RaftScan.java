package garlicfarm.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;

import garlicfarm.spark.wire.FarmSettings;

/**
 * A scan of the columns a query uses (Spark prunes the others: a column not read is
 * never built), over the range its filters on `index` leave. The connection options are
 * checked here, on the driver, so a bad one fails the query before any task runs.
 */
final class RaftScan implements Scan {
  private final StructType columns;
  private final Map<String, String> options;
  private final List<Map<String, Object>> indexFilters;
  private final FarmSettings settings;

  RaftScan(StructType columns, Map<String, String> options,
           List<Map<String, Object>> indexFilters) {
    this.columns = columns;
    this.options = options;
    this.indexFilters = indexFilters;
    this.settings = FarmSettings.fromOptions(options);
  }

  @Override
  public StructType readSchema() {
    return columns;
  }

  @Override
  public String description() {
    return "garlicfarm-columnar " + String.join(",", settings.endpoints())
        + (indexFilters.isEmpty() ? "" : " PushedFilters: " + indexFilters);
  }

  @Override
  public Batch toBatch() {
    return new RaftBatch(columns, options, indexFilters, settings);
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new RaftMicroBatchStream(columns, options, settings);
  }

  /**
   * Keeps the columns Spark asks for, and the filters on `index` a batch scan can narrow
   * its range by (as format("garlicfarm") does with filter pushdown on). Spark applies
   * every filter to the rows again: a pushed filter only saves reading.
   */
  static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns,
      SupportsPushDownFilters {
    private StructType columns;
    private final Map<String, String> options;
    private final List<Map<String, Object>> indexFilters = new ArrayList<>();
    private Filter[] pushed = new Filter[0];

    Builder(StructType columns, Map<String, String> options) {
      this.columns = columns;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType required) {
      columns = required;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> taken = new ArrayList<>();
      for (Filter filter : filters) {
        Map<String, Object> json = indexFilter(filter);
        if (json != null) {
          indexFilters.add(json);
          taken.add(filter);
        }
      }
      pushed = taken.toArray(new Filter[0]);
      return filters;
    }

    @Override
    public Filter[] pushedFilters() {
      return pushed;
    }

    /** The planner's form of a filter on `index` with whole-number values; else null. */
    private static Map<String, Object> indexFilter(Filter filter) {
      String[] columns = filter.references();
      if (columns.length != 1 || !"index".equals(columns[0])) {
        return null;
      }
      Object value;
      if (filter instanceof In f) {
        List<Long> values = new ArrayList<>();
        for (Object each : f.values()) {
          values.add(whole(each));
        }
        value = values.contains(null) ? null : values;
      } else if (filter instanceof EqualTo f) {
        value = whole(f.value());
      } else if (filter instanceof EqualNullSafe f) {
        value = whole(f.value());
      } else if (filter instanceof GreaterThan f) {
        value = whole(f.value());
      } else if (filter instanceof GreaterThanOrEqual f) {
        value = whole(f.value());
      } else if (filter instanceof LessThan f) {
        value = whole(f.value());
      } else if (filter instanceof LessThanOrEqual f) {
        value = whole(f.value());
      } else {
        return null;
      }
      return value == null ? null
          : Map.of("type", filter.getClass().getSimpleName(), "value", value);
    }

    /** A Long or Integer literal as a long; else null. */
    private static Long whole(Object literal) {
      return literal instanceof Long || literal instanceof Integer
          ? ((Number) literal).longValue() : null;
    }

    @Override
    public Scan build() {
      return new RaftScan(columns, options, List.copyOf(indexFilters));
    }
  }
}
