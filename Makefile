# lvsd — see README.md. `make test` is what CI runs (through .ci/run).
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN := $(CURDIR)/bin
OUT ?= $(CURDIR)/e2e/out
RUN ?= .
E2E_TIMEOUT ?= 40m

.PHONY: all build vet unit examples-check bpf bpf-check fuzz fuzz-short e2e soak prev test demo bench dpbench ecmp-bench clean vm-setup package package-check

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lvsd ./cmd/lvsd
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-echo ./e2e/echo/cmd/lvsd-echo
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-demo ./e2e/demo
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-bench ./e2e/bench
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lvsd-ecmpbench ./e2e/ecmpbench

vet:
	$(GO) vet ./...
	$(GO) vet -tags 'e2e vmtest' ./e2e/... ./nat/... ./ipvs/...
	$(GO) vet -tags 'e2e vmtest soak' ./e2e
	$(GO) vet -tags 'e2e vmtest dpbench' ./e2e

unit:
	$(GO) test -race -count=1 -v ./... | grep -vE "^\s*=== (RUN|PAUSE|CONT|NAME)" ; exit $${PIPESTATUS[0]}
	$(MAKE) --no-print-directory fuzz-short
	$(MAKE) --no-print-directory examples-check

# The Prometheus alert rules: promtool check rules and their unit tests,
# and promtool check metrics on the expected scrape (installs Debian's
# prometheus package for promtool when missing; e2e/systemd lints the real
# scrape with it too). The dashboard's and the rules' series are checked by
# `go test ./cmd/lvsd`.
examples-check:
	$(CURDIR)/examples/prometheus/check

# The eBPF programs of nat/toa (TOA for FULLNAT): bpf2go compiles them with
# Debian's clang and embeds the objects, which are committed so that a build
# needs no clang. `make bpf` regenerates them after a change to
# nat/toa/bpf/*; `make bpf-check` compiles the sources afresh in a temporary
# folder and fails if the committed objects or Go files differ from them.
BPF_TOOLS := clang llvm-strip
# Debian keeps <asm/types.h> in the architecture's multiarch folder
# (/usr/include/x86_64-linux-gnu, /usr/include/aarch64-linux-gnu); gen.go's
# -I names it through BPF_MULTIARCH. The objects do not depend on it.
BPF_MULTIARCH ?= $(or $(shell gcc -print-multiarch 2>/dev/null),$(shell uname -m)-linux-gnu)
bpf:
	@for t in $(BPF_TOOLS); do command -v $$t >/dev/null || { echo "$$t missing: apt-get install clang llvm libbpf-dev" >&2; exit 1; }; done
	cd nat/toa && BPF_MULTIARCH=$(BPF_MULTIARCH) $(GO) generate ./
bpf-check:
	@for t in $(BPF_TOOLS); do command -v $$t >/dev/null || { echo "$$t missing: apt-get install clang llvm libbpf-dev" >&2; exit 1; }; done
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp -r nat/toa/bpf nat/toa/gen.go "$$tmp/"; \
	$(GO) build -o "$$tmp/bpf2go" github.com/cilium/ebpf/cmd/bpf2go; \
	sed -n 's|^//go:generate go run github.com/cilium/ebpf/cmd/bpf2go |"$$tmp"/bpf2go |p' nat/toa/gen.go > "$$tmp/gen.sh"; \
	(cd "$$tmp" && GOPACKAGE=toa tmp="$$tmp" BPF_MULTIARCH=$(BPF_MULTIARCH) bash gen.sh >/dev/null); \
	for f in director_bpfel.o director_bpfel.go realserver_bpfel.o realserver_bpfel.go; do \
	  cmp -s "$$tmp/$$f" nat/toa/$$f || { echo "nat/toa/$$f differs from what its source compiles to: run make bpf and commit" >&2; exit 1; }; \
	done; echo "bpf-check: the committed objects match nat/toa/bpf"

# Native Go fuzz targets, one "package:FuzzName" per entry; add yours here.
# `make fuzz` runs each for FUZZTIME (long runs, by hand), `make unit` each
# for FUZZ_SHORT. Crashers land in the package's testdata/fuzz/FuzzName/
# (commit them: they become seeds). Minimising a new input is capped so a
# run spends its time fuzzing.
FUZZ_TARGETS := \
	./agent/config/servicesdir:FuzzServiceFile \
	./agent/config/servicesdir:FuzzAgentFile \
	./agent/importer/keepalived:FuzzParse \
	./agent/health:FuzzHTTPResponse \
	./agent/health:FuzzParseWeight \
	./agent/health:FuzzDNSJudge \
	./cluster:FuzzDecodeHeartbeat \
	./cluster:FuzzHeartbeatGuard \
	./cluster:FuzzParseMemberlistLine \
	./cluster/connsync:FuzzDecodeMessage \
	./cluster/connsync:FuzzDeliver \
	./cluster/connsync:FuzzParseDatagram \
	./cluster/connsync:FuzzCache \
	./cluster/connsync:FuzzOrigins \
	./cluster/configsync:FuzzDecode \
	./cluster/bfd:FuzzParsePacket \
	./cluster/vrrp:FuzzParse \
	./nat/toa:FuzzParseOption
