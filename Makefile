# Each target creates the virtual environment it needs (python3 >= 3.10).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format bench bench-data bench-train bench-predict bench-diagnose clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfgpu demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

test: lint
	$(BIN)/python -m pytest -q

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench examples
	$(BIN)/ruff format src tests bench examples

bench: bench-data bench-train bench-predict bench-diagnose

bench-data: $(STAMP)
	cd bench && ../$(BIN)/python data_bench.py

bench-train: $(STAMP)
	cd bench && ../$(BIN)/python train_bench.py

bench-predict: $(STAMP)
	cd bench && ../$(BIN)/python predict_bench.py

bench-diagnose: $(STAMP)
	cd bench && ../$(BIN)/python diagnose_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
