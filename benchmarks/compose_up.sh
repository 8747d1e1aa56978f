#!/usr/bin/env bash
# A real stack run (issues 14 and 16): build the image, bring the stack up, train CartPole to the threshold, end by
# itself, `down -v`. A benchmark, not CI: it needs a container engine and takes tens of minutes (an image with
# TensorFlow, then 100k agent steps on the CPU).
#
#   benchmarks/compose_up.sh [--topics nats|grpc] [--processors N] [--scale N] [--threshold 475] [--timeout-s 5400]
#                            [--project stepstream-bench]
#
# * --topics nats (default, issue 16): docker-compose.yml as it is: the NATS broker, --processors processors
#   (default 2) and --scale env clients (default 4) spread over them, the trainer on the broker's topics.
#   --topics grpc (issue 14): with docker-compose.grpc-topics.yml, one processor hosting the topics itself,
#   --scale env clients (default 2).
# * Where Docker is missing it installs Debian's packages (docker.io, docker-compose; root needed) and starts
#   dockerd. It uses `docker compose` (v2) when the plugin is there, else `docker-compose` (v1, 1.29 on Debian 12).
# * Docker Hub is not reachable on some machines: when `docker pull python:3.11-slim` fails, it builds a stand-in
#   `python:3.11-slim` locally (debootstrap of Debian 12, whose python3 is 3.11, with a venv at /usr/local so that
#   `python` and `pip` are on PATH as in the official image) and `docker import`s it. The Dockerfile users run is
#   unchanged. The stand-in trusts this host's CA bundle (/etc/ssl/certs/ca-certificates.crt, copied in), so that
#   `pip install` in the build passes an egress proxy that re-signs TLS, as the host's own pip does.
# * "trained": the run's mean reward (run_logs/training_status.json, last 100 episodes) reached --threshold;
#   "ended": `up` returned by itself, exit 0, before --timeout-s (the trainer at max_steps, then the env clients,
#   then the processors with --exit-when-finished, then the broker once idle). `down -v` always runs at the end.
#   Also from the services' logs: the trainer's stale and fresh trajectories ("stale_trajectories",
#   "trajectories"), the processors' stale drops before publishing are on their metrics only; and the count of
#   log lines with a Python traceback, a CancelledError or LiteRT's XNNPACK notice ("tracebacks", "xnnpack_lines").
# * Where no engine can run at all, it says so on stderr, prints the JSON line with "error", and exits 2: never a
#   silent skip. The JSON line is the last line of stdout; everything else goes to stderr or the log folder.
set -euo pipefail

THRESHOLD=475
TIMEOUT_S=5400
TOPICS=nats
PROCESSORS=2
SCALE=
PROJECT=stepstream-bench
BASE_IMAGE=python:3.11-slim
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threshold) THRESHOLD=$2; shift 2 ;;
    --timeout-s) TIMEOUT_S=$2; shift 2 ;;
    --topics) TOPICS=$2; shift 2 ;;
    --processors) PROCESSORS=$2; shift 2 ;;
    --scale) SCALE=$2; shift 2 ;;
    --project) PROJECT=$2; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "compose_up.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$TOPICS" in
  nats) FILES=(-f docker-compose.yml); SCALE=${SCALE:-4} ;;
  grpc) FILES=(-f docker-compose.yml -f docker-compose.grpc-topics.yml); SCALE=${SCALE:-2}; PROCESSORS=1 ;;
  *) echo "compose_up.sh: --topics is nats or grpc, not $TOPICS" >&2; exit 2 ;;
esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
LOG_DIR=$(mktemp -d /tmp/compose_up.XXXXXX)
STARTED=$(date +%s.%N)
BASE_SOURCE=present
COMPOSE=()

log() { echo "compose_up: $*" >&2; }

elapsed() { python3 -c "import time; print(round(time.time() - $STARTED, 1))"; }

# The one JSON line: result "trained" "ended" [error].
report() {
  python3 - "$1" "$2" "$(elapsed)" "${3:-}" "${COMPOSE[*]:-none}" "$BASE_SOURCE" "$LOG_DIR" "${MEAN_REWARD:-}" \
    "$TOPICS" "$PROCESSORS" "$SCALE" <<'EOF'
import json, re, sys
from pathlib import Path
trained, ended, seconds, error, compose, base, logs, mean, topics, processors, scale = sys.argv[1:12]
out = {"workload": "compose_up", "trained": trained == "true", "ended": ended == "true", "seconds": float(seconds),
       "topics": topics, "processors": int(processors), "env_clients": int(scale),
       "mean_reward": float(mean) if mean else None, "compose": compose, "base_image": base, "logs": logs}
up = Path(logs, "up.log")
if up.is_file():
    text = up.read_text(errors="replace")
    stopped = re.findall(r"trainer stopped \(\w+\) at step (\d+).*?(\d+) stale and (\d+) duplicate", text)
    if stopped:
        out["trainer_steps"], out["stale_trajectories"], out["duplicate_trajectories"] = map(int, stopped[-1])
    out["tracebacks"] = len(re.findall(r"Traceback \(most recent call last\)|CancelledError", text))
    out["xnnpack_lines"] = text.count("XNNPACK")
if error:
    out["error"] = error
print(json.dumps(out))
EOF
}

