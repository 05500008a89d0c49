#!/usr/bin/env bash
# Runs every test of the project: formatting, vet, unit and integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$fmt" ]; then echo "gofmt needed:"; echo "$fmt"; exit 1; fi
go vet ./...
go test -count=1 ./...
