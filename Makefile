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

# The JVM reader's jar (format "garlicfarm-columnar"), built against the venv's PySpark
# (pyspark_farm/jvm/garlicfarm-spark-X.Y.jar); the stamp says it is up to date.
JAR := $(VENV)/.garlicfarm-jar
$(JAR): $(STAMP) jvm/build.sh $(shell find jvm/src -type f 2>/dev/null)
	jvm/build.sh $(abspath $(BIN)/python)
	@touch $(JAR)

jar: $(JAR)

# The jars of every Spark line the wheel carries (pyspark_farm.compat.TESTED_PYSPARK), each
# built by jvm/build.sh against a venv holding that line's PySpark (.venv-pysparkX.Y, made
# when missing; tests/compat/test_oldest_pyspark.py uses the same venvs). The oldest line's
# venv runs the oldest declared Python (3.10) when this machine has one.
SPARK_LINES := 4.0 4.1 4.2 4.3
JVM_SOURCES := jvm/build.sh $(shell find jvm/src -type f 2>/dev/null)
JARS := $(foreach line,$(SPARK_LINES),pyspark_farm/jvm/garlicfarm-spark-$(line).jar)
OLDEST_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10.*/bin/python) \
                             $(shell command -v python3.10) $(PYTHON))

.venv-pyspark%/bin/python:
	$(if $(filter 4.0,$*),$(OLDEST_PYTHON),$(PYTHON)) -m venv .venv-pyspark$*
	.venv-pyspark$*/bin/python -m pip install --quiet 'pyspark==$*.*'

pyspark_farm/jvm/garlicfarm-spark-%.jar: .venv-pyspark%/bin/python $(JVM_SOURCES)
	jvm/build.sh $(abspath .venv-pyspark$*/bin/python) $(abspath $@)

jars: $(JARS)

# dist/: the sdist and the wheel (built from the sdist), both with every line's jar and
# reproducible (build_support/garlicfarm_build.py): the entries carry the last commit's time.
dist: $(STAMP) $(JARS)
	rm -rf dist
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 315532800) \
	  $(BIN)/python -m build --outdir dist .

# every line's jar: the release check (tests/compat/test_release.py) builds dist/ with them
test: $(STAMP) $(JARS)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/garlicfarm demo

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
