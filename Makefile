# The two commands of the README: `make demo` and `make test`.
# Both create .venv when it is missing and install garlicfarm (editable) into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.garlicfarm-installed

.PHONY: test demo install bench soak clean jar

install: $(STAMP)

$(STAMP): setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# A plain editable install: setup.py's package_dir {"": "."} makes setuptools put the
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

test: $(STAMP) $(JAR)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/garlicfarm demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache jvm/target
