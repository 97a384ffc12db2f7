#!/bin/bash
# ab.sh BASE_BIN NEW_BIN ROUNDS: an A/B of the produce hot path between two logagent binaries,
# make bench's produce rows (durability "replicated", 3 partitions, batches of 100, 4 producers).
#
# One cluster at a time: per round and side (the order alternating per round) a fresh
# `logagent dev` cluster of that side's binary on the same ports and directory path; per
# workload a 2 s warm-up, `sync` and 1 s of rest, then one 5 s measured run with the base
# binary's load generator for both sides; the new side's agents are scraped (GET /metrics)
# every 5 s during its runs (AB_SCRAPE=0 turns that off). Clusters side by side bias whichever
# side the machine happens to favour in that run (the idle cluster's agents and Consul compete
# with the measured one): same binaries, two such runs, new ÷ base 0.89 and 1.05.
#
# Prints one line per run (records/s, the agents' CPU µs and write syscalls per record, from
# /proc), then per workload the new ÷ base ratios of the rounds and their median and mean.
set -u
BASE=$1 NEW=$2 ROUNDS=$3
D=$(mktemp -d /tmp/logagent-ab-XXXX)
DEV=
# A cluster left running would hold the ports of the next run: stop it, whatever ends the script.
trap '[ -n "$DEV" ] && kill -INT $DEV 2> /dev/null && wait $DEV 2> /dev/null; rm -rf $D' EXIT
printf 'storage {\n  durability = "replicated"\n}\n' > $D/c.hcl
declare -A BIN=([base]=$BASE [new]=$NEW)
agents() { for p in $(pgrep -P $1); do [ "$(tr '\0' '\n' < /proc/$p/cmdline 2> /dev/null | sed -n 2p)" = agent ] && echo $p; done; }
cpu() { for p in $1; do awk '{print $14+$15}' /proc/$p/stat; done | paste -sd+ | bc; }
sysw() { for p in $1; do awk '/^syscw/{print $2}' /proc/$p/io; done | paste -sd+ | bc; }
start() { # side: a fresh cluster of side's binary; sets DEV and PIDS
	rm -rf $D/cluster
	${BIN[$1]} dev -dir $D/cluster -port-offset 6000 -config $D/c.hcl > $D/dev.out 2>&1 &
	DEV=$!
	for _ in $(seq 90); do grep -q "cluster is up" $D/dev.out && break; sleep 1; done
	PIDS="$(agents $DEV | tr '\n' ' ')"
	if ! grep -q "cluster is up" $D/dev.out || [ -z "$PIDS" ]; then
		echo "ab.sh: the $1 cluster did not come up:" >&2
		tail -5 $D/dev.out >&2
		exit 1
	fi
}
run() { # side rf acks size
	local side=$1 rf=$2 acks=$3 size=$4 scraper=
	local args="-addr http://127.0.0.1:13070 -topic t_${rf}_${size} -create -partitions 3 -replication-factor $rf -min-insync-replicas $((rf < 2 ? rf : 2)) -acks $acks -size $size -batch 100 -concurrency 4"
	$BASE bench produce $args -duration 2s -json > /dev/null 2>&1
	sync
	sleep 1
	if [ $side = new ] && [ "${AB_SCRAPE:-1}" = 1 ]; then
		(while :; do for p in 13070 13071 13072; do curl -s -o /dev/null http://127.0.0.1:$p/metrics; done; sleep 5; done) &
		scraper=$!
	fi
	local c0 w0 c1 w1 out
	c0=$(cpu "$PIDS") w0=$(sysw "$PIDS")
	out=$($BASE bench produce $args -duration 5s -json 2> /dev/null)
	c1=$(cpu "$PIDS") w1=$(sysw "$PIDS")
	if [ -n "$scraper" ]; then kill $scraper; wait $scraper 2> /dev/null; fi
	echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["records_per_second"]), "%.3f" % (('$c1'-'$c0')*1e4/d["records"]), "%.1f" % (('$w1'-'$w0')*1e3/d["records"]))'
}
for r in $(seq $ROUNDS); do
	order="base new"
	[ $((r % 2)) = 1 ] && order="new base"
	for side in $order; do
		start $side
		for w in "3 all 100" "3 all 1024" "1 1 1024"; do
			set -- $w
			set -- $1 $2 $3 $(run $side $1 $2 $3)
			echo "round=$r rf=$1 acks=$2 size=$3 side=$side records_per_second=$4 cpu_us_per_record=$5 write_syscalls_per_1000_records=$6" | tee -a $D/runs.txt
		done
		kill -INT $DEV
		wait $DEV 2> /dev/null
		DEV=
	done
done
python3 - $D/runs.txt << 'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split())
    runs.setdefault((f["rf"], f["acks"], f["size"]), {}).setdefault(f["round"], {})[f["side"]] = f
for (rf, acks, size), rounds in runs.items():
    pairs = [v for v in rounds.values() if "new" in v and "base" in v]
    rps = sorted(float(v["new"]["records_per_second"]) / float(v["base"]["records_per_second"]) for v in pairs)
    cpu = [float(v["new"]["cpu_us_per_record"]) / float(v["base"]["cpu_us_per_record"]) for v in pairs]
    print(f"RF {rf} acks={acks} {size} B: new/base records/s {' '.join('%.3f' % x for x in rps)}; "
          f"median {statistics.median(rps):.3f}, mean {statistics.mean(rps):.3f}; CPU per record median {statistics.median(cpu):.3f}")
PY
