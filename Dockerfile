# kubelua: built on Debian 12, run from scratch as user 65532 with only the
# binary, the libraries it links, the CA bundle and the examples (about 22 MB).
#   docker build -t kubelua:latest .      (pulls debian:12)
#   scripts/image                          (buildah, from a debootstrap base)
# The image's entrypoint is the binary; its default command is the demo:
#   kubelua:latest version | sim --listen :6443 | run /scripts/controller.lua
ARG BASE=debian:12
FROM ${BASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config luajit libluajit-5.1-dev libev-dev \
      libcurl4-openssl-dev libyaml-dev libssl-dev libzstd-dev libnghttp2-dev \
      ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The stripped binary goes into the image; its debug information stays here
# (/build/kubelua.debug, linked by --add-gnu-debuglink).
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build /build -j "$(nproc)" --target kubelua \
 && objcopy --only-keep-debug /build/kubelua /build/kubelua.debug \
 && mkdir -p /rootfs/usr/bin /rootfs/etc/ssl/certs /rootfs/home/kubelua \
 && strip --strip-unneeded -o /rootfs/usr/bin/kubelua /build/kubelua \
 && objcopy --add-gnu-debuglink=/build/kubelua.debug /rootfs/usr/bin/kubelua
# The root filesystem: every library ldd names (and the loader) at the path
# it names, the CA bundle libcurl reads by default, and the user 65532.
RUN ldd /build/kubelua | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' \
      | while read -r lib; do \
          mkdir -p "/rootfs${lib%/*}" && cp -L "$lib" "/rootfs$lib"; \
        done \
 && cp -L /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nkubelua:x:65532:65532:kubelua:/home/kubelua:/sbin/nologin\n' \
      >/rootfs/etc/passwd \
 && printf 'root:x:0:\nkubelua:x:65532:\n' >/rootfs/etc/group \
 && printf 'hosts: files dns\n' >/rootfs/etc/nsswitch.conf \
 && chown 65532:65532 /rootfs/home/kubelua

FROM scratch
COPY --from=build /rootfs /
COPY examples /examples
USER 65532:65532
# The Lua library is inside the binary: nothing else is needed, and nothing
# is written (a read-only root filesystem is fine). In a cluster, give your
# script (deploy/base mounts it from a ConfigMap at /scripts); the service
# account is found without flags.
ENTRYPOINT ["/usr/bin/kubelua"]
CMD ["run", "--sim", "/examples/mirror/controller.lua"]
