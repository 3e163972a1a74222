#!/usr/bin/env bash
# Safe config changes through `gateway ctl config` (configs/lab.toml, reload.watch = false):
# a saved file changes nothing until it is applied; `diff` names what an apply would change;
# a refused file is answered with its field (exit 1) and changes nothing; an apply with
# --confirm that is not confirmed rolls back by itself (the ping the old config allowed flows
# again, the new rule is gone); a confirmed one stays past its deadline; `rollback` returns to
# the config before; `ctl config reload` (the systemd unit's ExecReload) exits 1 on a refused
# file and 0 on a good one. The rule's hits are counted (metrics, `ctl show rules`).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
test_start=$(date +%s)
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
CONFIG=$WORK/gateway.toml
lab_config 19142 >"$CONFIG"
printf '\n[ctl]\nsocket = "%s"\n[reload]\nwatch = false\n' "$WORK/run/ctl.sock" >>"$CONFIG"
cp "$CONFIG" "$WORK/original.toml"
METRICS=http://127.0.0.1:19142/metrics
start_gateway "$CONFIG"
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }
shown() { ctl show config --json | python3 -c "import json, sys; print(eval(sys.argv[1], {'c': json.load(sys.stdin)}))" "$1"; }
pings() { lan ping -c 2 -i 0.2 -W 1 10.0.0.2 >/dev/null 2>&1; }

original_sha=$(shown 'c["sha256"]')
[[ $(shown 'c["version"]') == 1 && $(shown 'len(c["kept"])') -ge 1 ]] ||
    fail "at start: version $(shown 'c["version"]'), $(shown 'len(c["kept"])') configs kept"
[[ $(shown 'c["kept"][0]["sha256"]') == "$original_sha" ]] ||
    fail "the running config is not the newest kept in the state directory"
pings || fail "LAN -> WAN ping before any change"

# 1. With the watcher off, saving the file changes nothing.
cat >>"$CONFIG" <<'TOML'

[[firewall.rules]]
name = "no-ping-out"
from = "lan"
to = "wan"
protocol = "icmp"
action = "drop"
TOML
cp "$CONFIG" "$WORK/rule.toml"
# The rule's action misspelt: the one change from rule.toml.
sed '$s/action = "drop"/action = "allow"/' "$WORK/rule.toml" >"$WORK/bad.toml"
sleep 2
[[ $(shown 'c["version"]') == 1 ]] || fail "reload.watch = false, yet the saved file was applied"
pings || fail "the saved (not applied) rule already blocks the ping"
pass "reload.watch = false: a saved file changes nothing until applied"

# 2. diff names what an apply would change, and applies nothing.
diff_out=$(ctl config diff "$CONFIG") || fail "ctl config diff failed: $diff_out"
grep -q "would change: .*firewall.rules (1 -> 2 entries)" <<<"$diff_out" ||
    fail "diff does not name the added rule: $diff_out"
[[ $(shown 'c["version"]') == 1 ]] || fail "diff applied something"
pass "ctl config diff: $(head -n 1 <<<"$diff_out")"

# 3. A refused file: diff and apply exit 1 naming the field; nothing changes.
if out=$(ctl config apply "$WORK/bad.toml" 2>&1); then
    fail "a file with action = \"allow\" was applied: $out"
fi
grep -q 'firewall.rules\[1\].action' <<<"$out" || fail "the refusal does not name the field: $out"
ctl config diff "$WORK/bad.toml" >/dev/null 2>&1 && fail "diff of a refused file exited 0"
[[ $(shown 'c["version"]') == 1 ]] || fail "a refused apply changed the version"
pings || fail "the ping stopped after a refused apply"
pass "a refused apply exits 1 naming the field ($(tail -n 1 <<<"$out" | cut -c1-100)); nothing changed"

# 4. Applied with --confirm and not confirmed: in force at once, rolled back by itself.
out=$(ctl config apply "$CONFIG" --confirm 3) || fail "ctl config apply --confirm failed: $out"
grep -q "applied version 2" <<<"$out" && grep -q "rolls back in 3 s unless confirmed" <<<"$out" ||
    fail "apply did not report the version and the confirmation: $out"
pings && fail "the applied rule does not block the ping"
[[ $(shown 'c["awaiting_confirmation"]["version"]') == 2 ]] || fail "show config does not show the confirmation awaited"
poll_until 30 eval '[[ $(shown "c[\"version\"]") == 3 ]]' ||
    fail "the unconfirmed apply was not rolled back (version $(shown 'c["version"]'))"
[[ $(shown 'c["sha256"]') == "$original_sha" ]] || fail "the rollback did not return to the original text"
shown 'c["reloads"][-1]["source"]' | grep -q "version 2 was not confirmed" ||
    fail "the rollback is not recorded as such: $(shown 'c["reloads"][-1]')"
[[ $(shown 'c["awaiting_confirmation"]') == None ]] || fail "still awaiting a confirmation after the rollback"
pings || fail "after the rollback the ping the original config allows is still blocked"
pass "an apply not confirmed within 3 s rolled back: the ping flows again, the rule is gone"

