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

# gVisor as an extra runtime; ptrace works without KVM.
if [ ! -f /etc/docker/daemon.json ] && command -v runsc >/dev/null 2>&1; then
  mkdir -p /etc/docker
  cat >/etc/docker/daemon.json <<JSON
{
  "runtimes": {
    "runsc": {"path": "$(command -v runsc)", "runtimeArgs": ["--platform=ptrace"]}
  }
}
JSON
fi

if docker info >/dev/null 2>&1; then
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
