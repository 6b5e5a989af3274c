# The two commands of the README: `make demo` and `make test`.
# Both create .venv when it is missing and install garlicfarm (editable) into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.garlicfarm-installed

.PHONY: test demo install bench soak clean jar jars dist

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# A plain editable install: pyproject.toml's package-dir {"": "."} makes setuptools put the
	# checkout on sys.path (a .pth file), so Spark's lookup of `pyspark_*` modules
	# (pkgutil.iter_modules) finds pyspark_farm from any directory (docs/development.md).
	# [spark]: PySpark 4.x and pandas < 3, which the runtime provides elsewhere;
	# [connect]: the Spark Connect client's packages (tests/spark/test_connect.py).
	$(BIN)/python -m pip install --quiet -e '.[spark,connect,test,bench]'
	@touch $(STAMP)

# The JVM reader's jar (format "garlicfarm-columnar"): one jar for every supported Spark line,
# built by Maven in jvm/ (jvm/pom.xml; the first run downloads from Maven Central) and copied
# into pyspark_farm/jvm/ as garlicfarm-spark-X.Y.jar, after its JUnit tests (jvm/src/test).
JAR := jvm/target/garlicfarm-spark.jar
$(JAR): jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)
	mvn -B -q -f jvm/pom.xml package

jar: $(JAR)

# The jars of every Spark line the wheel carries (pyspark_farm.compat.TESTED_PYSPARK): the
# Maven build above copies its one jar under each line's name.
jars: $(JAR)

# dist/: the sdist and the wheel (built from the sdist), both with every line's jar and
# reproducible (build_support/garlicfarm_build.py): the entries carry the last commit's time.
dist: $(STAMP) $(JAR)
	rm -rf dist
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) \
	  $(BIN)/python -m build --outdir dist .

# every line's jar: the release check (tests/compat/test_release.py) builds dist/ with them
test: $(STAMP) $(JAR)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/garlicfarm demo

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache jvm/target
