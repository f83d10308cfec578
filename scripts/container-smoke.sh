#!/usr/bin/env bash
# Container smoke test (issue 27): builds the image from this checkout with the project's own Dockerfile,
# runs it on a real Redis with the environment the README documents, and checks what an operator relies
# on: the HEALTHCHECK, a non-root process, the CLI inside the image, a live chat through the simulator
# debited exactly, and SIGTERM → exit 0. Output is TAP (one `ok`/`not ok` per check), so
# test/deploy/container-image.test.ts runs it as a subtest and tap counts every check.
#   bash scripts/container-smoke.sh            (needs podman: bash ../shared/tools/container-setup.sh)
# Without podman it prints a TAP skip, unless CI=true: CI must not pass without building the image.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

N=0
FAILED=0
ok() {
  N=$((N + 1))
  echo "ok $N - $1"
}
not_ok() {
  N=$((N + 1))
  FAILED=$((FAILED + 1))
  echo "not ok $N - $1"
  [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/  # /' | tail -n 40
  return 0
}
# check DESCRIPTION CONDITION-COMMAND…: one TAP line from a command's exit status.
check() {
  local desc=$1 out
  shift
  if out=$("$@" 2>&1); then ok "$desc"; else not_ok "$desc" "$out"; fi
}
# Like check, retried for up to $1 seconds: for what follows a moment after the step before it.
check_within() {
  local secs=$1 desc=$2 out
  shift 2
  local until=$((SECONDS + secs))
  while ! out=$("$@" 2>&1); do
    if [ "$SECONDS" -ge "$until" ]; then
      not_ok "$desc" "$out"
      return 0
    fi
    sleep 0.2
  done
  ok "$desc"
}
finish() {
  echo "1..$N"
  [ "$FAILED" -eq 0 ]
  exit $?
}
# A fatal failure: the remaining checks cannot run.
bail() {
  not_ok "$1" "${2:-}"
  [ -n "${CTR:-}" ] && podman logs "$CTR" 2>/dev/null | tail -n 30 | sed 's/^/  # /'
  finish
}

if ! command -v podman >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    bail "podman is installed (run: bash ../shared/tools/container-setup.sh)"
  fi
  echo "1..0 # SKIP podman is not installed (bash ../shared/tools/container-setup.sh sets it up)"
  exit 0
fi

TAG="localhost/tollgate-smoke:$$"
CTR="tollgate-smoke-$$"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  podman rm -f -t 0 "$CTR" >/dev/null 2>&1
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  podman rmi -f "$TAG" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
# json FILE EXPR: evaluates a JS expression over the parsed file (`j`), prints the result.
json() { node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")); console.log(eval(process.argv[2]))' "$1" "$2"; }

# --- Build ------------------------------------------------------------------------------------------
# --format docker keeps HEALTHCHECK (OCI drops it); --pull=never uses the locally built node:26-slim.
started=$SECONDS
if out=$(podman build --format docker --pull=never --network=host -t "$TAG" . 2>&1); then
  ok "podman build of the Dockerfile ($((SECONDS - started)) s)"
else
  bail "podman build of the Dockerfile" "$out"
fi
check "the image runs as a non-root user" test "$(podman image inspect --format '{{.Config.User}}' "$TAG")" = node
check "the image declares a HEALTHCHECK" grep -q healthcheck.ts <<<"$(podman image inspect --format '{{json .Config.Healthcheck}}' "$TAG")"

# --- Redis, the simulator, the container --------------------------------------------------------------
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --maxmemory-policy noeviction >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
node src/simulator/cli.ts --port 0 >"$WORK/sim.url" 2>"$WORK/sim.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/sim.url" ] && redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
SIM=$(head -n 1 "$WORK/sim.url")
[ -n "$SIM" ] || bail "the simulator started" "$(cat "$WORK/sim.log")"

PORT=$(free_port)
ADMIN_PORT=$(free_port)
TOKEN=$(head -c 32 /dev/urandom | base64)
# The README's container variables: REDIS_URL, TOLLGATE_ADMIN_TOKEN, VLLM_URL_1/2 (host network: the
# simulator and Redis are on this machine's loopback), PORT/ADMIN_PORT moved to free ports.
if out=$(podman run -d --name "$CTR" --network=host \
  -e REDIS_URL="redis://127.0.0.1:$RPORT" -e TOLLGATE_ADMIN_TOKEN="$TOKEN" \
  -e VLLM_URL_1="$SIM" -e VLLM_URL_2="$SIM" -e PORT="$PORT" -e ADMIN_PORT="$ADMIN_PORT" "$TAG" 2>&1); then
  ok "podman run with the README's environment"
else
  bail "podman run with the README's environment" "$out"
fi

# The HEALTHCHECK itself (scripts/healthcheck.ts inside the container) decides readiness.
healthy=""
started=$SECONDS
for _ in $(seq 120); do
  if podman healthcheck run "$CTR" >/dev/null 2>&1; then
    healthy=yes
    break
  fi
  [ "$(podman inspect --format '{{.State.Running}}' "$CTR" 2>/dev/null)" = true ] || break
  sleep 0.5
done
[ -n "$healthy" ] || bail "the HEALTHCHECK passes once the gateway listens"
ok "the HEALTHCHECK passes once the gateway listens ($((SECONDS - started)) s)"
check "podman reports the container healthy" test "$(podman inspect --format '{{.State.Health.Status}}' "$CTR")" = healthy
check "the gateway process is not root" test "$(podman exec "$CTR" id -u)" != 0
# The boot line is written just after the ports listen, so the HEALTHCHECK can pass a moment before it
# reaches `podman logs` (CI saw the check run first once): wait for it, and show the log if it never comes.
logged() {
  local logs
  logs=$(podman logs "$CTR" 2>&1)
  grep -q "$1" <<<"$logs" || { printf 'no %s in the container log:\n%s\n' "$1" "$(tail -n 20 <<<"$logs")"; return 1; }
}
check_within 10 "the boot log line names the Redis store" logged '"store":"redis"'

# --- The CLI inside the image -----------------------------------------------------------------------
cli() { podman exec "$CTR" node bin/tollgate.js "$@"; }
if cli keys create --account smoke --env live --name smoke --json >"$WORK/key.json" 2>"$WORK/cli.err"; then
  ok "tollgate keys create inside the image"
else
  bail "tollgate keys create inside the image" "$(cat "$WORK/key.json" "$WORK/cli.err")"
fi
KEY=$(json "$WORK/key.json" j.key)
check "tollgate credits grant inside the image" cli credits grant smoke --micros 1000000 --idempotency-key smoke-1

# --- A live chat, debited exactly ---------------------------------------------------------------------
# The baked config prices llama-3.1-8b at 0.10 / 0.40 credits per 1M tokens (micro-credits per token):
# cost = ceil((prompt × 100000 + completion × 400000) / 1e6) micro-credits (src/credit/pricing.ts).
if ! node --input-type=module -e '
  import { writeFileSync } from "node:fs";
  const [url, key, out] = process.argv.slice(1);
  const res = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: "Bearer " + key, "content-type": "application/json" },
    body: JSON.stringify({ model: "llama-3.1-8b", messages: [{ role: "user", content: "hello from the container smoke test" }], max_tokens: 40 }),
  });
  const body = await res.json();
  writeFileSync(out, JSON.stringify({ status: res.status, id: res.headers.get("x-request-id"), body }));
