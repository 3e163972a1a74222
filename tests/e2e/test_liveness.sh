#!/usr/bin/env bash
# Worker liveness: every worker's heartbeat is fresh in the metrics; a worker that panics is
# noticed within a second, logged by name, and the gateway exits non-zero within two seconds
# of the panic (so systemd's Restart=on-failure restarts it); a start-up failure after the
# workers launched stops them before the ports close. The panic and the start-up failure are
# made on purpose by test-only environment variables read once at start
# (gateway/src/dataplane/liveness.rs, gateway/src/runtime/).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
CONFIG=$WORK/gateway.toml
lab_config 19107 >"$CONFIG"
METRICS=http://127.0.0.1:19107/metrics

# wait_exit SECONDS: waits for the gateway to exit (killing it after SECONDS), sets STATUS and
# EXITED_AT (Unix time, fractional) and forgets the pid.
wait_exit() {
    (sleep "$1"; kill -KILL "$GATEWAY_PID" 2>/dev/null) &
    local watchdog=$!
    STATUS=0
    wait "$GATEWAY_PID" || STATUS=$?
    EXITED_AT=$(date +%s.%N)
    kill "$watchdog" 2>/dev/null || true
    wait "$watchdog" 2>/dev/null || true
    GATEWAY_PID=
}

# log_time PATTERN: the Unix time of the first log line matching PATTERN.
log_time() {
    python3 - "$WORK/gateway.log" "$1" <<'PY'
import datetime, re, sys
for line in open(sys.argv[1], errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    if re.search(sys.argv[2], line):
        stamp = re.match(r"\s*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z", line)
        if stamp:
            t = datetime.datetime.fromisoformat(stamp.group(1)[:26]).replace(tzinfo=datetime.timezone.utc)
            print(f"{t.timestamp():.6f}")
            sys.exit(0)
sys.exit(1)
PY
}

# 1. A panic on purpose, 3 s after launch. Before it, the heartbeat is fresh and traffic flows.
GATEWAY_TEST_PANIC_WORKER=0:3000 start_gateway "$CONFIG"
age=$(curl -sf "$METRICS" | awk '$1 == "gateway_worker_heartbeat_age_seconds{worker=\"0\"}" { print $2 }')
[[ -n $age ]] || fail "no gateway_worker_heartbeat_age_seconds for worker 0"
python3 -c "import sys; sys.exit(not float('$age') < 0.5)" \
    || fail "worker 0's heartbeat is $age s old while it runs"
pass "worker 0's heartbeat is fresh ($age s old)"
expect_output "traffic flows before the panic" " 0% packet loss" lan ping -c 2 -i 0.2 -W 1 10.0.0.2

wait_exit 15
(( STATUS == 1 )) || fail "after a worker panic the gateway exited with status $STATUS, not 1"
panicked_at=$(log_time "worker 0 panics on purpose now") || fail "the worker did not log its deliberate panic"
noticed_at=$(log_time "ERROR.*worker 0 panicked: worker 0 panics on purpose") \
    || fail "no error log line names worker 0 and its panic"
grep -q "error: .*worker 0: .*panicked" "$WORK/gateway.log" || fail "the exit error does not name the worker"
python3 - "$panicked_at" "$noticed_at" "$EXITED_AT" <<'PY' || fail "too slow (above)"
import sys
panicked, noticed, exited = map(float, sys.argv[1:])
print(f"  noticed {noticed - panicked:.3f} s after the panic, exited {exited - panicked:.3f} s after it")
sys.exit(not (0 <= noticed - panicked < 1.0 and exited - panicked < 2.0))
PY
pass "a worker panic is noticed within 1 s, logged by name, and the gateway exits 1 within 2 s"

# 2. Start-up fails after the workers launched: they stop before any port closes.
GATEWAY_TEST_FAIL_START=1 RUST_LOG=info,gateway::dpdk::port=debug \
    "$GATEWAY" run --config "$CONFIG" >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
wait_exit 20
(( STATUS == 1 )) || fail "a start-up failure exited with status $STATUS, not 1"
grep -q "start-up fails on purpose" "$WORK/gateway.log" || fail "the start-up failure is not reported"
python3 - "$WORK/gateway.log" <<'PY' || fail "shutdown order (above)"
import re, sys
lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(sys.argv[1], errors="replace")]
stopped = [i for i, l in enumerate(lines) if "worker stopped" in l]
closed = [i for i, l in enumerate(lines) if "port stopped and closed" in l]
if not stopped or not closed:
    sys.exit(f"  worker stops logged: {len(stopped)}, port closes logged: {len(closed)}")
if max(stopped) > min(closed):
    sys.exit("  a port closed while a worker still ran")
print(f"  {len(stopped)} worker(s) stopped, then {len(closed)} port(s) closed")
PY
pass "a start-up failure after launch stops the workers before the ports close"
