package garlicfarm.spark.planning;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * PythonPlanner against real processes that stand in for `python -m pyspark_farm.jvm.planner`
 * (shell scripts speaking its JSON lines, or failing as a broken planner would). The real
 * planner's answers are tested from Python (tests/jvm/test_planner.py), and the two together
 * by the columnar reads (tests/spark/test_columnar_source.py).
 */
class PythonPlannerTest {
  private static final Duration QUICK = Duration.ofSeconds(2);
  private static final Map<String, String> OPTIONS = Map.of("endpoints", "h:1");

  @TempDir
  Path dir;

  /** An executable script: PythonPlanner runs it as `script -m pyspark_farm.jvm.planner`. */
  private String script(String name, String body) throws IOException {
    Path path = dir.resolve(name);
    Files.writeString(path, "#!/bin/sh\n" + body + "\n");
    Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("rwx------"));
    return path.toString();
  }

  /** A planner that answers each op as the real one does, or as `refuse` says for open. */
  private String answering(String openAnswer) throws IOException {
    return script("planner", String.join("\n",
        "while read -r line; do",
        "  case \"$line\" in",
        "    *'\"op\":\"open\"'*) echo '" + openAnswer + "' ;;",
        "    *'\"op\":\"partitions\"'*) echo '{\"ok\": [{\"endpoint\": \"h:1\", \"pieces\": [[3, 5], [9, 10, 2, 4]]},"
            + " {\"endpoint\": null, \"pieces\": [[5, 9]]}]}' ;;",
        "    *'\"op\":\"close\"'*) echo '{\"ok\": null}' ;;",
        "    *'\"op\":\"stop\"'*) echo '{\"ok\": null}'; exit 0 ;;",
        "    *) echo '{\"error\": {\"type\": \"ProtocolError\", \"message\": \"unknown\"}}' ;;",
        "  esac",
        "done"));
  }

  @Test
  void opensPlansReleasesAndStops() throws IOException {
    PythonPlanner planner = PythonPlanner.launch(answering("{\"ok\": {\"schema\": \"index BIGINT\"}}"), QUICK);
    try {
      planner.open("batch", OPTIONS);
      List<PlannedPartition> planned = PlannedPartition.fromJson(planner.request("partitions", null));
      assertEquals(2, planned.size());
      assertEquals("h:1", planned.get(0).endpoint());
      assertEquals(List.of(3L, 5L, 9L, 10L, 2L, 4L), List.of(planned.get(0).pieces()[0][0],
          planned.get(0).pieces()[0][1], planned.get(0).pieces()[1][0], planned.get(0).pieces()[1][1],
          planned.get(0).pieces()[1][2], planned.get(0).pieces()[1][3]));
      assertNull(planned.get(1).endpoint());
      assertTrue(planner.release(), "kept for the next scan");
      assertTrue(planner.usable());
      planner.open("stream", OPTIONS);
    } finally {
      planner.close();
    }
    assertFalse(planner.usable());
    PlannerException closed = assertThrows(PlannerException.class, () -> planner.request("partitions", null));
    assertTrue(closed.getMessage().contains("the planner is closed"), closed.getMessage());
  }

  @Test
  void aRefusedOptionKeepsThePlannerUsable() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(answering("{\"error\": {\"type\": \"OptionError\", "
        + "\"message\": \"garlicfarm planner: OptionError: startingOffsets: garbage\"}}"), QUICK)) {
      PlannerException e = assertThrows(PlannerException.class, () -> planner.open("batch", OPTIONS));
      assertEquals("OptionError", e.pythonType());
      assertTrue(e.getMessage().contains("startingOffsets"), e.getMessage());
      assertTrue(planner.usable());
      assertTrue(planner.release());
    }
  }

  @Test
  void anOpenWithoutSchemaBreaksThePlanner() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(answering("{\"ok\": {}}"), QUICK)) {
      PlannerException e = assertThrows(PlannerException.class, () -> planner.open("batch", OPTIONS));
      assertTrue(e.getMessage().contains("'open' answered no schema DDL"), e.getMessage());
      assertFalse(planner.usable());
    }
  }

  @Test
  void aDyingPlannerReportsItsExitCodeAndStderr() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(script("dying", "echo 'planner broke here' >&2\nexit 3"),
        QUICK)) {
      PlannerException e = assertThrows(PlannerException.class, () -> planner.open("batch", OPTIONS));
      assertNull(e.pythonType());
      assertTrue(e.getMessage().contains("the Python planner"), e.getMessage());
      assertTrue(e.getMessage().contains("exit code 3") && e.getMessage().contains("planner broke here"),
          e.getMessage());
      assertFalse(planner.usable());
    }
  }

  @Test
  void aHungPlannerIsStoppedAfterTheTimeout() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(script("hung", "exec sleep 60"), Duration.ofSeconds(1))) {
      long started = System.nanoTime();
      PlannerException e = assertThrows(PlannerException.class, () -> planner.open("batch", OPTIONS));
      double seconds = (System.nanoTime() - started) / 1e9;
      assertTrue(e.getMessage().contains("no answer to 'open' within PT1S"), e.getMessage());
      assertTrue(seconds >= 1.0 && seconds < 15, "took " + seconds + " s");
      assertFalse(planner.usable());
    }
  }

  @Test
  void aLineThatIsNotAnAnswerIsShown() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(
        script("chatty", "read request\necho 'hello there'\nexec sleep 60"), QUICK)) {
      PlannerException e = assertThrows(PlannerException.class, () -> planner.open("batch", OPTIONS));
      assertTrue(e.getMessage().contains("not an answer: hello there"), e.getMessage());
    }
  }

  @Test
  void aMissingInterpreterNamesTheSettings() {
    IOException e = assertThrows(IOException.class,
        () -> PythonPlanner.launch(dir.resolve("no-such-python").toString(), QUICK));
    assertTrue(e.getMessage().contains("spark.pyspark.driver.python or PYSPARK_PYTHON"), e.getMessage());
  }

  @Test
  void onlyBatchOrStream() throws IOException {
    try (PythonPlanner planner = PythonPlanner.launch(answering("{\"ok\": {\"schema\": \"x INT\"}}"), QUICK)) {
      assertThrows(IllegalArgumentException.class, () -> planner.open("continuous", OPTIONS));
    }
  }

  @Test
  void theInterpreterIsChosenAsPySparkChoosesIt() {
    assertEquals("py9", PythonPlanner.interpreter(k -> null, Map.of("PYSPARK_PYTHON", "py9")::get));
    assertEquals("b", PythonPlanner.interpreter(Map.of("spark.pyspark.python", "a",
        "spark.pyspark.driver.python", "b")::get, k -> "c"));
    assertEquals("a", PythonPlanner.interpreter(Map.of("spark.pyspark.python", "a",
        "spark.pyspark.driver.python", " ")::get, k -> "c"));
    assertEquals("d", PythonPlanner.interpreter(k -> null, Map.of("PYSPARK_PYTHON", "p",
        "PYSPARK_DRIVER_PYTHON", "d")::get));
    assertEquals("python3", PythonPlanner.interpreter(k -> null, k -> null));
  }
}