FUZZTIME ?= 10m
# A count, not a duration: Go 1.26's fuzz coordinator can fail a target with a
# bare "context deadline exceeded" when a -fuzztime duration ends
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZ_SHORT ?= 10000x
define run-fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "fuzz $$name in $$pkg for $(1)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(1) -fuzzminimizetime 5s $$pkg; \
	done
endef
fuzz:
	$(call run-fuzz,$(FUZZTIME))
fuzz-short:
	$(call run-fuzz,$(FUZZ_SHORT))

# The e2e suite runs in a VM with a stock Debian kernel (real IPVS): go test
# -exec boots one VM per package, one package at a time. ./e2e is the
# black-box suite of the built binary; ./nat adds its datapath test with
# IPVS and ./ipvs its sync-daemon tests (tag vmtest); ./e2e/ecmplab proves the
# BGP/BFD engine (cluster/bgp, cluster/bfd) against FRR as the router. RUN
# selects tests by regex.
#
# E2E_SYSTEMD_PKGS run in a VM that boots systemd as PID 1 instead (e2e/vm/run
# --init systemd, ~5 s more per boot): ./e2e/systemd installs the .deb that
# `make package` built and runs lvsd as lvsd.service. Both runs always go;
# the target fails if either did.
E2E_PKGS ?= ./e2e ./nat ./ipvs ./e2e/ecmplab

# prev builds the release before this one's wire version 4 into
# bin/lvsd-prev: TestMixedVersions runs it beside this build (rolling
# upgrades, docs/cluster.md). A clone without that commit cannot build it;
# the test then fails saying so.
PREV_COMMIT ?= 98698e8
prev:
	@git cat-file -e '$(PREV_COMMIT)^{commit}' 2>/dev/null || { \
	  echo "prev: commit $(PREV_COMMIT) is not in this clone (shallow?): git fetch --unshallow; TestMixedVersions will fail" >&2; exit 1; }
	rm -rf $(BIN)/prev-src && mkdir -p $(BIN)/prev-src
	git archive $(PREV_COMMIT) | tar -x -C $(BIN)/prev-src
	cd $(BIN)/prev-src && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-X main.version=$(PREV_COMMIT)' -o $(BIN)/lvsd-prev ./cmd/lvsd
	rm -rf $(BIN)/prev-src
E2E_SYSTEMD_PKGS ?= ./e2e/systemd
e2e: build vm-setup package-check examples-check
	@mkdir -p $(OUT)
	-@$(MAKE) --no-print-directory prev
	rc=0; \
	LVSD_BIN=$(BIN)/lvsd LVSD_ECHO_BIN=$(BIN)/lvsd-echo LVSD_PREV_BIN=$(BIN)/lvsd-prev LVSD_E2E_OUT=$(OUT) \
	  $(GO) test -tags 'e2e vmtest' -count=1 -p 1 -timeout $(E2E_TIMEOUT) -v \
	  -exec '$(CURDIR)/e2e/vm/run --timeout 2400 --rw $(OUT) --' $(E2E_PKGS) -run '$(RUN)' || rc=1; \
	if [ -n '$(E2E_SYSTEMD_PKGS)' ]; then \
	  LVSD_PKG_DIR=$(PKG_OUT) LVSD_E2E_OUT=$(OUT) \
	  $(GO) test -tags 'e2e vmtest' -count=1 -p 1 -timeout $(E2E_TIMEOUT) -v \
	  -exec '$(CURDIR)/e2e/vm/run --init systemd --timeout 900 --rw $(OUT) --' $(E2E_SYSTEMD_PKGS) -run '$(RUN)' || rc=1; \
	fi; \
	if [ -n '$(SOAK_SHORT)' ] && [ '$(RUN)' = . ]; then \
	  LVSD_BIN=$(BIN)/lvsd LVSD_ECHO_BIN=$(BIN)/lvsd-echo LVSD_PREV_BIN=$(BIN)/lvsd-prev LVSD_E2E_OUT=$(OUT) \
	  LVSD_SOAK_DURATION=$(SOAK_SHORT) LVSD_SOAK_SEED=$(SOAK_SEED) \
	  $(GO) test -tags 'e2e vmtest soak' -count=1 -timeout 20m -v \
	  -exec '$(CURDIR)/e2e/vm/run --timeout 1200 --rw $(OUT) --' ./e2e -run '^TestSoak$$' || rc=1; \
	fi; exit $$rc

