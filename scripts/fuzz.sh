#!/usr/bin/env bash
# Runs short fuzzing sessions: fuzz.sh FUZZTIME PKG:TARGET[:EXTRA FLAGS] ...
#
# A finding fails the run: a failing input written to testdata/fuzz, a panic
# or any other failure. One failure is not a finding: Go 1.26's fuzz
# coordinator can end a -fuzztime run with a bare "context deadline
# exceeded" on a loaded machine, nothing found (go.dev/issue/75804, fixed in
# Go 1.27). That case is run again once, and fails only if it recurs.
set -uo pipefail
fuzztime=$1
shift
go=${GO:-go}
status=0
for spec in "$@"; do
	IFS=: read -r pkg target extra <<<"$spec"
	for try in 1 2; do
		echo "$go test $pkg -run '^\$' -fuzz '^$target\$' -fuzztime $fuzztime $extra"
		out=$("$go" test "$pkg" -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" $extra 2>&1)
		rc=$?
		printf '%s\n' "$out" | tail -n 4
		[ $rc -eq 0 ] && break
		if [ $try -eq 1 ] && printf '%s\n' "$out" | grep -q '^    context deadline exceeded$' &&
			! printf '%s\n' "$out" | grep -q 'Failing input written to\|^panic:\|_test.go:[0-9]*:'; then
			echo "fuzz.sh: $target: the Go 1.26 coordinator's deadline race, nothing found: once more"
			continue
		fi
		printf '%s\n' "$out" | tail -n 40
		status=1
		break
	done
done
exit $status
