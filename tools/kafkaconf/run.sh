#!/usr/bin/env bash
# make kafka-conformance: franz-go's own pkg/kgo tests (v1.22.3, pinned in
# this directory's go.mod) against a logagent dev cluster's Kafka listener.
#
# Usage: tools/kafkaconf/run.sh LOGAGENT_BIN
#
# Environment (defaults in brackets):
#   KAFKACONF_DIR           work directory: the cluster's state, the test
#                           binary, one log per test, summary.txt [bin/kafkaconf]
#   KAFKACONF_PORT_OFFSET   the dev cluster's -port-offset [4000]
#   KAFKACONF_TEST_TIMEOUT  each test's -test.timeout [60s]
#   KAFKACONF_BUDGET        seconds after which no further test starts, so
#                           that the whole run stays under 15 min [720]
#   KAFKACONF_RUN           regexp of the test names to run [.]
#   KGO_TEST_RECORDS        records the ETL tests produce [20000]
#
# Every test runs in its own process (the compiled kgo.test with -test.run
# '^Name$'), so that a test that hangs until its timeout, or panics, costs
# only its own result. The dev cluster is started once, stopped by its PID
# at the end, also on failure or interrupt.
set -uo pipefail

bin=${1:?usage: run.sh LOGAGENT_BIN}
dir=${KAFKACONF_DIR:-bin/kafkaconf}
offset=${KAFKACONF_PORT_OFFSET:-4000}
per_test=${KAFKACONF_TEST_TIMEOUT:-60s}
budget=${KAFKACONF_BUDGET:-720}
run_re=${KAFKACONF_RUN:-.}
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$dir" || exit 1
dir=$(cd "$dir" && pwd)
rm -rf "$dir/cluster" "$dir/logs"
mkdir -p "$dir/logs"

echo "kafka-conformance: building franz-go's pkg/kgo tests"
(cd "$here" && go test -c -o "$dir/kgo.test" github.com/twmb/franz-go/pkg/kgo) || exit 1
# Tests read files of their package (config.go, ...), as under go test,
# which runs them in the package's directory.
pkgdir=$(cd "$here" && go list -f '{{.Dir}}' github.com/twmb/franz-go/pkg/kgo) || exit 1
mapfile -t tests < <("$dir/kgo.test" -test.list '^Test' | grep -E '^Test' | grep -E -- "$run_re")

dev_pid=
stop_cluster() {
	[ -n "$dev_pid" ] || return 0
	kill -INT "$dev_pid" 2>/dev/null
	for _ in $(seq 60); do
		kill -0 "$dev_pid" 2>/dev/null || break
		sleep 1
	done
	# logagent dev's children die with it (parent-death signal).
	kill -KILL "$dev_pid" 2>/dev/null
	wait "$dev_pid" 2>/dev/null
	dev_pid=
}
trap stop_cluster EXIT
trap 'stop_cluster; exit 130' INT TERM

echo "kafka-conformance: starting logagent dev -port-offset $offset in $dir/cluster"
"$bin" dev -dir "$dir/cluster" -port-offset "$offset" >"$dir/dev.out" 2>&1 &
dev_pid=$!
up=
for _ in $(seq 240); do
	if grep -q 'logagent dev cluster is up' "$dir/dev.out"; then
		up=1
		break
	fi
	kill -0 "$dev_pid" 2>/dev/null || break
	sleep 0.5
done
if [ -z "$up" ]; then
	echo "kafka-conformance: the dev cluster did not come up; see $dir/dev.out" >&2
	exit 1
fi

export KGO_SEEDS="127.0.0.1:$((9092 + offset))"
export KGO_TEST_RF=3
export KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-20000}
echo "kafka-conformance: ${#tests[@]} tests against KGO_SEEDS=$KGO_SEEDS (KGO_TEST_RF=3, KGO_TEST_RECORDS=$KGO_TEST_RECORDS, $per_test each)"

summary="$dir/summary.txt"
: >"$summary"
start=$SECONDS
pass=0 fail=0 skip=0 notrun=0
for t in "${tests[@]}"; do
	log="$dir/logs/$t.log"
	if ((SECONDS - start > budget)); then
		printf 'NOTRUN %-55s budget of %ss spent\n' "$t" "$budget" >>"$summary"
		notrun=$((notrun + 1))
		continue
	fi
	t0=$SECONDS
	(cd "$pkgdir" && "$dir/kgo.test" -test.run "^$t\$" -test.v -test.count=1 -test.timeout "$per_test") >"$log" 2>&1
	rc=$?
	took=$((SECONDS - t0))
	if grep -q -- "^--- PASS: $t " "$log"; then
		result=PASS pass=$((pass + 1))
	elif grep -q -- "^--- SKIP: $t " "$log"; then
		result=SKIP skip=$((skip + 1))
	else
		result=FAIL fail=$((fail + 1))
	fi
	why=
	case $result in
	SKIP) why=$(grep -m1 -E '^\s+\S+_test\.go:[0-9]+:' "$log" | sed -E 's/^\s+//') ;;
	FAIL)
		# The first line a test file logged, leaving out franz-go's
		# skip messages of subtests ("broker does not support ..."),
		# its timing lines and its notes on what it leaves behind.
		why=$(grep -m1 -E '^panic: test timed out' "$log" ||
			grep -E '^\s+\S+_test\.go:[0-9]+:' "$log" | grep -m1 -vE 'does not support|completed in|NOT DELETING' ||
			grep -m1 -E '^panic:' "$log" ||
			echo "exit status $rc, no test verdict")
		why=$(echo "$why" | sed -E 's/^\s+//' | cut -c1-200)
		subs=$(grep -oE -- '--- FAIL: \S+/\S+' "$log" | awk '{print $3}' | paste -sd, -)
		[ -z "$subs" ] || why="$why [failed: $subs]"
		;;
	esac
	printf '%-6s %-55s %4ss %s\n' "$result" "$t" "$took" "$why" | tee -a "$summary"
done

echo
echo "kafka-conformance: $pass passed, $fail failed, $skip skipped, $notrun not run (of ${#tests[@]}); logs in $dir/logs, summary in $summary"
