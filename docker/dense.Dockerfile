# syntax=docker/dockerfile:1
# moesplit-dense: the dense service (attention, routers, shared experts, KV
# cache, the public API), built with the CUDA backend.
#
#   docker build -f docker/dense.Dockerfile -t moesplit-dense .
#   docker run --gpus all -v /srv/models:/models:ro moesplit-dense \
#       --model /models/model.gguf --experts grpc://worker:50061
#
# The CUDA toolkit (nvcc) and the CUDA runtime library come from NVIDIA's
# images; everything else is Debian 12, as in scripts/install-deps.sh. The
# model is never part of the image: mount it at /models.
ARG CUDA_VERSION=13.0.1

FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04 AS cuda-devel
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu22.04 AS cuda-runtime

# ---- build: Debian 12 toolchain + nvcc ------------------------------------
FROM debian:12 AS build
COPY --from=cuda-devel /usr/local/cuda /usr/local/cuda
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN MOESPLIT_BUILD_ONLY=1 bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOESPLIT_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
 && cmake --build /build --target moesplit-dense moesplit \
 && strip --strip-debug /build/bin/moesplit-dense /build/bin/moesplit

# ---- runtime: slim Debian 12 + the CUDA runtime library -------------------
FROM debian:12-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libnuma1 libpcre2-8-0 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=cuda-runtime /usr/local/cuda/lib64/ /usr/local/cuda/lib64/
RUN echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig \
 && groupadd --system --gid 10001 moesplit \
 && useradd --system --uid 10001 --gid moesplit --home-dir /nonexistent --shell /usr/sbin/nologin moesplit \
 && mkdir -p /models && chown moesplit:moesplit /models
COPY --from=build /build/bin/moesplit-dense /build/bin/moesplit /usr/local/bin/
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME ["/models"]
USER 10001:10001
# 50051: gRPC Inference API (+ grpc.health.v1), 9400: Prometheus /metrics.
EXPOSE 50051 9400
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
  CMD ["moesplit", "health", "--addr", "127.0.0.1:50051"]
ENTRYPOINT ["moesplit-dense"]
CMD ["--model", "/models/model.gguf", "--grpc", "0.0.0.0:50051", "--metrics", "0.0.0.0:9400"]