no_engine() {
  log "no container engine can run here: $1"
  report false false "no container engine: $1"
  exit 2
}

# -- the engine ---------------------------------------------------------------------------------------------------
if ! command -v docker >/dev/null || ! { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; }; then
  [[ $(id -u) -eq 0 ]] || no_engine "docker or compose missing, and installing Debian's docker.io needs root"
  log "installing docker.io and docker-compose from Debian's packages"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose; } \
    >"$LOG_DIR/apt.log" 2>&1 || no_engine "apt-get install docker.io docker-compose failed (see $LOG_DIR/apt.log)"
fi
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || no_engine "the Docker daemon is not running and dockerd is not installed"
  [[ $(id -u) -eq 0 ]] || no_engine "the Docker daemon is not running and starting dockerd needs root"
  log "starting dockerd (log: $LOG_DIR/dockerd.log)"
  nohup dockerd >"$LOG_DIR/dockerd.log" 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || no_engine "dockerd did not come up within 60 s: $(tail -n 3 "$LOG_DIR/dockerd.log" | tr '\n' ' ')"
fi
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
log "engine up; compose: ${COMPOSE[*]} ($("${COMPOSE[@]}" version --short 2>/dev/null || true))"

# -- the base image ---------------------------------------------------------------------------------------------
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  if docker pull "$BASE_IMAGE" >"$LOG_DIR/pull.log" 2>&1; then
    BASE_SOURCE=pulled
  else
    log "docker pull $BASE_IMAGE failed; building a stand-in with debootstrap (log: $LOG_DIR/debootstrap.log)"
    BASE_SOURCE=debootstrap
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >>"$LOG_DIR/apt.log" 2>&1 \
      || no_engine "no $BASE_IMAGE: the pull failed and debootstrap cannot be installed"
    ROOTFS=$(mktemp -d /tmp/compose_up_rootfs.XXXXXX)
    {
      debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOTFS" http://deb.debian.org/debian \
        && chroot "$ROOTFS" python3 -m venv /usr/local \
        && { [[ ! -f "$HOST_CA_BUNDLE" ]] || cp "$HOST_CA_BUNDLE" "$ROOTFS/etc/ssl/certs/ca-certificates.crt"; } \
        && chroot "$ROOTFS" env PIP_CERT=/etc/ssl/certs/ca-certificates.crt /usr/local/bin/pip install --quiet --upgrade pip \
        && chroot "$ROOTFS" apt-get clean \
        && tar -C "$ROOTFS" -c . | docker import \
          --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
          --change 'ENV LANG=C.UTF-8' --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
          --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' --change 'CMD ["python3"]' - "$BASE_IMAGE"
    } >"$LOG_DIR/debootstrap.log" 2>&1 || { rm -rf "$ROOTFS"; no_engine "building $BASE_IMAGE with debootstrap failed (see $LOG_DIR/debootstrap.log)"; }
    rm -rf "$ROOTFS"
  fi
fi

# -- the run ----------------------------------------------------------------------------------------------------
cd "$REPO"
compose() { "${COMPOSE[@]}" -p "$PROJECT" "${FILES[@]}" "$@"; }
cleanup() { compose down -v >"$LOG_DIR/down.log" 2>&1 || log "down -v failed (see $LOG_DIR/down.log)"; }
trap cleanup EXIT

log "building the image (log: $LOG_DIR/build.log)"
compose build >"$LOG_DIR/build.log" 2>&1 || { log "build failed"; report false false "image build failed (see $LOG_DIR/build.log)"; exit 1; }

log "topics $TOPICS: up --scale processor=$PROCESSORS --scale env=$SCALE (log: $LOG_DIR/up.log; bound ${TIMEOUT_S} s)"
UP_RC=0
timeout "$TIMEOUT_S" "${COMPOSE[@]}" -p "$PROJECT" "${FILES[@]}" up --no-build --scale "processor=$PROCESSORS" \
  --scale "env=$SCALE" >"$LOG_DIR/up.log" 2>&1 || UP_RC=$?
ENDED=false
[[ $UP_RC -eq 0 ]] && ENDED=true
[[ $UP_RC -eq 124 ]] && log "up did not return within ${TIMEOUT_S} s"

STATUS=$(compose run --rm --no-deps --entrypoint cat trainer-cartpole /results/ppo/run_logs/training_status.json 2>"$LOG_DIR/status.log" || true)
MEAN_REWARD=$(python3 -c 'import json,sys
try: d=json.loads(sys.argv[1])
except ValueError: sys.exit()
print(max((float(b.get("mean_reward") or 0) for b in d.values() if isinstance(b, dict)), default=""))' "$STATUS")
TRAINED=false
if [[ -n "$MEAN_REWARD" ]] && python3 -c "import sys; sys.exit(not float('$MEAN_REWARD') >= float('$THRESHOLD'))"; then TRAINED=true; fi
log "ended $ENDED (up exit $UP_RC), mean reward ${MEAN_REWARD:-none} (threshold $THRESHOLD)"
cleanup
trap - EXIT
report "$TRAINED" "$ENDED"
