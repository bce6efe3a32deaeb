#!/usr/bin/env bash
# Installs every Debian package weft needs to build, test and benchmark.
# Idempotent: packages already present are not reinstalled; safe to run again.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libdnnl-dev            # oneDNN: CPU kernels
  libhdf5-dev hdf5-tools # model and dataset files
  zlib1g-dev             # .keras (zip) archives
  libjansson-dev         # JSON: configs, TF_CONFIG, graphs, HTTP bodies
  libzmq3-dev            # parameter-server transport
  libsodium-dev          # the NCCL rendezvous: sealed id, HMAC proofs
  openmpi-bin libopenmpi-dev # allreduce on CPUs, mpirun
  libmicrohttpd-dev      # weft-serve HTTP
  libgnutls28-dev        # weft-serve gRPC over TLS (HTTPS goes through libmicrohttpd)
  libjpeg-dev            # JPEG decoding (libjpeg-turbo)
  libpng-dev             # PNG decoding (weft-serve)
  libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler zlib1g-dev # weft-serve gRPC (HTTP/2, protobuf-c)
  clang libclang-rt-14-dev # libFuzzer targets and sanitizers
  curl python3 openssl   # openssl: the TLS test makes its certificate
  zlib1g-dev libb64-0d prometheus # weft-serve gzip/deflate; perf_analyzer (client venv) needs libb64; promtool
  iproute2 python3-venv  # tests/k8s: network namespaces as pods; kubernetes-validate in a venv
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
