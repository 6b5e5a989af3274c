package garlicfarm.spark.planning;

/**
 * A planning request failed: in Python (then {@link #pythonType()} names the exception
 * class, e.g. {@code DataLossError}, so callers can tell a user's error from a bug) or in
 * the planner process itself (dead, hung, or answering something that is not JSON; then
 * {@code pythonType()} is null and the message carries its last stderr lines).
 */
public class PlannerException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String pythonType;

  public PlannerException(String pythonType, String message) {
    super(pythonType == null ? "garlicfarm planner: " + message
        : "garlicfarm planner: " + pythonType + ": " + message);
    this.pythonType = pythonType;
  }

  public PlannerException(String message, Throwable cause) {
    super("garlicfarm planner: " + message, cause);
    this.pythonType = null;
  }

  /** The Python exception's class name, or null when the process failed. */
  public String pythonType() {
    return pythonType;
  }
}
