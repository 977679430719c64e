# sandboxd: build, test, lint, bench. `sudo make test` is the test command;
# `sudo make demo` the main job (for now: build, and the testbed's status).

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
TOOLS := $(CURDIR)/.tools/bin
STATICCHECK_VERSION := v0.8.2
# Tests boot a private systemd per test binary; one runs at a time (a lock
# makes the others wait), so the timeout covers the waiting too.
TEST_TIMEOUT ?= 20m

export PATH := $(dir $(GO)):$(PATH)

.PHONY: all build test deps lint bench demo clean

all: build

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./cmd/sandboxd ./cmd/sandboxctl ./tests/testbed/cmd/testbed
	@mkdir -p bin/completion
	bin/sandboxctl man > bin/sandboxctl.1
	bin/sandboxctl completion bash > bin/completion/sandboxctl.bash
	bin/sandboxctl completion zsh > bin/completion/_sandboxctl
	bin/sandboxctl completion fish > bin/completion/sandboxctl.fish

deps:
	tests/install-deps.sh

test: deps build
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

# One table of every figure, each beside its baseline from the same run
# (tests/bench/README.md). Boots its own testbed; about 6 minutes.
bench: deps build
	$(GO) run ./tests/bench

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(TOOLS)/staticcheck
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

demo: deps build
	bin/testbed up && bin/testbed status; rc=$$?; bin/testbed down; exit $$rc

clean:
	rm -rf bin dist
