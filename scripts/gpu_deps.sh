#!/usr/bin/env bash
# On the development machine: downloads the Debian packages the build needs and the GPU machine
# lacks (headers and static libraries; it has no -dev packages and no network) into .device-deps/,
# which git ignores and the GPU round carries along with .deps/qwen35-tokenizer. libspdlog1.10 is
# there only because spdlog's CMake config checks for its library; the build uses spdlog header-only.
# cpp-httplib (and its libbrotli1) is a shared library: the binaries find it in the unpacked sysroot
# through their build RPATH. The GPU round builds the server only when its `serve` benchmark runs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device-deps
cd .device-deps
apt-get download nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libgtest-dev \
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libssl-dev libssl3 libcpp-httplib-dev libcpp-httplib0.11 libbrotli1 \
  2>&1 | grep -v "unsandboxed" || true
ls
