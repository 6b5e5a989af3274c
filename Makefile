# The two commands of the README: `make demo` and `make test`.
# Both create .venv when it is missing and install garlicfarm (editable) into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.garlicfarm-installed

.PHONY: test demo install bench soak clean

install: $(STAMP)

$(STAMP): setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat: the checkout goes on sys.path, so Spark's lookup of `pyspark_*` modules
	# (pkgutil.iter_modules) finds pyspark_farm from any directory, not only this one.
	$(BIN)/python -m pip install --quiet -e '.[test,bench]' --config-settings editable_mode=compat
	@touch $(STAMP)

test: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/garlicfarm demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
