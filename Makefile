# invisible-dots. `make run` starts the product on the embedded defaults;
# `make test` runs every test (what CI runs).
SHELL := /bin/bash
GO ?= go
KUBE_VERSION := v1.37.2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X github.com/invisible-dots/invisible-dots/internal/version.Version=$(VERSION)
BIN := bin/invisible-dots
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

.PHONY: all build build-go web playwright-mcp test-web bench-web run test test-unit test-integration test-e2e test-image golden-image test-golden-image bench-golden dot-agentd test-agentd bench bench-parts manifests generate verify notices clean

all: build

# The same binary is the kubectl plugin kubectl-dots (kubectl dots chat NAME):
# a link of that name next to it; put bin/ on PATH to use it. `build` builds
# the web client first (what is missing of it: npm ci when the lock file is
# newer than node_modules, the Vite build when a source is newer than it), so
# the binary embeds it; `build-go` builds the binary alone (it then serves a
# page that says how to build the client).
build: web build-go

build-go:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .
	ln -sf invisible-dots bin/kubectl-dots

run: deps build
	./$(BIN) server

# What the machine needs (hack/deps: Debian packages through sudo when not
# root, kubectl, a Node.js new enough for the web client), installed when
# missing; a second run does nothing. A Node.js it had to fetch is in
# _output/deps/bin, first on PATH for every recipe here.
.PHONY: deps test-fresh
export PATH := $(CURDIR)/_output/deps/bin:$(PATH)
deps:
	@hack/deps

# A fresh Debian 12 machine (hack/test-fresh, as root): mmdebstrap makes one
# with Debian's Node.js 18 and no PostgreSQL or QEMU; in a chroot there,
# hack/deps installs what is missing and `make run` gets to a ready API.
# 15 to 18 minutes on 2 cores; not part of `make test`.
test-fresh:
	hack/test-fresh

# The web client (web/README.md): Node's dependencies from the lock file,
# then the Vite build into web/dist/app, which prints the first load's size.
# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: the browser tests use Debian's Chromium.
NPM ?= npm
WEB_SRC := $(shell find web/src web/index.html web/vite.config.ts web/tsconfig.json web/scripts -type f 2>/dev/null)
web: web/dist/app/index.html

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	cd web && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(NPM) ci --no-audit --no-fund

web/dist/app/index.html: web/node_modules/.package-lock.json $(WEB_SRC)
	cd web && $(NPM) run build

# The browser tests (web/e2e, Playwright's runner in Debian's Chromium at
# /usr/bin/chromium) against the built binary: a whole server on a
# throwaway home, whose host cannot run VMs.
test-web: build
	cd web && INVISIBLE_DOTS_BIN=$(CURDIR)/$(BIN) PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npx playwright test

# The web client's figure: Home's load with 50 Dots (web/e2e/bench.spec.ts).
bench-web: build
	cd web && WEB_BENCH=1 INVISIBLE_DOTS_BIN=$(CURDIR)/$(BIN) npx playwright test e2e/bench.spec.ts

# CRDs and RBAC from the kubebuilder markers: the central controllers' role
# from controllers/, internal/dotsapi/ and internal/hooks/ (served by the same credential
# against a cluster that is not ours), every host agent's from hostagent/.
manifests:
	$(CONTROLLER_GEN) crd:allowDangerousTypes=true rbac:roleName=invisible-dots-controller paths=./api/... paths=./controllers/... paths=./internal/dotsapi/... paths=./internal/hooks/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=invisible-dots-host-agent paths=./hostagent/... \
		output:rbac:artifacts:config=config/rbac/host_agent

# Deepcopy functions for the API types.
# THIRD_PARTY_NOTICES.md from the Go module graph and web/package-lock.json
# (hack/notices; its test fails when the file is not current). Needs
# web/node_modules for the web packages' license texts.
notices: web/node_modules/.package-lock.json
	$(GO) run ./hack/notices

generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

