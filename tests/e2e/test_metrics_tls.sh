#!/usr/bin/env bash
# metrics.web_config as an operator sets it up: a self-signed certificate from openssl, a
# bcrypt-hashed password, deploy/prometheus/web-config.yml's shape; the running gateway serves
# /metrics over TLS only, answers 401 without the password, and a real Prometheus with the
# gateway-tls job's options (scheme https, tls_config, basic_auth) scrapes it: up == 1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PROM_PID=
stop_prometheus() {
    [[ -n $PROM_PID ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null || true
}
trap 'stop_prometheus; cleanup' EXIT

# The password's bcrypt hash, made once with
#   python3 -c 'import bcrypt; print(bcrypt.hashpw(b"e2e-scrape-password", bcrypt.gensalt(10)).decode())'
# (kept here so the test needs no bcrypt tool).
PASSWORD=e2e-scrape-password
HASH='$2b$10$4uuhPuf1eMNoTiKHuZJc3.Anupp34UdR9dgpONJfQvzUgRujTcxyu'

mkdir -p "$WORK/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost \
    -keyout "$WORK/tls/gateway.key" -out "$WORK/tls/gateway.crt" >"$WORK/openssl.log" 2>&1 \
    || fail "openssl req: $(cat "$WORK/openssl.log")"
# The example, with this test's files and password.
sed -e "s|/etc/gateway/tls/|$WORK/tls/|" \
    -e "s|^  prometheus: .*|  prometheus: $HASH|" \
    "$ROOT/deploy/prometheus/web-config.yml" >"$WORK/web-config.yml"
grep -qF "prometheus: $HASH" "$WORK/web-config.yml" || fail "the example has no prometheus user to replace"

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19101 >"$WORK/gateway.toml"
sed -i "s|^listen = \"127.0.0.1:19101\"|&\nweb_config = \"$WORK/web-config.yml\"|" "$WORK/gateway.toml"
grep -q '^web_config = ' "$WORK/gateway.toml" || fail "could not set metrics.web_config"
"$GATEWAY" check-config "$WORK/gateway.toml" >"$WORK/check.txt" 2>&1 \
    || fail "check-config: $(cat "$WORK/check.txt")"
start_gateway "$WORK/gateway.toml"
grep -q "metrics on https://127.0.0.1:19101/metrics" "$WORK/gateway.log" \
    || fail "the gateway does not say it serves https: $(grep metrics "$WORK/gateway.log")"

URL=https://localhost:19101/metrics
CURL=(curl -s --max-time 5 --cacert "$WORK/tls/gateway.crt" --resolve localhost:19101:127.0.0.1)
status=$("${CURL[@]}" -o "$WORK/metrics.txt" -w '%{http_code}' -u "prometheus:$PASSWORD" "$URL")
[[ $status == 200 ]] || fail "GET /metrics over TLS with the password: $status"
grep -q '^gateway_build_info{' "$WORK/metrics.txt" || fail "no gateway_build_info over TLS"
pass "/metrics over TLS with the password: 200 and the metrics"

status=$("${CURL[@]}" -o /dev/null -D "$WORK/headers.txt" -w '%{http_code}' "$URL")
[[ $status == 401 ]] || fail "GET /metrics without a password: $status"
grep -qi '^www-authenticate: basic' "$WORK/headers.txt" || fail "401 without WWW-Authenticate: $(cat "$WORK/headers.txt")"
status=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -u prometheus:wrong "$URL")
[[ $status == 401 ]] || fail "GET /metrics with a wrong password: $status"
pass "no password or a wrong one: 401 with WWW-Authenticate: Basic"

if curl -s --max-time 5 -o "$WORK/plain.txt" http://127.0.0.1:19101/metrics; then
    grep -q gateway_build_info "$WORK/plain.txt" && fail "plain HTTP got the metrics"
fi
pass "plain HTTP on the TLS port gets no metrics"

printf '%s' "$PASSWORD" >"$WORK/password"
cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gateway-tls
    scheme: https
    tls_config:
      ca_file: $WORK/tls/gateway.crt
      server_name: localhost
      min_version: TLS12
    basic_auth:
      username: prometheus
      password_file: $WORK/password
    static_configs:
      - targets: ["127.0.0.1:19101"]
YAML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address=127.0.0.1:19091 >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

query() {
    curl -sf --get http://127.0.0.1:19091/api/v1/query --data-urlencode "query=$1" | python3 -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
print(result[0]["value"][1] if result else "")'
}
build=
for _ in $(seq 1 60); do
    build=$(query 'gateway_build_info{job="gateway-tls"}' 2>/dev/null || true)
    [[ -n $build ]] && break
    sleep 0.5
done
[[ $build == 1 ]] || fail "Prometheus never scraped the TLS endpoint: $(tail -5 "$WORK/prometheus.log")"
up=$(query 'up{job="gateway-tls"}')
[[ $up == 1 ]] || fail "up{job=gateway-tls} = $up"
pass "Prometheus scrapes over TLS with basic auth (the gateway-tls job's options): up = 1"
stop_prometheus
PROM_PID=
stop_gateway
pass "the gateway stops cleanly"
