"""`garlicfarm jar`: the path of the JVM reader's jar for `spark-submit --jars` or a cluster
library (the installed PySpark's Spark line, or the one `--spark X.Y` names, e.g. a
Databricks cluster's line from a laptop that has another PySpark or none)."""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

LINE = re.compile(r"\d+\.\d+")


def _line(text: str) -> str:
    if not LINE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Spark line: give X.Y, e.g. 4.0")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="garlicfarm jar", description="Print the path of garlicfarm's JVM reader jar "
        "(format('garlicfarm-columnar')) for a Spark line; exit 1, saying why, when this "
        "installation has none.")
    parser.add_argument("--spark", type=_line, metavar="X.Y",
                        help="the Spark line (default: the installed PySpark's)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("pyspark") is None:
        # pyspark_farm needs PySpark to import: look for the jar without it
        (where,) = importlib.util.find_spec("pyspark_farm").submodule_search_locations
        held = sorted(p.name for p in (Path(where) / "jvm").glob("garlicfarm-spark-*.jar"))
        jar = Path(where) / "jvm" / f"garlicfarm-spark-{args.spark}.jar"
        if args.spark and jar.is_file():
            print(jar)
            return 0
        why = (f"no jar for Spark {args.spark} here" if args.spark else
               "PySpark is not installed here, so no Spark line is known: name one with "
               "--spark X.Y")
        print(f"garlicfarm jar: {why} (jars here: {', '.join(held) or 'none'})",
              file=sys.stderr)
        return 1
    from pyspark_farm.errors import EnvironmentSetupError
    from pyspark_farm.jvm import jar_path
    try:
        print(jar_path(args.spark))
    except EnvironmentSetupError as exc:
        print(f"garlicfarm jar: {exc}", file=sys.stderr)
        return 1
    return 0
