# syntax=docker/dockerfile:1
# moesplit-expert-worker: a shard of the routed experts in pinned RAM (CPU
# only), served over gRPC and/or shared memory.
#
#   docker build -f docker/expert-worker.Dockerfile -t moesplit-expert-worker:0.1.0 .
#   docker run --ulimit memlock=-1 -v /srv/models:/models:ro moesplit-expert-worker:0.1.0 \
#       --model /models/model.gguf --shard layers=0-23 --listen-grpc 0.0.0.0:50061
#
# The model is never part of the image: mount it at /models. Base images:
# tags by default; pin them with --build-arg DEBIAN_DIGEST=sha256:... and
# --build-arg DEBIAN_SLIM_DIGEST=sha256:... (digests you verified).
ARG DEBIAN_DIGEST=""
ARG DEBIAN_SLIM_DIGEST=""

# ---- build: Debian 12 toolchain, no CUDA -----------------------------------
FROM debian:12${DEBIAN_DIGEST:+@}${DEBIAN_DIGEST} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN MOESPLIT_BUILD_ONLY=1 bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOESPLIT_CUDA=OFF \
 && cmake --build /build --target moesplit-expert-worker moesplit \
 && strip --strip-debug /build/bin/moesplit-expert-worker /build/bin/moesplit

# ---- runtime: slim Debian 12 ------------------------------------------------
FROM debian:12-slim${DEBIAN_SLIM_DIGEST:+@}${DEBIAN_SLIM_DIGEST} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libnuma1 libpcre2-8-0 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 moesplit \
 && useradd --system --uid 10001 --gid moesplit --home-dir /nonexistent --shell /usr/sbin/nologin moesplit \
 && mkdir -p /models && chown moesplit:moesplit /models
COPY --from=build /build/bin/moesplit-expert-worker /build/bin/moesplit /usr/local/bin/
ENV MOESPLIT_GRPC_PORT=50061
VOLUME ["/models"]
# Same uid as the dense image: shared-memory segments are mode 0600.
USER 10001:10001
# 50061: gRPC ExpertWorker (+ grpc.health.v1), 9401: Prometheus /metrics.
EXPOSE 50061 9401
# Serving gRPC on another port: set MOESPLIT_GRPC_PORT to it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["/bin/sh", "-c", "exec moesplit health --addr 127.0.0.1:${MOESPLIT_GRPC_PORT}"]
ENTRYPOINT ["moesplit-expert-worker"]
CMD ["--model", "/models/model.gguf", "--listen-grpc", "0.0.0.0:50061", "--metrics", "0.0.0.0:9401"]
