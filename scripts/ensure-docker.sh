#!/usr/bin/env bash
# Make a Docker engine reachable on this machine: install docker.io (and runsc for the gVisor
# isolation) when missing, register runsc as a runtime, start dockerd when nothing answers.
# Idempotent; safe to run before every service start and test run.
set -euo pipefail

log=${ENVD_DOCKERD_LOG:-/var/log/envd-dockerd.log}

need_install=()
command -v dockerd >/dev/null 2>&1 || need_install+=(docker.io)
command -v runsc >/dev/null 2>&1 || need_install+=(runsc)
command -v debootstrap >/dev/null 2>&1 || need_install+=(debootstrap)
if [ ${#need_install[@]} -gt 0 ]; then
  echo "ensure-docker: installing ${need_install[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_install[@]}" >/dev/null
fi

# Engine settings envd relies on, merged into daemon.json:
# - live-restore: sandboxes (and so sessions) survive a dockerd restart;
# - runsc as a runtime for isolation "gvisor": ptrace works without KVM, gVisor's own network
#   stack is off (sandboxes have none), and host-backed unix sockets let the daemon reach the
#   runner's socket through the bind mount.
runsc_path=$(command -v runsc || true)
mkdir -p /etc/docker
changed=$(python3 - "$runsc_path" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
try:
    with open(path) as f:
        config = json.load(f)
except (FileNotFoundError, ValueError):
    config = {}
before = json.dumps(config, sort_keys=True)
config["live-restore"] = True
if sys.argv[1]:
    config.setdefault("runtimes", {})["runsc"] = {
        "path": sys.argv[1],
        "runtimeArgs": ["--platform=ptrace", "--network=none", "--host-uds=create"],
    }
if json.dumps(config, sort_keys=True) != before:
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    print("yes")
PY
)

if docker info >/dev/null 2>&1; then
  if [ -n "$changed" ]; then
    # Both settings are reloadable: no restart, running sandboxes stay up.
    pkill -HUP -x dockerd || true
    sleep 1
  fi
  exit 0
fi

echo "ensure-docker: starting dockerd (log: $log)" >&2
nohup dockerd >"$log" 2>&1 </dev/null &
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 0.5
done
echo "ensure-docker: dockerd did not come up; last log lines:" >&2
tail -n 20 "$log" >&2
exit 1
