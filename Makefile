# lvsd — see README.md. `make test` is what CI runs (through .ci/run).
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN := $(CURDIR)/bin
OUT ?= $(CURDIR)/e2e/out
RUN ?= .
E2E_TIMEOUT ?= 20m

.PHONY: all build vet unit e2e test demo bench clean vm-setup

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lvsd ./cmd/lvsd
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-echo ./e2e/echo/cmd/lvsd-echo
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-demo ./e2e/demo
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-bench ./e2e/bench

vet:
	$(GO) vet ./...
	$(GO) vet -tags 'e2e vmtest' ./e2e/... ./nat/...

unit:
	$(GO) test -count=1 -v ./... | grep -vE "^\s*=== (RUN|PAUSE|CONT|NAME)" ; exit $${PIPESTATUS[0]}

# The e2e suite runs in a VM with a stock Debian kernel (real IPVS): go test
# -exec boots one VM per package, one package at a time. ./e2e is the
# black-box suite of the built binary; ./nat adds its datapath test with
# IPVS (tag vmtest). RUN selects tests by regex.
E2E_PKGS ?= ./e2e ./nat
e2e: build vm-setup
	@mkdir -p $(OUT)
	LVSD_BIN=$(BIN)/lvsd LVSD_ECHO_BIN=$(BIN)/lvsd-echo LVSD_E2E_OUT=$(OUT) \
	  $(GO) test -tags 'e2e vmtest' -count=1 -p 1 -timeout $(E2E_TIMEOUT) -v \
	  -exec '$(CURDIR)/e2e/vm/run --timeout 900 --rw $(OUT) --' $(E2E_PKGS) -run '$(RUN)'

vm-setup:
	$(CURDIR)/e2e/vm/run --setup

test: vet unit e2e

demo: build vm-setup
	$(CURDIR)/e2e/vm/run -- $(BIN)/lvsd-demo -lvsd $(BIN)/lvsd

# Cold apply of 1,000 services x 10 backends, lvsd vs ipvsadm -R in the same
# VM run, then one weight change (docs/performance.md).
bench: build vm-setup
	$(CURDIR)/e2e/vm/run -- $(BIN)/lvsd-bench -lvsd $(BIN)/lvsd $(BENCH_ARGS)

clean:
	rm -rf $(BIN) $(OUT)
