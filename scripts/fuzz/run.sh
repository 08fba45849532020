#!/bin/sh
# Runs every fuzz target of the workspace in turn for FUZZTIME each (default
# 30s) and prints executions and findings per target. Targets are found with
# `go test -list 'Fuzz.*'` per package, so a new one is picked up by itself.
# A finding stops nothing: the failing input is kept by go test under the
# package's testdata/fuzz/<Target>/ (commit it with the fix) and the table
# marks the target. FUZZ_PKGS limits the packages; FUZZ_MATCH the targets.
# FUZZ_KEEP=N copies up to N of the inputs the run found interesting into
# testdata/fuzz/<Target>/, so plain `go test` replays them from then on.
set -u
FUZZTIME=${FUZZTIME:-30s}
GO=${GO:-go}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PKGS=${FUZZ_PKGS:-"./pkg/... ./gateway/... ./services/auth/... ./services/files/... ./services/logs/..."}
MATCH=${FUZZ_MATCH:-.}
cd "$ROOT" || exit 2
results=$(mktemp)
trap 'rm -f "$results"' EXIT
failed=0
for pkg in $($GO list $PKGS); do
	dir=$($GO list -f '{{.Dir}}' "$pkg")
	grep -ls '^func Fuzz' "$dir"/*_test.go >/dev/null 2>&1 || continue
	for target in $(cd "$dir" && $GO test -list 'Fuzz.*' . 2>/dev/null | grep '^Fuzz' | grep -E "$MATCH"); do
		echo "== $pkg $target ($FUZZTIME)"
		log=$(cd "$dir" && $GO test -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" -parallel "${FUZZ_PARALLEL:-2}" . 2>&1)
		rc=$?
		execs=$(printf '%s\n' "$log" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2)
		corpus=$(printf '%s\n' "$log" | grep -o 'new interesting: [0-9]*' | tail -1 | cut -d' ' -f3)
		if [ $rc -eq 0 ]; then finding=none; else finding=FAIL; failed=1; printf '%s\n' "$log" | tail -30; fi
		if [ "${FUZZ_KEEP:-0}" -gt 0 ] && [ -d "$($GO env GOCACHE)/fuzz/$pkg/$target" ]; then
			mkdir -p "$dir/testdata/fuzz/$target"
			ls "$($GO env GOCACHE)/fuzz/$pkg/$target" | head -n "$FUZZ_KEEP" | while read -r f; do
				cp "$($GO env GOCACHE)/fuzz/$pkg/$target/$f" "$dir/testdata/fuzz/$target/$f"
			done
		fi
		printf '%s\t%s\t%s\t%s\t%s\n' "${pkg#github.com/acme/platform/}" "$target" "${execs:-?}" "${corpus:-0}" "$finding" >>"$results"
	done
done
echo
printf '| package | target | executions | new interesting inputs | finding |\n|---|---|---|---|---|\n'
awk -F'\t' '{printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5}' "$results"
exit $failed
