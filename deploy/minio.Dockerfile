# MinIO ships as source only; build the same pinned version the tests use
# (pkg/embedded.MinIOVersion).
FROM golang:1.26-bookworm AS build
ARG MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
RUN CGO_ENABLED=0 GOBIN=/out go install -trimpath github.com/minio/minio@${MINIO_VERSION}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/minio /minio
USER nonroot:nonroot
ENTRYPOINT ["/minio"]
