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

.PHONY: all build run test test-unit test-e2e bench manifests generate verify clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .

run: build
	./$(BIN) server

# --- test image (helper A) ---
# --- end test image ---

clean:
	rm -rf bin _output
