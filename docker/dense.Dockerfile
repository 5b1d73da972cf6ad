# syntax=docker/dockerfile:1
# moesplit-dense: the dense service (attention, routers, shared experts, KV
# cache, the public gRPC and OpenAI HTTP APIs), built with the CUDA backend.
#
#   docker build -f docker/dense.Dockerfile -t moesplit-dense:0.1.0 .
#   docker run --gpus all -p 127.0.0.1:8080:8080 -v /srv/models:/models:ro moesplit-dense:0.1.0 \
#       --model /models/model.gguf --experts grpc://worker:50061 --http 0.0.0.0:8080
#
# The CUDA toolkit (nvcc) comes from NVIDIA's devel image, and from it only
# the CUDA runtime library the binary links (libcudart; the dense service
# loads no cuBLAS); everything else is Debian 12, as in
# scripts/install-deps.sh. The model is never part of the image: mount it at
# /models.
#
# Base images: tags by default. To pin them, pass the digests you verified
# (`docker buildx imagetools inspect debian:12-slim`), e.g.
#   --build-arg DEBIAN_SLIM_DIGEST=sha256:... --build-arg DEBIAN_DIGEST=sha256:...
#   --build-arg CUDA_DEVEL_DIGEST=sha256:...
ARG CUDA_VERSION=13.0.1
ARG CUDA_DEVEL_DIGEST=""
ARG DEBIAN_DIGEST=""
ARG DEBIAN_SLIM_DIGEST=""

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04${CUDA_DEVEL_DIGEST:+@}${CUDA_DEVEL_DIGEST} AS cuda-devel

# ---- build: Debian 12 toolchain + nvcc ------------------------------------
FROM debian:12${DEBIAN_DIGEST:+@}${DEBIAN_DIGEST} AS build
COPY --from=cuda-devel /usr/local/cuda /usr/local/cuda
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN MOESPLIT_BUILD_ONLY=1 bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOESPLIT_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
 && cmake --build /build --target moesplit-dense moesplit \
 && strip --strip-debug /build/bin/moesplit-dense /build/bin/moesplit

# ---- runtime: slim Debian 12 + libcudart ------------------------------------
FROM debian:12-slim${DEBIAN_SLIM_DIGEST:+@}${DEBIAN_SLIM_DIGEST} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libnuma1 libpcre2-8-0 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The only CUDA library moesplit-dense links (tests/deploy/dockerfile_check.py
# compares this with the binary's NEEDED entries); the driver's libcuda comes
# from the NVIDIA container runtime.
COPY --from=cuda-devel /usr/local/cuda/lib64/libcudart.so.13* /usr/local/cuda/lib64/
RUN echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig \
 && groupadd --system --gid 10001 moesplit \
 && useradd --system --uid 10001 --gid moesplit --home-dir /nonexistent --shell /usr/sbin/nologin moesplit \
 && mkdir -p /models && chown moesplit:moesplit /models
COPY --from=build /build/bin/moesplit-dense /build/bin/moesplit /usr/local/bin/
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    MOESPLIT_GRPC_PORT=50051
VOLUME ["/models"]
USER 10001:10001
# 50051: gRPC Inference API (+ grpc.health.v1), 8080: OpenAI HTTP API
# (GET /health, /health/live), 9400: Prometheus /metrics.
EXPOSE 50051 8080 9400
# gRPC health "" = readiness. Serving gRPC on another port: set
# MOESPLIT_GRPC_PORT to it (docker run -e ...).
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["/bin/sh", "-c", "exec moesplit health --addr 127.0.0.1:${MOESPLIT_GRPC_PORT}"]
ENTRYPOINT ["moesplit-dense"]
CMD ["--model", "/models/model.gguf", "--grpc", "0.0.0.0:50051", "--http", "0.0.0.0:8080", "--metrics", "0.0.0.0:9400"]
