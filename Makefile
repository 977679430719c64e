# sandboxd: build, test, lint, bench. `sudo make test` is the test command;
# `sudo make demo` the main job: sandboxes side by side, checks compared,
# the winner's diff, checkpoint and rollback, promotion to the project.

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
TOOLS := $(CURDIR)/.tools/bin
STATICCHECK_VERSION := v0.8.2
NFPM_VERSION := v2.45.2
PKG_VERSION ?= $(shell packaging/version.sh)
# Where build puts the programs (and their man page and completions), and
# where deb and rpm put the packages: the packaging test builds its own.
BIN ?= bin
DIST ?= dist
PKG_ARCH ?= $(shell $(GO) env GOARCH)
# Tests boot a private systemd per test binary; one runs at a time (a lock
# makes the others wait), so the timeout covers the waiting too.
TEST_TIMEOUT ?= 20m

export PATH := $(dir $(GO)):$(PATH)

.PHONY: all build test soak fuzz deps lint bench demo clean deb rpm packages fleet-tools fleet-test

all: build

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/sandboxd ./cmd/sandboxctl ./cmd/sandboxd-kubelet ./tests/testbed/cmd/testbed
	@mkdir -p $(BIN)/completion
	$(BIN)/sandboxctl man > $(BIN)/sandboxctl.1
	$(BIN)/sandboxctl completion bash > $(BIN)/completion/sandboxctl.bash
	$(BIN)/sandboxctl completion zsh > $(BIN)/completion/_sandboxctl
	$(BIN)/sandboxctl completion fish > $(BIN)/completion/sandboxctl.fish

deps:
	tests/install-deps.sh

test: deps build
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

# The fleet test (tests/fleet, build tag fleet): two sandboxd hosts (each a
# testbed: its own systemd, bus and btrfs pool), each a Kubernetes node
# through sandboxd-kubelet, under a real control plane (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, the agent-sandbox controller) on
# loopback. fleet-tools builds that control plane once into .tools/fleet
# (tests/fleet/tools/build.sh: about 20 minutes and 3 GB the first time on
# 2 cores; kept between runs on one machine).
fleet-tools:
	tests/fleet/tools/build.sh

fleet-test: deps build fleet-tools
	$(GO) test -count=1 -tags fleet -timeout 30m -v ./tests/fleet/

# The load test's long variant (tests/load): N clients at once, each
# creating, running a command in, diffing and destroying sandboxes over
# the bus, N doubling from 8 until the daemon no longer holds it (over 1%
# errors, or a create's p99 over 2 s); then a table, and the check that
# nothing was leaked. At most 30 minutes of load (-soak.budget), plus the
# wait for the testbed.
soak: deps build
	$(GO) test -count=1 -timeout 90m -run TestLoadSoak -v ./tests/load/ -soak

# Every fuzz target for FUZZTIME each, one after the other; all run, and
# any that fails fails the whole. An input that fails is written to its
# package's testdata/fuzz/<target>/, which `go test` runs from then on:
# commit it with the fix. The seeds are there and in the targets' f.Add;
# what fuzzing adds to the corpus stays in the Go cache (under `go env
# GOCACHE`/fuzz). The packages whose TestMain boots a testbed fuzz inside
# one. Go minimizes each new interesting input for up to 60s by default,
# counting none of it in execs: FUZZMINIMIZE bounds that, so that the
# time goes to fuzzing.
FUZZTIME ?= 10s
FUZZMINIMIZE ?= 2s
FUZZ_TARGETS := ./cowfs:FuzzValidateName ./cowfs:FuzzValidateDataset \
	./cowfs/sendstream:FuzzReader ./supervisor/config:FuzzParse \
	./promote/replica:FuzzParseTarget ./promote:FuzzPlan ./promote:FuzzApplyPath \
	./supervisor:FuzzValidateSandboxName \
	./supervisor/api/options:FuzzParseOptions ./supervisor/api:FuzzMessage \
	./internal/termsafe:FuzzLine ./internal/ignore:FuzzMatch
#
# Go's fuzz coordinator can fail a target at the -fuzztime deadline with a
# bare "context deadline exceeded" and no failing input (golang/go#75804,
# fixed in Go 1.27): such a run is told apart from a finding, which always
# writes its input ("Failing input written to"), and run again once.
fuzz:
	@failed=; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		for try in 1 2; do \
			echo "== $$name ($$pkg), $(FUZZTIME)"; \
			if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg/ >"$$out" 2>&1; then \
				cat "$$out"; break; fi; \
			cat "$$out"; \
			if [ $$try = 1 ] && grep -q '^    context deadline exceeded$$' "$$out" && ! grep -q 'Failing input written' "$$out"; then \
				echo "fuzz: $$name: the coordinator's deadline race (golang/go#75804), no input found: once more"; continue; fi; \
			failed="$$failed $$name"; break; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

# One table of every figure, each beside its baseline from the same run
# (tests/bench/README.md). Boots its own testbed; about 25 minutes (the
# pool part alone 8 to 10).
bench: deps build
	$(GO) run ./tests/bench

# deb and rpm into dist/ (packaging/nfpm.yaml), with nfpm installed into
# .tools/ at the version known to build here.
$(TOOLS)/nfpm:
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

deb rpm: build $(TOOLS)/nfpm
	@mkdir -p $(DIST)
	sed 's|src: bin/|src: $(BIN)/|' packaging/nfpm.yaml > $(BIN)/nfpm.yaml
	PKG_VERSION=$(PKG_VERSION) PKG_ARCH=$(PKG_ARCH) $(TOOLS)/nfpm package --config $(BIN)/nfpm.yaml --packager $@ --target $(DIST)/

packages: deb rpm

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(TOOLS)/staticcheck
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags fleet ./...
	$(TOOLS)/staticcheck -tags fleet ./...

# The main job, with real output (contrib/demo/demo.sh): under this
# machine's systemd where it is PID 1, otherwise in a fresh testbed (its
# private systemd and bus; nothing of this machine changes).
demo: deps build
	@if [ -d /run/systemd/system ]; then \
		echo "demo: systemd is PID 1 here: running under it"; $(CURDIR)/contrib/demo/demo.sh; \
	else \
		bin/testbed run -- $(CURDIR)/contrib/demo/demo.sh; \
	fi

clean:
	rm -rf bin dist
