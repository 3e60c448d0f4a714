# Each target creates the virtual environment it needs (python3 >= 3.10).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# CUDA=auto (default): TensorFlow with its CUDA libraries (tfgpu[and-cuda]) when an NVIDIA driver is
# present, the plain wheel otherwise; CUDA=yes or CUDA=no forces it (make demo CUDA=no).
CUDA ?= auto
comma := ,
ifeq ($(CUDA),auto)
WITH_CUDA := $(shell test -e /proc/driver/nvidia/version && echo yes || echo no)
else ifneq ($(filter yes no,$(CUDA)),)
WITH_CUDA := $(CUDA)
else
$(error CUDA must be auto, yes or no, got '$(CUDA)')
endif
# ray: the tests run tfgpu.fit on a local Ray cluster (tests/test_ray.py, docs/ray.md)
EXTRAS := dev$(comma)ray$(if $(filter yes,$(WITH_CUDA)),$(comma)and-cuda)
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# The floor lane: the oldest TensorFlow and Keras pyproject.toml allows (.ci/floor.txt)
FLOOR_VENV ?= .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.installed
# The Estimator lane: TensorFlow 2.15, the last release with tf.estimator (Python <= 3.11).
LEGACY_VENV ?= .venv-tf215
LEGACY_PYTHON ?= python3.11
LEGACY_STAMP := $(LEGACY_VENV)/.installed

.PHONY: demo test test-loaded test-fast test-unit test-floor test-main test-estimator test-wheel lint format bench bench-data bench-train bench-predict bench-predict-arrays bench-predict-pydataset bench-diagnose bench-diagnose-stability bench-estimator bench-service bench-fit bench-share bench-memory bench-tune bench-tune-fresh bench-ablation bench-resnet bench-e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# tfgpu itself requires TensorFlow >= 2.16, so the lane installs it without dependencies and pins
# what tfgpu.estimator and tfgpu.predict need next to TensorFlow 2.15 (NumPy 1.x, pyarrow < 19).
$(LEGACY_STAMP): pyproject.toml
	$(LEGACY_PYTHON) -m venv $(LEGACY_VENV)
	$(LEGACY_VENV)/bin/python -m pip install -q --upgrade pip
	$(LEGACY_VENV)/bin/python -m pip install -q "tensorflow-cpu==2.15.1" "tensorflow-estimator==2.15.0" \
		"numpy>=1.26,<2" "pyarrow>=14,<19" "rich>=13,<15" "nvidia-ml-py>=12.535,<14" "psutil>=5.9,<8" "pytest>=7,<10"
	$(LEGACY_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $(LEGACY_STAMP)

$(FLOOR_STAMP): pyproject.toml .ci/floor.txt
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install -q --upgrade pip
	$(FLOOR_VENV)/bin/python -m pip install -q -c .ci/floor.txt -r .ci/floor.txt -e ".[dev]"
	touch $(FLOOR_STAMP)

demo: $(STAMP)
	$(BIN)/tfgpu demo

# --no-cache: a cached verdict outlives a change in what ruff calls first-party (a new folder), as CI's fresh
# clone does not
lint: $(STAMP)
	$(BIN)/ruff check --no-cache src tests tests_estimator bench examples .ci
	$(BIN)/ruff format --check --no-cache src tests tests_estimator bench examples .ci

# a pytest process per test file, three at a time, longest first; the Estimator lane and the wheel are
# one more job among them, the floor lane another (.ci/test_main.py says why)
test: lint $(STAMP)
	$(BIN)/python .ci/test_main.py --after "$(MAKE) --no-print-directory test-estimator test-wheel" \
		--after "$(MAKE) --no-print-directory test-floor"

test-main: lint
	$(BIN)/python .ci/test_main.py

# make test on a fresh clone of HEAD beside two busy TensorFlow jobs (the suite must pass on a shared
# machine); prints its status and seconds
test-loaded: $(STAMP)
	bash bench/loaded.sh

# the fast lane, for each edit: no test that starts a process, reads a clock or trains a real model for
# seconds (markers in pyproject.toml); make test runs them all
FAST := not process and not timing and not heavy
test-fast: $(STAMP)
	$(BIN)/ruff check --no-cache src tests tests_estimator bench examples .ci
	$(BIN)/python -m pytest -q -m "$(FAST)"

# the unit lane: the fast lane less every test that builds a Keras model; TensorFlow is imported only
# by the tests that need it
test-unit: $(STAMP)
	$(BIN)/ruff check --no-cache src tests tests_estimator bench examples .ci
	$(BIN)/python -m pytest -q -m "$(FAST) and not model"

# the fast lane on the oldest TensorFlow and Keras tfgpu allows (.ci/floor.txt); make test runs it
test-floor: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "$(FAST)"

# the wheel a user installs: built here, installed with no extras in a fresh venv, run elsewhere
test-wheel: $(STAMP)
	bash .ci/wheel_smoke.sh $(PYTHON) $(BIN)/python

test-estimator: $(LEGACY_STAMP)
	$(LEGACY_VENV)/bin/python -m pytest -q -p no:warnings tests_estimator

format: $(STAMP)
	$(BIN)/ruff check --fix src tests tests_estimator bench examples .ci
	$(BIN)/ruff format src tests tests_estimator bench examples .ci

bench: bench-data bench-train bench-fit bench-share bench-memory bench-tune bench-predict bench-diagnose bench-diagnose-stability bench-estimator bench-service

bench-data: $(STAMP)
	cd bench && ../$(BIN)/python data_bench.py

bench-train: $(STAMP)
	cd bench && ../$(BIN)/python train_bench.py

bench-fit: $(STAMP)
	cd bench && ../$(BIN)/python fit_bench.py

bench-share: $(STAMP)
	cd bench && ../$(BIN)/python share_bench.py --pin

bench-memory: $(STAMP)
	cd bench && ../$(BIN)/python memory_bench.py --pin

bench-tune: $(STAMP)
	cd bench && ../$(BIN)/python tune_bench.py --pin

bench-ablation: $(STAMP)
	cd bench && ../$(BIN)/python ablation_bench.py

bench-resnet: $(STAMP)
	cd bench && ../$(BIN)/python resnet_bench.py

# the user's clock: a fresh process per run, Keras's fit against tfgpu.fit and tune=True (issue 65)
bench-e2e: $(STAMP)
	cd bench && ../$(BIN)/python e2e_bench.py

bench-tune-fresh: $(STAMP)
	cd bench && ../$(BIN)/python tune_fresh_bench.py

bench-predict: $(STAMP)
	cd bench && ../$(BIN)/python predict_bench.py

bench-predict-arrays: $(STAMP)
	cd bench && ../$(BIN)/python predict_arrays_bench.py --pin

# tfgpu.predict of a keras.utils.PyDataset against Keras's predict of the same one (issue 75)
bench-predict-pydataset: $(STAMP)
	cd bench && ../$(BIN)/python predict_arrays_bench.py --pin --form pydataset --devices 1 2

bench-diagnose: $(STAMP)
	cd bench && ../$(BIN)/python diagnose_bench.py

bench-diagnose-stability: $(STAMP)
	cd bench && ../$(BIN)/python diagnose_stability.py

bench-service: $(STAMP)
	cd bench && ../$(BIN)/python service_bench.py

bench-estimator: $(LEGACY_STAMP)
	cd bench && ../$(LEGACY_VENV)/bin/python estimator_bench.py

clean:
	rm -rf $(VENV) $(LEGACY_VENV) .pytest_cache .ruff_cache
