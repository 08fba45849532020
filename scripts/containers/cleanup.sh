#!/usr/bin/env bash
# Removes whatever a container test left behind when it could not clean up
# itself (a test binary killed by its timeout runs no clean-up): every
# container, network and volume of compose projects named acmetest*.
# make test-compose, make test-scale and make test-ha run it after the test, whatever
# its outcome. Other projects are never touched.
set -u
projects=$( {
  docker ps -a --format '{{.Label "com.docker.compose.project"}}'
  docker network ls --format '{{.Label "com.docker.compose.project"}}'
  docker volume ls --format '{{.Label "com.docker.compose.project"}}'
} 2>/dev/null | grep '^acmetest' | sort -u)
for p in $projects; do
  echo "cleanup: removing leftovers of compose project $p" >&2
  f="label=com.docker.compose.project=$p"
  ids=$(docker ps -aq --filter "$f"); [ -n "$ids" ] && docker rm -f $ids >/dev/null
  ids=$(docker network ls -q --filter "$f"); [ -n "$ids" ] && docker network rm $ids >/dev/null
  ids=$(docker volume ls -q --filter "$f"); [ -n "$ids" ] && docker volume rm -f $ids >/dev/null
done
exit 0
