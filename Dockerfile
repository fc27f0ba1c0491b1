# kubelua: build on Debian 12, run as a non-root user on a slim image.
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config luajit libluajit-5.1-dev libev-dev \
      libcurl4-openssl-dev libyaml-dev libssl-dev libzstd-dev libnghttp2-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKL_WERROR=OFF \
 && cmake --build /build -j "$(nproc)" --target kubelua

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libluajit-5.1-2 libev4 libcurl4 libyaml-0-2 libzstd1 libnghttp2-14 \
      ca-certificates lua-cjson \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin kubelua
COPY --from=build /build/kubelua /usr/local/bin/kubelua
COPY examples /examples
USER 65532:65532
# The Lua library is inside the binary: nothing else is needed, and nothing
# is written (a read-only root filesystem is fine).
ENTRYPOINT ["/usr/local/bin/kubelua", "run"]
# The demo against the built-in simulator. In a cluster, give your script
# (deploy/kubelua.yaml mounts it from a ConfigMap); the service account is
# found without flags.
CMD ["--sim", "/examples/mirror/controller.lua"]
