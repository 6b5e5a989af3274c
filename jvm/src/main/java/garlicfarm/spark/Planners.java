package garlicfarm.spark;

import java.io.IOException;
import java.util.Map;

import garlicfarm.spark.planning.PythonPlanner;

/** Starts the Python planner of a scan or a stream with the driver's Python. */
final class Planners {
  private Planners() {
  }

  static PythonPlanner open(String mode, Map<String, String> options) {
    String python = PythonPlanner.activeInterpreter();
    try {
      return PythonPlanner.start(python, mode, options);
    } catch (IOException e) {
      throw new IllegalStateException("garlicfarm-columnar: cannot start its planner with "
          + python + " -m pyspark_farm.jvm.planner (" + e.getMessage() + "): set "
          + "spark.pyspark.driver.python or PYSPARK_PYTHON to a Python that has garlicfarm", e);
    }
  }
}
