# lever's build, test and benchmark entry points. CI runs .ci/run, which installs what
# these need and then runs `make ci`.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/lever-jail/lever/internal/version.Version=$(VERSION)
# The podman bindings (internal/containers) build only with these tags and CGO_ENABLED=0.
PODMAN_TAGS := remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp
export GOFLAGS += -tags=$(PODMAN_TAGS)
export CGO_ENABLED = 0
E2E_TAGS  := e2e,$(PODMAN_TAGS)
# Real MCP servers for internal/lev/mcp's e2e tests, from npm (pinned), found there through
# LEV_MCP_SERVERS.
MCP_SERVERS_DIR := $(CURDIR)/.cache/mcp
MCP_SERVERS     := @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31
export LEV_MCP_SERVERS := $(MCP_SERVERS_DIR)
# The official model SDKs as test peers for internal/lev/provider (TestSDKPeersParse,
# TestSDKPeersRequestTypes: their request types and parsers against lev's bodies and
# recorded exchanges), from npm (pinned), found there through LEV_SDK_PEERS.
SDK_PEERS_DIR := $(CURDIR)/.cache/sdk
SDK_PEERS     := openai@7.60.0 @anthropic-ai/sdk@1.17.0 typescript@7.0.2
export LEV_SDK_PEERS := $(SDK_PEERS_DIR)

.PHONY: build test e2e bench lint lint-sh fuzz ci clean mcp-servers sdk-peers cross dist transcript screenshots

# lever sends the guest a Linux lev for the guest's architecture (the enrol and acceptance
# helpers are `lev __guest ...`; the lev and workbench images carry it) and finds it beside
# itself: `lev` when that is one, else lev-linux-<arch>. On Linux bin/lev is the guest's
# (Lima and netns guests have the host's architecture); elsewhere (a Mac, or GOOS=darwin
# make build) bin/lev is lev's client side and the guests' lev is bin/lev-linux-<arch>.
# GUEST_ARCHES="amd64 arm64" builds both.
BUILD_OS    := $(shell $(GO) env GOOS)
BUILD_ARCH  := $(shell $(GO) env GOARCH)
GUEST_ARCHES ?= $(if $(filter linux,$(BUILD_OS)),,$(BUILD_ARCH))

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lever ./cmd/lever
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lev ./cmd/lev
	@set -e; for a in $(GUEST_ARCHES); do \
		echo "build: $(BIN)/lev-linux-$$a (the guest's lev)"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lev-linux-$$a ./cmd/lev; \
	done

# Unit tests: pure, no root, no network beyond loopback.
test:
	$(GO) test -count=1 ./...

# End-to-end tests: real iptables, network namespaces, podman, a Lima VM. Root only; under
# CI=true a skipped e2e test fails.
e2e: build
	$(GO) test -count=1 -tags $(E2E_TAGS) -timeout 60m ./...

# docs/session.md: a whole first session (init, up, run, ps, logs, result, shell, stop,
# destroy) on the netns substrate as it prints, rewritten from a real run (root). The same
# test without -update-session, in make e2e, fails when the page and lever differ.
transcript:
	$(GO) test -count=1 -tags $(E2E_TAGS) -timeout 20m -run '^TestSessionTranscript$$' ./internal/bringup/ -update-session

# docs/dashboard/*.png: each page of lever dashboard in headless Chromium (Debian's chromium
# package), rewritten from the browser test. The same test without -update-screenshots, in
# make e2e, holds the pages to loading with no console error.
screenshots:
	$(GO) test -count=1 -tags $(E2E_TAGS) -timeout 5m -run '^TestBrowserPages$$' ./internal/dashboard/ -update-screenshots

# Idempotent: npm is asked only when the pinned list changed (the stamp holds it).
mcp-servers:
	@if [ "$$(cat $(MCP_SERVERS_DIR)/.stamp 2>/dev/null)" != "$(MCP_SERVERS)" ]; then \
		mkdir -p $(MCP_SERVERS_DIR) && \
		npm install --save-exact --no-audit --no-fund --loglevel=error --prefix $(MCP_SERVERS_DIR) $(MCP_SERVERS) && \
		echo "$(MCP_SERVERS)" > $(MCP_SERVERS_DIR)/.stamp; \
	else echo "mcp servers: up to date in $(MCP_SERVERS_DIR)"; fi

# Idempotent like mcp-servers.
sdk-peers:
	@if [ "$$(cat $(SDK_PEERS_DIR)/.stamp 2>/dev/null)" != "$(SDK_PEERS)" ]; then \
		mkdir -p $(SDK_PEERS_DIR) && \
		npm install --save-exact --no-audit --no-fund --loglevel=error --prefix $(SDK_PEERS_DIR) $(SDK_PEERS) && \
		echo "$(SDK_PEERS)" > $(SDK_PEERS_DIR)/.stamp; \
	else echo "sdk peers: up to date in $(SDK_PEERS_DIR)"; fi

# BENCH_ARGS="-pkgs ./internal/brokerctl -bench BrokerOverhead -merge" reruns one benchmark
# and keeps every other table (and the goals table over all of them) from earlier runs.
bench: build
	$(GO) run ./tools/benchtable -out docs/benchmarks.md $(BENCH_ARGS)

