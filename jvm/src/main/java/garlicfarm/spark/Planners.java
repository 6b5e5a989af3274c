package garlicfarm.spark;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import garlicfarm.spark.planning.PythonPlanner;

/**
 * The driver's Python planners: one per scan or stream while it runs, and one kept idle
 * per interpreter for the next (starting Python and importing the planner takes ~0.4 s,
 * which a batch read of a million rows would otherwise pay every time). An idle planner
 * holds no reader and no connection; it ends with the driver (its stdin closes).
 */
final class Planners {
  private static final Map<String, Deque<PythonPlanner>> IDLE = new HashMap<>();
  private static final int IDLE_PER_INTERPRETER = 1;

  private Planners() {
  }

  /** A planner opened for {@code mode} with the source's options. */
  static PythonPlanner open(String mode, Map<String, String> options) {
    return open(mode, options, List.of());
  }

  /** A planner opened for a batch scan narrowed by the filters on `index` it pushed. */
  static PythonPlanner open(String mode, Map<String, String> options,
                            List<Map<String, Object>> filters) {
    PythonPlanner planner = idleOrNew(PythonPlanner.activeInterpreter());
    try {
      planner.open(mode, options, filters);
      return planner;
    } catch (RuntimeException e) {
      release(planner);                 // refused options: the process stays usable
      throw e;
    }
  }

  /** An idle planner of {@code python} that still answers, else a new one. */
  private static PythonPlanner idleOrNew(String python) {
    PythonPlanner planner;
    while ((planner = idle(python)) != null) {
      if (planner.usable()) {
        return planner;
      }
      planner.close();
    }
    try {
      return PythonPlanner.launch(python, PythonPlanner.DEFAULT_TIMEOUT);
    } catch (IOException e) {
      throw new IllegalStateException("garlicfarm-columnar: cannot start its planner with "
          + python + " -m " + PythonPlanner.MODULE + " (" + e.getMessage() + "): set "
          + "spark.pyspark.driver.python or PYSPARK_PYTHON to a Python that has garlicfarm", e);
    }
  }

  /** The scan or stream is over: keep the planner for the next, or stop it. */
  static void release(PythonPlanner planner) {
    String python = PythonPlanner.activeInterpreter();
    synchronized (IDLE) {
      Deque<PythonPlanner> idle = IDLE.computeIfAbsent(python, key -> new ArrayDeque<>());
      if (idle.size() < IDLE_PER_INTERPRETER && planner.usable() && planner.release()) {
        idle.push(planner);
        return;
      }
    }
    planner.close();
  }

  private static PythonPlanner idle(String python) {
    synchronized (IDLE) {
      Deque<PythonPlanner> idle = IDLE.get(python);
      return idle == null ? null : idle.poll();
    }
  }
}
