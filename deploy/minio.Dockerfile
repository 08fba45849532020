# MinIO ships as source only; build the same pinned version the tests use
# (pkg/embedded.MinIOVersion; scripts/composecheck checks they agree), the
# same way (go install, CGO off), into a distroless non-root image.
# Build context: the repository root (for the healthcheck probe and
# deploy/s3setup).

# The base images, pinned. A machine that cannot pull them builds with
# local stand-ins passed as build arguments (scripts/dockerenv.sh,
# docs/deployment.md); these defaults are what users build with.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
ARG MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOBIN=/out GOWORK=off GOFLAGS=-buildvcs=false \
    go install -trimpath github.com/minio/minio@${MINIO_VERSION}
# The healthcheck: the image has no shell, curl or wget.
WORKDIR /src
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    cd pkg && CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w" -o /out/probe ./healthcheck/cmd/probe
# The one-shot setup job (deploy/s3setup): the files service's bucket, its
# MinIO user and that user's policy; compose runs this image with
# entrypoint ["/s3setup"]. Its go.mod replaces the shared module with ../../pkg.
COPY deploy/s3setup/ deploy/s3setup/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    cd deploy/s3setup && CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w" -o /out/s3setup .
# The data directory, owned by nonroot so a fresh named volume inherits it.
RUN mkdir -p /out/data

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/minio /minio
COPY --from=build /out/probe /probe
COPY --from=build /out/s3setup /s3setup
COPY --from=build --chown=65532:65532 /out/data /data
USER nonroot:nonroot
EXPOSE 9000
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/probe", "http://127.0.0.1:9000/minio/health/ready"]
ENTRYPOINT ["/minio"]
CMD ["server", "--address", ":9000", "/data"]
