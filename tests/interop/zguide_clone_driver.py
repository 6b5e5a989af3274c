"""Drive the zguide's Clone client class (Model Six, `clone.py`, unmodified) from stdin.

    python zguide_clone_driver.py SUBTREE PRIMARY_PORT [BACKUP_PORT]   (PYTHONPATH: zguide)

One command per stdin line, one answer per stdout line, marked "@@" and written in one
write (the agent thread's own log lines share the log file, and a print under -u writes
its text and its newline apart, so lines of the two threads can interleave):
    set KEY VALUE   -> "@@set KEY"          (Clone.set: a KVSET to every server's collector)
    get KEY         -> "@@get KEY = VALUE"  (Clone.get: the agent's copy; empty if missing)
"""
import sys

from clone import Clone


def answer(text: str) -> None:
    sys.stdout.write(f"@@{text}\n")
    sys.stdout.flush()


def main() -> None:
    subtree, ports = sys.argv[1].encode(), [int(p) for p in sys.argv[2:]]
    clone = Clone()
    clone.subtree = subtree
    for port in ports:
        clone.connect("tcp://127.0.0.1", port)
    answer("ready")
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["set"] and len(words) == 3:
            clone.set(words[1].encode(), words[2].encode())
            answer(f"set {words[1]}")
        elif words[:1] == ["get"] and len(words) == 2:
            value = clone.get(words[1].encode()) or b""
            answer(f"get {words[1]} = {value.decode()}")


if __name__ == "__main__":
    main()
