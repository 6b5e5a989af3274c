#!/bin/sh
# Builds the garlicfarm JVM reader into pyspark_farm/jvm/garlicfarm-spark.jar (gitignored,
# shipped as package data): javac against the installed PySpark's own jars (Spark, Arrow,
# zstd-jni are the runtime's, so the jar works with the Spark it was built for), plus
# msgpack-core from Maven Central, whose classes go into the jar (Spark ships no msgpack).
# Usage: jvm/build.sh [python [jar]]   (default: .venv/bin/python, else python3; the jar
# beside pyspark_farm/jvm/__init__.py)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python=${1:-}
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
command -v javac >/dev/null || { echo "jvm/build.sh: javac (JDK 17) is not on PATH" >&2; exit 1; }
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
[ -d "$jars" ] || { echo "jvm/build.sh: no PySpark jars at $jars" >&2; exit 1; }

msgpack_version=0.9.12
msgpack_sha1=7ed93230c1d5ded2eab11908031132fa3649a30b
lib="$here/lib"
msgpack="$lib/msgpack-core-$msgpack_version.jar"
if [ ! -f "$msgpack" ]; then
  mkdir -p "$lib"
  url="https://repo1.maven.org/maven2/org/msgpack/msgpack-core/$msgpack_version/msgpack-core-$msgpack_version.jar"
  curl -fsSL --retry 3 -o "$msgpack.part" "$url"
  got=$(sha1sum "$msgpack.part" | cut -d' ' -f1)
  if [ "$got" != "$msgpack_sha1" ]; then
    echo "jvm/build.sh: $url has SHA-1 $got, expected $msgpack_sha1" >&2; rm -f "$msgpack.part"; exit 1
  fi
  mv "$msgpack.part" "$msgpack"
fi

out="$here/build"
rm -rf "$out" && mkdir -p "$out/classes"
find "$here/src/main/java" -name '*.java' > "$out/sources"
javac -nowarn -Xlint:none --release 17 -encoding UTF-8 -cp "$jars/*:$msgpack" \
  -d "$out/classes" @"$out/sources"
cp -R "$here/src/main/resources/." "$out/classes/"
mkdir -p "$out/msgpack" && (cd "$out/msgpack" && jar xf "$msgpack") && cp -R "$out/msgpack/org" "$out/classes/"
target=${2:-"$root/pyspark_farm/jvm/garlicfarm-spark.jar"}
jar cf "$target.part" -C "$out/classes" .
mv "$target.part" "$target"
echo "$target"
