#!/bin/sh
# Builds the garlicfarm JVM reader into pyspark_farm/jvm/garlicfarm-spark-X.Y.jar (X.Y: the
# PySpark's version; gitignored, shipped as package data): javac against the installed PySpark's own jars (Spark, Arrow,
# zstd-jni are the runtime's, so the jar works with the Spark it was built for), plus
# msgpack-core from Maven Central, whose classes go into the jar (Spark ships no msgpack).
# Usage: jvm/build.sh [python [jar]]   (default: .venv/bin/python, else python3; the jar
# pyspark_farm.jvm.jar_file() names for that Python)
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

# Arrow's compression codecs (zstd payloads) ship with PySpark 4.1+; for 4.0 the
# arrow-compression of its Arrow version comes from Maven Central and goes into the jar.
bundled="$msgpack"
if ! ls "$jars"/arrow-compression-*.jar >/dev/null 2>&1; then
  arrow=$(ls "$jars"/arrow-vector-*.jar | sed 's/.*arrow-vector-\(.*\)\.jar/\1/')
  compression="$lib/arrow-compression-$arrow.jar"
  if [ ! -f "$compression" ]; then
    mkdir -p "$lib"
    url="https://repo1.maven.org/maven2/org/apache/arrow/arrow-compression/$arrow/arrow-compression-$arrow.jar"
    curl -fsSL --retry 3 -o "$compression.part" "$url"
    want=$(curl -fsSL --retry 3 "$url.sha1" | cut -c1-40)
    got=$(sha1sum "$compression.part" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
      echo "jvm/build.sh: $url has SHA-1 $got, Maven Central says $want" >&2; rm -f "$compression.part"; exit 1
    fi
    mv "$compression.part" "$compression"
  fi
  bundled="$bundled $compression"
fi

out="$here/build"
rm -rf "$out" && mkdir -p "$out/classes"
find "$here/src/main/java" -name '*.java' > "$out/sources"
javac -nowarn -Xlint:none --release 17 -encoding UTF-8 \
  -cp "$jars/*:$(echo $bundled | tr ' ' ':')" -d "$out/classes" @"$out/sources"
cp -R "$here/src/main/resources/." "$out/classes/"
for library in $bundled; do
  rm -rf "$out/unpacked" && mkdir -p "$out/unpacked"
  (cd "$out/unpacked" && jar xf "$library") && cp -R "$out/unpacked/org" "$out/classes/"
done
target=${2:-$(cd "$root" && "$python" -c 'from pyspark_farm.jvm import jar_file; print(jar_file())')}
jar cf "$target.part" -C "$out/classes" .
mv "$target.part" "$target"
echo "$target"
