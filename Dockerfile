# syntax=docker/dockerfile:1
# The eventgate gateway image: the gateway binary and the embedded
# ClickHouse engine (libchdb.so), running as a non-root user on a read-only
# root filesystem. Writable paths are volumes: the data directory
# (/var/lib/eventgate) and /tmp.
#
#   docker build -t eventgate:dev .
#   docker run --read-only --tmpfs /tmp -v eventgate-data:/var/lib/eventgate \
#     -p 8080:8080 -p 9090:9090 eventgate:dev --auth-tokens-file /etc/eventgate/tokens.yaml
#
# Images are pinned by tag; pin them by digest in your own registry mirror
# for reproducible builds.

# The engine library: scripts/fetch-chdb.sh downloads the pinned npm package
# and refuses it unless its sha256 matches the one pinned in the script.
FROM node:22-bookworm-slim AS chdb
WORKDIR /src
COPY scripts/fetch-chdb.sh scripts/fetch-chdb.sh
RUN EVENTGATE_CHDB_LIB=/out/libchdb.so bash scripts/fetch-chdb.sh

# The gateway: cgo (the engine is loaded with dlopen), against the same
# glibc generation as the runtime image.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath \
      -ldflags "-s -w -X github.com/eventgate/eventgate/internal/gateway.Version=${VERSION}" \
      -o /out/gateway ./cmd/gateway \
 && mkdir -p /out/data

# Runtime: glibc and libstdc++ for the engine, nothing else; uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=chdb /out/libchdb.so /usr/lib/eventgate/libchdb.so
COPY --from=build /out/gateway /usr/bin/eventgate-gateway
COPY --from=build --chown=65532:65532 /out/data /var/lib/eventgate
ENV EVENTGATE_CHDB_LIB=/usr/lib/eventgate/libchdb.so \
    EVENTGATE_DATA_DIR=/var/lib/eventgate \
    EVENTGATE_LOG_FORMAT=json
USER 65532:65532
VOLUME ["/var/lib/eventgate"]
EXPOSE 8080 9090
ENTRYPOINT ["/usr/bin/eventgate-gateway"]
