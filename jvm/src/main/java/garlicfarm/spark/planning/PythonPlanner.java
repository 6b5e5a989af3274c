package garlicfarm.spark.planning;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Python planner of one scan or stream: a {@code python -m pyspark_farm.jvm.planner}
 * process on the driver, asked over JSON lines (pyspark_farm/jvm/planner.py has the
 * protocol). Planning stays in Python so that format("garlicfarm-columnar") plans exactly
 * as format("garlicfarm") does. The process's stderr goes to the driver's log, its last
 * lines also into the message of a failure. Requests are serialized (one at a time).
 */
public final class PythonPlanner implements AutoCloseable {
  public static final String MODULE = "pyspark_farm.jvm.planner";
  /** The default bound on one answer: planning a large backlog reads many entry headers. */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofMinutes(10);
  private static final Duration STOP_WAIT = Duration.ofSeconds(5);
  private static final int STDERR_LINES = 40;
  private static final Logger LOG = LoggerFactory.getLogger(PythonPlanner.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Object EOF = new Object();

  private final Process process;
  private final String command;
  private final Duration timeout;
  private final Writer stdin;
  private final BlockingQueue<Object> answers = new LinkedBlockingQueue<>();
  private final Deque<String> stderrTail = new ArrayDeque<>();
  private final Thread stderrPump;
  private String broken;   // why no request can be answered any more, once it is so
  private boolean closed;

  private PythonPlanner(Process process, String command, Duration timeout) {
    this.process = process;
    this.command = command;
    this.timeout = timeout;
    this.stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
    pump("stdout", process.getInputStream(), answers::add, true);
    this.stderrPump = pump("stderr", process.getErrorStream(), line -> {
      LOG.warn("garlicfarm planner: {}", line);
      synchronized (stderrTail) {
        stderrTail.addLast(line);
        if (stderrTail.size() > STDERR_LINES) {
          stderrTail.removeFirst();
        }
      }
    }, false);
  }

  /** Starts {@code python -m pyspark_farm.jvm.planner}, not yet opened. */
  public static PythonPlanner launch(String python, Duration timeout) throws IOException {
    String command = python + " -m " + MODULE;
    Process process;
    try {
      process = new ProcessBuilder(python, "-m", MODULE).start();
    } catch (IOException e) {
      throw new IOException("garlicfarm planner: cannot run " + command + " (" + e.getMessage()
          + "): set spark.pyspark.driver.python or PYSPARK_PYTHON to a Python with garlicfarm "
          + "installed", e);
    }
    return new PythonPlanner(process, command, timeout);
  }

  /** Opens the planner for a "batch" scan or a "stream" with the source's options (a
   *  PlannerException, e.g. OptionError, when they are refused: the planner stays usable). */
  public synchronized void open(String mode, Map<String, String> options) {
    open(mode, options, List.of());
  }

  /** {@link #open(String, Map)} with the filters on `index` a batch scan pushed
   *  ({"type": "GreaterThan", "value": 5}, ...): they narrow the range planned. */
  public synchronized void open(String mode, Map<String, String> options,
      List<Map<String, Object>> filters) {
    if (!"batch".equals(mode) && !"stream".equals(mode)) {
      throw new IllegalArgumentException("mode is batch or stream, not " + mode);
    }
    Map<String, Object> fields = new LinkedHashMap<>();
    fields.put("mode", mode);
    fields.put("options", options);
    if (!filters.isEmpty()) {
      fields.put("filters", filters);
    }
    JsonNode schema = request("open", fields).get("schema");
    if (schema == null || !schema.isTextual()) {      // not the planner of this jar's protocol
      throw fail("'open' answered no schema DDL", true);
    }
  }

  /** Ends the scan or stream it was opened for, keeping the process for the next one;
   *  false (and the process stopped) when it cannot be kept. */
  public synchronized boolean release() {
    try {
      request("close", null);
      return true;
    } catch (PlannerException e) {
      close();
      return false;
    }
  }

  /** Is the process still there to answer? */
  public synchronized boolean usable() {
    return !closed && broken == null && process.isAlive();
  }

  /** The driver's Python, as PySpark chooses it: conf, then environment, then python3. */
  public static String interpreter(SparkConf conf) {
    return interpreter(conf == null ? key -> null : key -> conf.get(key, null), System::getenv);
  }

  /** {@link #interpreter(SparkConf)} of the active session's conf, if any. */
  public static String activeInterpreter() {
    scala.Option<SparkSession> session = SparkSession.getActiveSession();
    return interpreter(session.isDefined() ? session.get().sparkContext().getConf() : null);
  }

  static String interpreter(Function<String, String> conf, Function<String, String> env) {
    for (String key : new String[] {"spark.pyspark.driver.python", "spark.pyspark.python"}) {
      String value = conf.apply(key);
      if (value != null && !value.isBlank()) {
        return value;
      }
    }
    for (String key : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String value = env.apply(key);
      if (value != null && !value.isBlank()) {
        return value;
      }
    }
    return "python3";
  }

  /**
   * One request: {"op": op, ...fields}. Returns the answer's "ok" value; throws a
   * PlannerException carrying the Python exception's type and message, or saying the
   * process died, hung (then it is stopped) or answered something that is not JSON.
   */
  public synchronized JsonNode request(String op, Map<String, Object> fields) {
    if (closed || broken != null) {
      throw new PlannerException(null, "cannot ask '" + op + "': "
          + (broken != null ? broken : "the planner is closed"));
    }
    ObjectNode request = JSON.createObjectNode();
    request.put("op", op);
    if (fields != null) {
      fields.forEach((name, value) -> request.set(name, JSON.valueToTree(value)));
    }
    try {
      stdin.write(JSON.writeValueAsString(request));
      stdin.write('\n');
      stdin.flush();
    } catch (IOException e) {
      throw fail("could not send '" + op + "' (" + e.getMessage() + ")", false);
    }
    Object line;
    try {
      line = answers.poll(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw fail("interrupted while waiting for the answer to '" + op + "'", true);
    }
    if (line == null) {
      throw fail("no answer to '" + op + "' within " + timeout + "; the process was stopped",
          true);
    }
    if (line == EOF) {
      throw fail("the process ended before answering '" + op + "'", false);
    }
    JsonNode answer;
    try {
      answer = JSON.readTree((String) line);
    } catch (JsonProcessingException e) {
      answer = null;
    }
    if (answer != null && answer.has("ok")) {
      return answer.get("ok");
    }
    JsonNode error = answer == null ? null : answer.get("error");
    if (error != null && error.path("type").isTextual() && error.path("message").isTextual()) {
      throw new PlannerException(error.get("type").asText(), error.get("message").asText());
    }
    String shown = ((String) line).length() > 500
        ? ((String) line).substring(0, 500) + "..." : (String) line;
    throw fail("answered '" + op + "' with something that is not an answer: " + shown, true);
  }

  /** Sends stop, waits briefly for the process to end, and destroys it if it does not. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    if (broken == null) {
      try {
        request("stop", null);
      } catch (PlannerException e) {
        LOG.warn("garlicfarm planner: stop failed: {}", e.getMessage());
      }
    }
    closed = true;
    try {
      stdin.close();
    } catch (IOException e) {
      // the process is gone already
    }
    stop();
  }

  /**
   * Marks the planner broken and ends the process (at once when it is `hung`, else after
   * it exits, for its exit code): the failure, with the tail of its stderr.
   */
  private PlannerException fail(String why, boolean hung) {
    if (hung) {
      process.destroy();
    }
    stop();
    broken = "the Python planner (" + command + ") is unusable: " + why;
    String tail;
    synchronized (stderrTail) {
      tail = String.join("\n", stderrTail);
    }
    String exit = process.isAlive() ? "" : " (exit code " + process.exitValue() + ")";
    return new PlannerException(null, broken + exit + (tail.isEmpty()
        ? "; it wrote nothing to stderr" : "; its last stderr lines:\n" + tail));
  }

  /** Waits a little for the process to end, then destroys it; lets stderr drain. */
  private void stop() {
    try {
      if (!process.waitFor(STOP_WAIT.toMillis(), TimeUnit.MILLISECONDS)) {
        process.destroy();
        if (!process.waitFor(STOP_WAIT.toMillis(), TimeUnit.MILLISECONDS)) {
          process.destroyForcibly().waitFor(STOP_WAIT.toMillis(), TimeUnit.MILLISECONDS);
        }
      }
      stderrPump.join(STOP_WAIT.toMillis());
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
  }

  /** A daemon thread handing each line of `stream` to `sink`, then EOF if `markEnd`. */
  private Thread pump(String name, InputStream stream, Consumer<String> sink, boolean markEnd) {
    Thread thread = new Thread(() -> {
      try (BufferedReader reader = new BufferedReader(
          new InputStreamReader(stream, StandardCharsets.UTF_8))) {
        for (String line = reader.readLine(); line != null; line = reader.readLine()) {
          sink.accept(line);
        }
      } catch (IOException e) {
        LOG.debug("garlicfarm planner: {} closed: {}", name, e.getMessage());
      }
      if (markEnd) {
        answers.add(EOF);
      }
    }, "garlicfarm-planner-" + name);
    thread.setDaemon(true);
    thread.start();
    return thread;
  }
}