# The chaos soak (e2e/soak_test.go, build tag soak) for DURATION, with SEED
# to replay a failed run's schedule; the report lands in
# $(OUT)/soak-report.txt. `make e2e` (so `make test`) runs a short one,
# SOAK_SHORT long (faults and the settling after each) on the fixed
# schedule SOAK_SEED, so that a red run is a finding anyone can replay;
# SOAK_SHORT= leaves it out. docs/reliability.md says what the runs found.
SOAK_SHORT ?= 3m
SOAK_SEED ?= 1
DURATION ?= 2h
SEED ?=
soak: build vm-setup prev
	@mkdir -p $(OUT)
	LVSD_BIN=$(BIN)/lvsd LVSD_ECHO_BIN=$(BIN)/lvsd-echo LVSD_PREV_BIN=$(BIN)/lvsd-prev LVSD_E2E_OUT=$(OUT) LVSD_SOAK_DURATION=$(DURATION) LVSD_SOAK_SEED=$(SEED) \
	  $(GO) test -tags 'e2e vmtest soak' -count=1 -timeout 0 -v \
	  -exec '$(CURDIR)/e2e/vm/run --timeout 86400 --rw $(OUT) --' ./e2e -run '^TestSoak$$'

# Packages: `make package` builds bin/pkg/lvsd_*.deb and lvsd-*.rpm with a
# pinned nfpm, which stays out of go.mod (go install into a cache outside the
# repository, reused by later runs). The packaged binary is a PIE (ASLR, as
# Debian builds Go programs). `make package-check` runs lintian and installs
# the .rpm into a scratch root (packaging/check); e2e depends on it.
NFPM_VERSION := v2.45.2
TOOLS_CACHE ?= /var/cache/lvsd-tools
NFPM := $(TOOLS_CACHE)/nfpm-$(NFPM_VERSION)/nfpm
PKG_OUT ?= $(BIN)/pkg

$(NFPM):
	mkdir -p $(@D)
	GOBIN=$(@D) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

package: $(NFPM)
	CGO_ENABLED=0 $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)' -o $(PKG_OUT)/lvsd ./cmd/lvsd
	VERSION=$(VERSION) $(CURDIR)/packaging/build $(NFPM) $(PKG_OUT)/lvsd $(PKG_OUT)

package-check: package
	$(CURDIR)/packaging/check $(PKG_OUT)

vm-setup:
	$(CURDIR)/e2e/vm/run --setup

test: vet unit e2e

demo: build vm-setup
	$(CURDIR)/e2e/vm/run -- $(BIN)/lvsd-demo -lvsd $(BIN)/lvsd

# Cold apply of 1,000 services x 10 backends, lvsd vs ipvsadm -R in the same
# VM run, then one weight change (docs/performance.md). BENCH_VM: options of
# e2e/vm/run, e.g. --mem 4096 for three FULLNAT directors at 10,000 services.
bench: build vm-setup
	@mkdir -p $(OUT)
	$(CURDIR)/e2e/vm/run $(BENCH_VM) --rw $(OUT) -- $(BIN)/lvsd-bench -lvsd $(BIN)/lvsd $(BENCH_ARGS)

# What each forwarding setup costs the data path: new connections and bulk
# bytes per second through DR, NAT, FULLNAT (with TOA, and at 10,000
# services) and tunnel, with and without connection sync, as ratios to
# ipvsadm-programmed DR in the same VM run (docs/performance.md).
# DPBENCH_ENV: e.g. LVSD_DPBENCH_ROUNDS=3 LVSD_DPBENCH_WINDOW_MS=4000.
# DPBENCH_RUN=TestECMPFastFailover: ECMP director loss with BFD 100 ms × 3.
DPBENCH_RUN ?= TestDataPlaneCost
dpbench: build vm-setup
	@mkdir -p $(OUT)
	LVSD_BIN=$(BIN)/lvsd LVSD_ECHO_BIN=$(BIN)/lvsd-echo LVSD_E2E_OUT=$(OUT) $(DPBENCH_ENV) \
	  $(GO) test -tags 'e2e vmtest dpbench' -count=1 -timeout 0 -v \
	  -exec '$(CURDIR)/e2e/vm/run --timeout 7200 --rw $(OUT) --' ./e2e -run '^($(DPBENCH_RUN))$$'

# lvsd's embedded BGP/BFD speaker vs FRR on the directors, same VM run
# (docs/ecmp.md, "Choosing the engine"). ECMP_BENCH_ARGS: -runs N -idle D.
ecmp-bench: build vm-setup
	$(CURDIR)/e2e/vm/run -- $(BIN)/lvsd-ecmpbench $(ECMP_BENCH_ARGS)

clean:
	rm -rf $(BIN) $(OUT)
