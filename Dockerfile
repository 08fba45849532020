# One image pattern for every service: multi-stage, static binary, distroless
# non-root runtime with no shell. Build with --build-arg SERVICE=gateway|services/auth|...
FROM golang:1.26-bookworm AS build
ARG SERVICE
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/app ./${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /app
USER nonroot:nonroot
ENTRYPOINT ["/app"]
