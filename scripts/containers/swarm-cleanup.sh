#!/usr/bin/env bash
# Removes whatever make test-swarm left behind when it could not clean up
# itself (a test binary killed by its timeout runs no clean-up): every
# stack named acmeswarm* with its volumes and the images the test derived
# (acme/auth:<tag>-next, -broken); then, if the test had initialised this
# engine's swarm (its marker file is in the cache) and no other service runs
# in it, the swarm is left, with the docker_gwbridge network swarm init made.
# Other stacks, and a swarm the test found, are never touched. make
# test-swarm runs it after the test, whatever its outcome.
set -u
cache="${ACME_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/acme-platform}/docker"
marker="$cache/swarm-initialised-by-test"
[ "$(docker info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)" = active ] || { rm -f "$marker"; exit 0; }
label=com.docker.stack.namespace
stacks=$( {
  docker service ls --format "{{.Label \"$label\"}}"
  docker network ls --format "{{.Label \"$label\"}}"
  docker volume ls --format "{{.Label \"$label\"}}"
} 2>/dev/null | grep '^acmeswarm' | sort -u)
for s in $stacks; do
  echo "swarm-cleanup: removing leftovers of stack $s" >&2
  docker stack rm "$s" >/dev/null 2>&1
done
for s in $stacks; do
  f="label=$label=$s"
  for _ in $(seq 1 60); do
    [ -z "$(docker ps -q --filter "$f")$(docker network ls -q --filter "$f")" ] && break
    sleep 2
  done
  # the exited containers of its jobs: swarm (Engine 20.10) keeps them
  ids=$(docker ps -aq --filter "$f"); [ -n "$ids" ] && docker rm -f $ids >/dev/null
  ids=$(docker volume ls -q --filter "$f"); [ -n "$ids" ] && docker volume rm -f $ids >/dev/null
done
imgs=$(docker image ls --format '{{.Repository}}:{{.Tag}}' 'acme/auth' 2>/dev/null | grep -E ':src-[0-9a-f]+-(next|broken)$')
[ -n "$imgs" ] && docker image rm $imgs >/dev/null 2>&1
if [ -f "$marker" ] && [ -z "$(docker service ls -q 2>/dev/null)" ]; then
  echo "swarm-cleanup: leaving the swarm the test initialised" >&2
  if docker swarm leave --force >/dev/null; then
    grep -q '^bridge=new' "$marker" && docker network rm docker_gwbridge >/dev/null 2>&1
    rm -f "$marker"
  fi
fi
exit 0
