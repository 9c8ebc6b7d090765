# The two entry points are `make run` and `make test`; both set everything up on first use.
PYTHON ?= $(shell for p in python3.13 python3.12 python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo $$p; break; }; \
	done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export DJANGO_SETTINGS_MODULE := agentlab_site.settings

.PHONY: run test lint format install migrate chromium

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.12 or newer is needed (see .python-version)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

migrate: $(STAMP)
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py migrate --noinput

run: migrate
	@DEBUG=$${DEBUG:-true} $(BIN)/python manage.py ensure_login_user
	DEBUG=$${DEBUG:-true} $(BIN)/python manage.py runserver 127.0.0.1:8000

# Two workers or more (one per core): the suite waits on servers and sockets as much as it computes.
# A module's scale-out tests stay on one worker (tests/scaleout/conftest.py).
test: $(STAMP) chromium
	$(BIN)/pytest -n auto --dist loadgroup

# The browser tests drive Debian's chromium (Playwright cannot download its own browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Debian's chromium for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
