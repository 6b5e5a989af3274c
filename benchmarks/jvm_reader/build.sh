#!/bin/sh
# Compiles ArrowSocketSource.java against PySpark's jars into build/arrowsocket.jar
# (build/ is gitignored). Usage: benchmarks/jvm_reader/build.sh [python]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-/work/main/.venv/bin/python}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
out="$here/build"
rm -rf "$out/classes" && mkdir -p "$out/classes/META-INF/services"
javac -nowarn --release 17 -cp "$jars/*" -d "$out/classes" "$here/ArrowSocketSource.java"
cp "$here/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" \
   "$out/classes/META-INF/services/"
jar cf "$out/arrowsocket.jar" -C "$out/classes" .
echo "$out/arrowsocket.jar"