# 5. Confirmed in time, it stays past its deadline.
ctl config apply "$CONFIG" --confirm 8 >/dev/null || fail "the second apply failed"
ctl config confirm | grep -q "confirmed version 4" || fail "confirm did not confirm version 4"
ctl config confirm >/dev/null 2>&1 && fail "a second confirm found something to confirm"
[[ $(shown 'c["awaiting_confirmation"]') == None ]] || fail "confirmed, yet a confirmation is awaited"
sleep 9
[[ $(shown 'c["version"]') == 4 ]] || fail "a confirmed apply was rolled back (version $(shown 'c["version"]'))"
pings && fail "the confirmed rule no longer blocks the ping"
pass "a confirmed apply stays past its deadline"
# The rule counts the flows it decided: each ping above was one, at least.
rule_hits() { curl -sf "$METRICS" | awk '/^gateway_firewall_rule_hits_total\{/ && /rule="no-ping-out"/ && /action="drop"/ { print $NF }'; }
hits=$(rule_hits)
((${hits:-0} >= 2)) || fail "gateway_firewall_rule_hits_total for no-ping-out is '${hits}', expected the blocked pings"
# Read whole first: grep -q would stop reading at its match, and ctl's next line would end
# it with SIGPIPE, a failure under pipefail.
rules=$(ctl show rules)
grep -Eq "^ +1 +no-ping-out +drop +$hits\b" <<<"$rules" ||
    fail "ctl show rules does not list no-ping-out with its $hits flows: $rules"
pass "the rule counts the flows it dropped ($hits), in the metrics and ctl show rules"
# And when it last decided one: a Unix second since this test started, the same in both (no
# ping has gone out since), and ctl's table says how long ago.
last=$(curl -sf "$METRICS" | awk '/^gateway_firewall_rule_last_match_timestamp_seconds\{/ && /rule="no-ping-out"/ { print $NF }')
listed_last=$(ctl show rules --json | python3 -c '
import json, sys
print(next(r["last_matched"] for r in json.load(sys.stdin)["rules"] if r["name"] == "no-ping-out"))')
now=$(date +%s)
((${last:-0} >= test_start && ${last:-0} <= now)) ||
    fail "gateway_firewall_rule_last_match_timestamp_seconds for no-ping-out is '${last}', not between $test_start and $now"
[[ $listed_last == "$last" ]] || fail "ctl show rules --json says no-ping-out last matched at $listed_last, the metrics $last"
grep -Eq "^ +1 +no-ping-out +drop +$hits +[0-9]+s ago$" <<<"$rules" ||
    fail "ctl show rules does not say how long ago no-ping-out last matched: $rules"
pass "the rule's last match ($last) is in the metrics and ctl show rules"
# The pings that passed were the lan -> wan policy's, no rule's: its default counts them.
default_hits() { curl -sf "$METRICS" | awk '/^gateway_firewall_default_hits_total\{/ && /from="lan"/ && /to="wan"/ && /action="accept"/ { print $NF }'; }
accepted=$(default_hits)
((${accepted:-0} >= 2)) || fail "gateway_firewall_default_hits_total for lan -> wan is '${accepted}', expected the pings it let out"
listed=$(ctl show rules --json | python3 -c '
import json, sys
print(next(p["hits"] for p in json.load(sys.stdin)["defaults"] if (p["from"], p["to"], p["action"]) == ("lan", "wan", "accept")))')
[[ $listed == "$accepted" ]] || fail "ctl show rules --json says lan -> wan decided $listed, the metrics $accepted"
pass "the lan -> wan default counts the flows it accepted ($accepted), in the metrics and ctl show rules"

# 6. rollback returns to the config before, whole.
out=$(ctl config rollback) || fail "ctl config rollback failed: $out"
[[ $(shown 'c["sha256"]') == "$original_sha" ]] || fail "rollback 1 did not return to the original text"
pings || fail "after rollback 1 the ping is still blocked"
ctl config rollback 99 >/dev/null 2>&1 && fail "rollback 99 found a config that far back"
pass "ctl config rollback: back to the original config ($(shown 'len(c["kept"])') kept in the state directory)"

# 7. ctl config reload (ExecReload) tells the truth: 1 on a refused file, 0 on a good one.
cp "$WORK/bad.toml" "$CONFIG"
if out=$(ctl config reload 2>&1); then
    fail "ctl config reload of a refused file exited 0: $out"
fi
grep -q 'firewall.rules\[1\].action' <<<"$out" || fail "the reload refusal does not name the field: $out"
pings || fail "the ping stopped after a refused reload"
cp "$WORK/rule.toml" "$CONFIG"
ctl config reload >/dev/null || fail "ctl config reload of a good file failed"
pings && fail "the reloaded rule does not block the ping"
pass "ctl config reload exits 1 on a refused file (running config kept), 0 on a good one"