' "http://127.0.0.1:$PORT" "$KEY" "$WORK/chat.json" 2>"$WORK/chat.err"; then
  bail "a chat completion through the container" "$(cat "$WORK/chat.err")"
fi
check "a chat completion through the container answers 200" test "$(json "$WORK/chat.json" j.status)" = 200
EXPECTED=$(json "$WORK/chat.json" 'Math.ceil((j.body.usage.prompt_tokens * 100000 + j.body.usage.completion_tokens * 400000) / 1e6)')
REQ=$(json "$WORK/chat.json" j.id)
check "the chat used tokens (cost $EXPECTED micro-credits)" test "$EXPECTED" -gt 0
debited=""
for _ in $(seq 20); do
  cli credits ledger smoke --json >"$WORK/ledger.json" 2>/dev/null &&
    debited=$(json "$WORK/ledger.json" "(j.entries.find((e) => e.kind === 'debit' && e.request_id === '$REQ') || {}).amount_micros") &&
    [ "$debited" != undefined ] && break
  sleep 0.25
done
check "the ledger debits exactly the usage's cost ($debited = -$EXPECTED)" test "$debited" = "-$EXPECTED"
cli credits show smoke --json >"$WORK/balance.json" 2>&1
check "the balance is the grant minus the cost, nothing held" \
  test "$(json "$WORK/balance.json" 'j.balance_micros + "/" + j.held_micros')" = "$((1000000 - EXPECTED))/0"

# --- SIGTERM → the in-flight stream drains, a clean stop, exit 0 --------------------------------------
# A stream of 30 tokens 100 ms apart (the simulator's `sim` steering) is open when SIGTERM arrives: the
# drain lets it finish with [DONE] (drain_seconds 30 in the baked config), then the process exits 0.
node --input-type=module -e '
  import { writeFileSync } from "node:fs";
  const [url, key, out, started] = process.argv.slice(1);
  const res = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: "Bearer " + key, "content-type": "application/json" },
    body: JSON.stringify({ model: "llama-3.1-8b", stream: true, messages: [{ role: "user", content: "drain me" }], sim: { tokens: 30, delay_ms: 100 } }),
  });
  let text = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    if (!text) writeFileSync(started, "1");
    text += dec.decode(chunk, { stream: true });
  }
  writeFileSync(out, JSON.stringify({ status: res.status, done: text.includes("data: [DONE]"), chunks: (text.match(/"content":"/g) || []).length }));
' "http://127.0.0.1:$PORT" "$KEY" "$WORK/stream.json" "$WORK/stream.started" 2>"$WORK/stream.err" &
STREAM=$!
PIDS+=($STREAM)
for _ in $(seq 100); do [ -s "$WORK/stream.started" ] && break; sleep 0.05; done
started=$SECONDS
podman stop -t 40 "$CTR" >/dev/null 2>&1
wait "$STREAM" 2>/dev/null
check "SIGTERM stops the container with exit code 0 ($((SECONDS - started)) s)" test "$(podman inspect --format '{{.State.ExitCode}}' "$CTR")" = 0
check "the stream open at SIGTERM finished with [DONE]" test "$(json "$WORK/stream.json" 'j.status + "/" + j.done' 2>&1)" = "200/true"
check "the gateway logged its drain and stop" logged '"msg":"stopped"'

finish