# staticcheck and deadcode are Go tools pinned in tools/lint/go.mod (`go get -tool` there;
# the Go module proxy serves them and `go tool` builds them on first use). They are a module
# of their own so that the linters' dependencies never change what lever itself links.
# staticcheck reads the build with and without the e2e tag; deadcode reads it once with the
# e2e tag and the tests (-test): that build is the widest (the test helpers in
# internal/testutil serve only e2e tests), so whatever it calls unreachable is dead in every
# build on this platform.
LINT_TOOL := $(GO) tool -modfile=tools/lint/go.mod

lint: lint-sh
	@out=$$(gofmt -l cmd internal tools 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(E2E_TAGS) ./...
	$(LINT_TOOL) staticcheck ./...
	$(LINT_TOOL) staticcheck -tags $(E2E_TAGS) ./...
	@echo "deadcode -test -tags $(E2E_TAGS) ./..."; out=$$($(LINT_TOOL) deadcode -test -tags $(E2E_TAGS) ./...) || exit 1; \
		if [ -n "$$out" ]; then echo "deadcode: unreachable functions (delete them, or use them):"; echo "$$out"; exit 1; fi

# The guest scripts are files (//go:embed), POSIX sh: shellcheck reads each one (the parts
# a script is assembled from each say `shellcheck shell=sh`), and .ci/run. shellcheck is a
# Debian package `make` does not install (apt-get install shellcheck; lever doctor says
# whether it is there): without it lint-sh warns and skips the shell part, except under
# CI=true (.ci/run installs it), where a skipped check is a failure.
lint-sh:
	@if command -v shellcheck >/dev/null; then \
		echo "shellcheck -S warning (the guest scripts and .ci/run)"; \
		find cmd internal scripts templates -name '*.sh' -print0 | xargs -0 shellcheck -S warning .ci/run; \
	elif [ "$$CI" = true ]; then \
		echo "lint-sh: shellcheck is not installed (Debian package shellcheck; .ci/run installs it)"; exit 1; \
	else \
		echo "lint-sh: WARNING: shellcheck is not installed, the shell scripts were NOT checked (apt-get install shellcheck); CI checks them"; \
	fi

# A few seconds of coverage-guided fuzzing of the lever.yaml loader (its seed corpus in
# internal/config/testdata/fuzz also runs with every plain `go test`).
# The budget is a count of inputs, not a duration: with a duration, Go 1.26's fuzz
# coordinator can lose a race at the deadline and fail the target with a bare "context
# deadline exceeded" and no crasher (go.dev/issue/75804, fixed in Go 1.27), which happened
# in CI on a loaded machine. A count sets no deadline; on these machines 100000 inputs take
# about 8-20 s. A real finding still fails, with its input written under testdata/fuzz.
FUZZ_INPUTS ?= 100000
fuzz:
	$(GO) test -run XXX -fuzz FuzzLoad -fuzztime $(FUZZ_INPUTS)x ./internal/config

# lever runs on macOS hosts (OrbStack, Lima) and Linux hosts; lev runs in Linux guests of
# either architecture. Build both and vet everything (with and without the e2e tag) for each
# platform, without cgo: a file that uses a Linux-only symbol (unix.TCGETS, /proc parsing
# behind procid_linux.go, unix.Setns in e2e tests) and loses its build tag fails here.
CROSS_PLATFORMS := darwin/arm64 darwin/amd64 linux/amd64 linux/arm64
cross:
	@set -e; for p in $(CROSS_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; start=$$(date +%s); \
		GOOS=$$os GOARCH=$$arch $(GO) build ./cmd/lever ./cmd/lev; \
		GOOS=$$os GOARCH=$$arch $(GO) vet ./...; \
		GOOS=$$os GOARCH=$$arch $(GO) vet -tags $(E2E_TAGS) ./...; \
		echo "cross: $$os/$$arch built and vetted in $$(( $$(date +%s) - start ))s"; \
	done

# Release archives: lever and lev for each platform (static, no cgo), one tar.gz each, and
# SHA256SUMS over them, in dist/. lev runs inside the Linux jail; its darwin build is the
# client side only (lev bench serve refuses there). Each archive also carries the Linux lev
# lever sends a guest of each architecture: darwin archives lev-linux-amd64 and
# lev-linux-arm64; Linux archives their own `lev` plus the other architecture's as
# lev-linux-<other>. Each Linux lev is built once and copied into the archives.
GUEST_LEV_ARCHES := amd64 arm64
dist:
	@set -e; rm -rf dist; mkdir -p dist/.lev; for a in $(GUEST_LEV_ARCHES); do \
		GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/.lev/lev-linux-$$a ./cmd/lev; \
	done; for p in $(CROSS_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; d=dist/lever-$(VERSION)-$$os-$$arch; mkdir -p $$d; \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/lever ./cmd/lever; \
		if [ $$os = linux ]; then cp dist/.lev/lev-linux-$$arch $$d/lev; \
		else GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/lev ./cmd/lev; fi; \
		for a in $(GUEST_LEV_ARCHES); do [ $$os = linux ] && [ $$a = $$arch ] || cp dist/.lev/lev-linux-$$a $$d/; done; \
		cp README.md SECURITY.md $$d/; \
		tar -C dist --sort=name --mtime=@0 --owner=0 --group=0 -czf $$d.tar.gz $$(basename $$d); rm -rf $$d; \
		echo "dist: $$d.tar.gz"; \
	done; rm -rf dist/.lev; cd dist && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

ci: lint cross fuzz e2e

clean:
	rm -rf $(BIN) dist