# Fails when the checked-in generated files differ from what the markers give.
verify: manifests generate
	@git diff --exit-code -- config/crd config/rbac api/ || { \
		echo "generated files are out of date: run 'make manifests generate' and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain -- config/crd config/rbac api/)" || { \
		git status --porcelain -- config/crd config/rbac api/; \
		echo "generated files are not committed: run 'make manifests generate' and commit the result"; exit 1; }

# Every test: unit tests of every package (the guest's and the host agent's
# include real QEMU boots of the test image under tcg), then the suites that
# start the real control plane, one package at a time so two API servers and
# their VMs do not share the two cores: the integration suite, the web
# client's browser tests, the e2e suite.
# The golden image is built first when make runs as root (CI does): the
# recipe test, its boot through the driver and its e2e then run; otherwise
# they skip, saying so.
# Each stage prints the time it took, so a CI run can be watched and its
# slow stage named.
TEST_STAGES = test-image test-golden-image test-unit test-whatsapp test-integration test-web test-e2e
test: deps
	@for stage in $(TEST_STAGES); do \
		start=$$(date +%s); echo "== make $$stage"; \
		if ! $(MAKE) --no-print-directory $$stage; then \
			echo "== make $$stage FAILED after $$(( $$(date +%s) - start )) s"; exit 1; \
		fi; \
		echo "== make $$stage took $$(( $$(date +%s) - start )) s"; \
	done

# Packages under test/ are the slow suites below.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v '/test/')

test-unit: playwright-mcp
	INVISIBLE_DOTS_PLAYWRIGHT_MCP_DIR=$(abspath $(PLAYWRIGHT_MCP_DIR)) $(GO) test -count=1 -timeout 30m $(UNIT_PKGS)
	$(MAKE) fuzz FUZZTIME=5000x FUZZERS='$(FUZZERS_TEST)'

# The golden image's @playwright/mcp, installed from its lock (npm ci, no
# browser download: it drives Debian's chromium) for the real browser test of
# guest/engine/browser. Without npm the test installs nothing and skips.
PLAYWRIGHT_MCP_DIR := _output/playwright-mcp
PLAYWRIGHT_MCP_LOCK := guest/image/golden/npm/package.json guest/image/golden/npm/package-lock.json

playwright-mcp: $(PLAYWRIGHT_MCP_DIR)/node_modules/.package-lock.json

$(PLAYWRIGHT_MCP_DIR)/node_modules/.package-lock.json: $(PLAYWRIGHT_MCP_LOCK)
	@command -v npm >/dev/null || { echo "npm is missing: the real browser test will skip"; exit 0; }; \
	mkdir -p $(PLAYWRIGHT_MCP_DIR) && cp $(PLAYWRIGHT_MCP_LOCK) $(PLAYWRIGHT_MCP_DIR)/ && \
	cd $(PLAYWRIGHT_MCP_DIR) && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error

test-integration:
	$(GO) test -count=1 -timeout 30m ./test/integration/

test-e2e:
	$(GO) test -count=1 -p 1 -timeout 40m ./test/e2e/

# `make test-image` builds the test image (Debian cloud kernel + busybox
# initramfs with dot-agentd) and the runtime ISO and registers both in
# $INVISIBLE_DOTS_HOME/images (default ~/.invisible-dots; TEST_IMAGE_HOME=DIR
# for another home). Downloads, unpacked packages and our binaries are cached
# in _output/test-image and an image whose inputs have not changed is not built
# again, so a second run is quick. Needs apt-get (download only), dpkg-deb,
# qemu-img.
TEST_IMAGE_WORK ?= _output/test-image
test-image:
	$(GO) run ./hostagent/images/cmd/test-image --work $(TEST_IMAGE_WORK) $(if $(TEST_IMAGE_HOME),--home $(TEST_IMAGE_HOME))

# `make golden-image` builds the golden image (`invisible-dots image build`:
# Debian 12 packages through this host's apt sources with mmdebstrap, no
# builder VM; Xvfb and XFCE, Chromium, Node and @playwright/mcp) and the
# runtime ISO, and registers both in $INVISIBLE_DOTS_HOME/images
# (GOLDEN_IMAGE_HOME=DIR for another home), where the golden tests find them.
# Needs root, mmdebstrap, e2fsprogs, qemu-utils and npm. The .debs and npm's
# cache are kept in _output/golden-image, and an image whose inputs are
# unchanged is not built again. About 75 s on 2 cores with the packages
# cached, a few seconds when nothing changed.
GOLDEN_IMAGE_WORK ?= _output/golden-image
golden-image: build-go
	$(if $(GOLDEN_IMAGE_HOME),INVISIBLE_DOTS_HOME=$(GOLDEN_IMAGE_HOME)) ./$(BIN) image build --work $(GOLDEN_IMAGE_WORK)

test-golden-image:
	@if [ "$$(id -u)" = 0 ]; then \
		$(MAKE) golden-image; \
	else \
		echo "not root: the golden image is not built and its tests skip (sudo make golden-image builds it)"; \
	fi

# The golden image's figures beside the test image's, in one run under tcg:
# Start() to health, the desktop drawn, the stop, QEMU's idle RSS.
bench-golden: test-image golden-image
	$(GO) test -run '^$$' -bench 'StartStop(Golden|Test)Image' -benchtime 1x -timeout 30m ./hostagent/qemu/

# `make fuzz` runs each fuzzer of what crosses the guest boundary (the proof
# answer, event stream frames, dots-proc/1 frames, file paths, exec and
# config bodies, the event shapes) and of the text the Dots API stores, for
# FUZZTIME from its committed corpus (testdata/fuzz); `make test` runs those
# of FUZZERS_TEST for 5000 inputs each (a few seconds). A count, not a
# duration: Go 1.26's fuzzing coordinator can report its own -fuzztime
# deadline as a failure ("context deadline exceeded", no input written) on a
# loaded machine (golang/go#75804, fixed in Go 1.27). A failure leaves the
# input that failed under the package's testdata/fuzz.
# The Dots API's two are left out of `make test`: a fuzzer's binary
# instruments every package it links, and theirs link the Kubernetes client
# stack, which on a fresh 2-core machine took 474 s to build instrumented,
# beside 467 s for the package's plain test build (8 minutes of CI for 10
# seconds of fuzzing). Their seeds and committed inputs still run in every
# `go test`, and internal/pgtext's fuzzers, in `make test`, fuzz the rule
# they exercise (the text made storable).
FUZZTIME ?= 2m
FUZZERS_TEST = ./guest/protocol:FuzzProcFrames ./guest/protocol:FuzzParseOutbound ./guest/protocol:FuzzParseInbound \
	./guest/protocol:FuzzRuntimeConfig ./guest/protocol:FuzzDecodeJSON ./guest/agentd:FuzzFilePath \
	./guest/agentd:FuzzExecBody ./hostagent/pump:FuzzEventStream ./hostagent/guestclient:FuzzProofAnswer \
	./internal/pgtext:FuzzJSON ./internal/pgtext:FuzzString
FUZZERS = $(FUZZERS_TEST) ./internal/dotsapi:FuzzIngestText ./internal/dotsapi:FuzzPostMessageText
.PHONY: fuzz
fuzz:
	@for f in $(FUZZERS); do \
		echo "fuzz $${f#*:} ($${f%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${f#*:}$$" -fuzztime $(FUZZTIME) $${f%%:*} || exit 1; \
	done

dot-agentd:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/dot-agentd ./guest/agentd/cmd/dot-agentd

# The opt-in WhatsApp program (internal/channels/whatsapp, a Go module of
# its own: whatsmeow's Signal library is GPL-3.0 and invisible-dots holds
# nothing GPL), written next to the server's binary, where the server finds
# it; the server runs WhatsApp when started with INVISIBLE_DOTS_WHATSAPP=1.
# test-whatsapp runs its tests (none reaches WhatsApp's network) and the
# server's side of the socket.
.PHONY: whatsapp test-whatsapp
whatsapp:
	cd internal/channels/whatsapp && $(GO) build -trimpath -o $(CURDIR)/bin/invisible-dots-whatsapp .

test-whatsapp:
	cd internal/channels/whatsapp && $(GO) test -count=1 ./...
	$(GO) test -count=1 ./internal/channels/port/...

# The guest's unit tests and the boot of the test image under TCG (skipped
# until `make test-image` has filled _output/test-image).
test-agentd:
	$(GO) test ./guest/protocol/... ./guest/agentd/... ./guest/image/...

clean:
	rm -rf bin _output web/dist/app

# `make bench` builds the binary and runs the control plane benchmark once
# (test/bench): cold and warm start to a ready API, create/patch latency for
# 1000 Dots (the client's p99 beside the API server's own and its store's),
# create-to-watch-event latency, the server's and postgres's memory idle (10
# s and a minute after the warm start) and with 1000 Dots, the Computers made after the last create, and the database
# after 1000 create/patch/delete cycles and after kine's first compaction,
# and, since the bench's home has no image, the database, the server's
# memory and the writes a minute while the 1000 Computers wait for a host, 1
# and 10 minutes after the first create. About 12 minutes on 2 cores.
# BENCH_SKIP_COMPACTION=1 skips the wait for the compaction,
# BENCH_WAITING_MINUTES=N replaces the 10 and BENCH_DOTS=N the 1000;
# BENCH_PROFILE=DIR writes the server's CPU profile of the create and patch
# loops (and of the webhook load below) and its heap at each memory figure
# into DIR (go tool pprof). Then
# the same loads on kine/PostgreSQL and on etcd, the ratio of their p99s
# (BenchmarkStoreBesideEtcd; it needs Debian's etcd-server, and is skipped
# without it), the webhooks listener's accept latency (BenchmarkWebhookAccept:
# 2000 GitHub-signed deliveries at 100 a second over 10 Webhooks to the real
# server, each to its 202 and one Task made; BENCH_WEBHOOK_RATE and
# BENCH_WEBHOOK_DELIVERIES change them), bench-parts and bench-web. Every
# run's output is kept in $(BENCH_OUT), and the last lines
# are one table of the figures that have a goal (test/bench/figures): what
# is met and what is not. A step that fails is recorded there ("FAIL
# <step>") and the others still run: the table lists the failed steps and
# makes `make bench` fail at its end.
BENCH_FLAGS ?= -benchtime=1x -timeout 30m
BENCH_OUT := _output/bench/figures.txt
bench: build
	@mkdir -p $(dir $(BENCH_OUT)) && : > $(BENCH_OUT)
	set -o pipefail; INVISIBLE_DOTS_BIN=$(CURDIR)/$(BIN) $(GO) test ./test/bench/ -run '^$$' -bench ControlPlane $(BENCH_FLAGS) | tee -a $(BENCH_OUT) || echo "FAIL	ControlPlane	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; INVISIBLE_DOTS_BIN=$(CURDIR)/$(BIN) $(GO) test ./test/bench/ -run '^$$' -bench StoreBesideEtcd $(BENCH_FLAGS) | tee -a $(BENCH_OUT) || echo "FAIL	StoreBesideEtcd	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; INVISIBLE_DOTS_BIN=$(CURDIR)/$(BIN) $(GO) test ./test/bench/ -run '^$$' -bench WebhookAccept $(BENCH_FLAGS) | tee -a $(BENCH_OUT) || echo "FAIL	WebhookAccept	(a make bench step)" >> $(BENCH_OUT)
	$(MAKE) bench-parts || echo "FAIL	bench-parts	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(MAKE) bench-web 2>&1 | tee -a $(BENCH_OUT) || echo "FAIL	bench-web	(a make bench step)" >> $(BENCH_OUT)
	$(GO) run ./test/bench/figures < $(BENCH_OUT)

# The other figures of `make bench`: the host agent's VMs under the test image
# (tcg on hosts whose host.yaml says so), the Computer reconciler over 100
# fake VMs, a start while 20 VMs power off and 100 Computers create-to-Ready
# through the real API server (fake VMs), the guest engine, PostgreSQL, the
# event log store, the events one event pump gets stored per second, the
# live stream's latency from commit to 100 clients at 1,000 events/s, the
# OpenAI-compatible endpoint's overhead above a Dot's answer, and a
# Dot's chat: warm p50/p99 over 50
# messages and a sleeping Dot's answer against the same image's boot
# (BenchmarkDotChat, real VM under tcg, a stand-in model). Each prints its
# own figures, appended to $(BENCH_OUT); their goals are in
# test/bench/figures, the table `make bench` ends with.
BENCH_TEE := 2>&1 | tee -a $(BENCH_OUT)
bench-parts: test-image
	@mkdir -p $(dir $(BENCH_OUT))
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchtime 3x ./hostagent/qemu/ ./guest/image/testimage/ $(BENCH_TEE) || echo "FAIL	./hostagent/qemu,./guest/image/testimage	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench Reconcile100Computers -benchtime 50x ./hostagent/computer/ $(BENCH_TEE) || echo "FAIL	Reconcile100Computers	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -count=1 -v ./test/integration/ -ginkgo.focus 'acts on a start at once|100 Computers' -ginkgo.v | grep -A1 -E 'start acted on|create-to-Ready' $(BENCH_TEE) || echo "FAIL	integration-figures	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchtime 5x ./internal/postgres/ $(BENCH_TEE) || echo "FAIL	./internal/postgres	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench . -v ./internal/store/ | grep -v '^=== ' $(BENCH_TEE) || echo "FAIL	./internal/store	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench . ./guest/engine/... $(BENCH_TEE) || echo "FAIL	./guest/engine/...	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench PumpIngest -benchtime 3x ./internal/dotsapi/ $(BENCH_TEE) || echo "FAIL	PumpIngest	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench StreamFanOut -benchtime 1x ./internal/dotsapi/ $(BENCH_TEE) || echo "FAIL	StreamFanOut	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench OpenAIChat -benchtime 1x ./internal/dotsapi/ $(BENCH_TEE) || echo "FAIL	OpenAIChat	(a make bench step)" >> $(BENCH_OUT)
	set -o pipefail; $(GO) test -run '^$$' -bench 'DotChat|TelegramChat' -benchtime 1x -timeout 30m ./test/e2e/ $(BENCH_TEE) || echo "FAIL	DotChat|TelegramChat	(a make bench step)" >> $(BENCH_OUT)
# dot-agentd under 1,000 hostile connections: the host's health checks' p50/p99.
	set -o pipefail; $(GO) test -run '^$$' -bench HostileConnections -benchtime 1x ./guest/agentd/ $(BENCH_TEE) || echo "FAIL	HostileConnections	(a make bench step)" >> $(BENCH_OUT)
