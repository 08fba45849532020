#!/usr/bin/env bash
# Prepares this machine's Docker for the container tests (make test-compose,
# make test-scale), installing only what is missing:
#
#  - the Compose v2 CLI and buildx, built from their pinned Go modules
#    (scripts/tools/compose, scripts/tools/buildx) into the cache and
#    installed as the `docker compose` and `docker buildx` plugins;
#  - local stand-ins for the two base images the Dockerfiles name, for an
#    engine that cannot pull them (no registry here). The Dockerfiles keep
#    the real, pinned tags as the defaults of their GO_IMAGE and
#    RUNTIME_IMAGE build arguments; the tests pass the stand-ins instead:
#      acme-standin/golang:<host Go version>   this machine's Go toolchain
#                                              and busybox on an empty root
#      acme-standin/static:nonroot             CA certificates, tzdata and
#                                              a nonroot (65532) user, like
#                                              distroless/static's nonroot
#
# It prints the stand-in names as shell assignments on its last lines
# (GO_IMAGE=..., RUNTIME_IMAGE=...) for callers that want them.
# docs/deployment.md lists every substitution and why.
set -euo pipefail
cd "$(dirname "$0")/.."

COMPOSE_VERSION=v5.6.0 # scripts/tools/compose/go.mod
BUILDX_VERSION=v0.38.2 # scripts/tools/buildx/go.mod
cache="${ACME_CACHE_DIR:-$HOME/.cache/acme-platform}/docker"
plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
mkdir -p "$cache" "$plugins"

say() { printf 'dockerenv: %s\n' "$*" >&2; }

if ! command -v docker >/dev/null; then
  say "no docker CLI; install Docker Engine (Debian: sudo apt-get install -y docker.io)"
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  say "the Docker Engine does not answer (docker info); start it (sudo systemctl start docker) or join the docker group"
  exit 1
fi

# plugin NAME VERSION MODULE-DIR PACKAGE LDFLAGS: build once, install always.
plugin() {
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=$5
  local bin="$cache/docker-$name-$version"
  if [ ! -x "$bin" ]; then
    say "building docker $name $version from its Go module once into $bin (a few minutes the first time)"
    local t0=$SECONDS
    (cd "$dir" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
      go build -trimpath -ldflags "-s -w $ldflags" -o "$bin.tmp" "$pkg")
    mv "$bin.tmp" "$bin"
    say "built docker $name in $((SECONDS - t0)) s"
  fi
  if ! cmp -s "$bin" "$plugins/docker-$name"; then
    install -m 0755 "$bin" "$plugins/docker-$name"
  fi
}
plugin compose "$COMPOSE_VERSION" scripts/tools/compose github.com/docker/compose/v5/cmd \
  "-X github.com/docker/compose/v5/internal.Version=$COMPOSE_VERSION"
plugin buildx "$BUILDX_VERSION" scripts/tools/buildx github.com/docker/buildx/cmd/buildx \
  "-X github.com/docker/buildx/version.Version=$BUILDX_VERSION"
docker compose version >&2
docker buildx version >&2

# Debian packages the stand-ins are made of.
need=""
[ -x /bin/busybox ] || need="$need busybox-static"
[ -f /etc/ssl/certs/ca-certificates.crt ] || need="$need ca-certificates"
[ -d /usr/share/zoneinfo ] || need="$need tzdata"
if [ -n "$need" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing Debian packages; run: sudo apt-get update && sudo apt-get install -y$need"
    exit 1
  fi
  say "installing$need"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >&2
fi

goversion=$(go env GOVERSION) # go1.26.8
GO_IMAGE="acme-standin/golang:${goversion#go}"
RUNTIME_IMAGE="acme-standin/static:nonroot"

# rootfs DIR: the files both stand-ins share.
rootfs() {
  local root=$1
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/usr/share"
  chmod 1777 "$root/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  cp -r /usr/share/zoneinfo "$root/usr/share/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
  mkdir -p "$root/home/nonroot" "$root/root"
  chown 65532:65532 "$root/home/nonroot"
}

if ! docker image inspect "$RUNTIME_IMAGE" >/dev/null 2>&1; then
  say "making $RUNTIME_IMAGE (stands in for gcr.io/distroless/static-debian12:nonroot)"
  root=$(mktemp -d)
  rootfs "$root"
  tar -C "$root" --numeric-owner -c . | docker import \
    --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    - "$RUNTIME_IMAGE" >/dev/null
  rm -rf "$root"
fi

if ! docker image inspect "$GO_IMAGE" >/dev/null 2>&1; then
  say "making $GO_IMAGE (stands in for golang:${goversion#go}-bookworm) from $(go env GOROOT)"
  root=$(mktemp -d)
  rootfs "$root"
  mkdir -p "$root/bin" "$root/usr/local" "$root/go"
  cp /bin/busybox "$root/bin/busybox"
  for tool in $(/bin/busybox --list); do
    [ -e "$root/bin/$tool" ] || ln -s busybox "$root/bin/$tool"
  done
  cp -a "$(go env GOROOT)" "$root/usr/local/go"
  tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin GOPATH=/go GOTOOLCHAIN=local SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'WORKDIR /go' \
    - "$GO_IMAGE" >/dev/null
  rm -rf "$root"
fi

echo "GO_IMAGE=$GO_IMAGE"
echo "RUNTIME_IMAGE=$RUNTIME_IMAGE"
