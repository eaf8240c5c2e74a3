# syntax=docker/dockerfile:1
#
# npu-plugin image: one Python daemon serving the Device Plugin API and/or the DRA kubelet plugin.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg REVISION=$(git rev-parse HEAD) --build-arg CREATED=$(date -u +%FT%TZ) \
#     -t REGISTRY/npu-plugin:0.1.0 .
#
# The image runs as root and the DaemonSets run it privileged; docs/deploy.md explains why that
# cannot be avoided for this daemon. It ships no Ascend driver bits: DCMI (libdcmi.so) and npu-smi
# come from the host through the DaemonSet's read-only mounts, so one image fits every driver.

# Pin the patch release (and, for a release build, the digest: python:3.11.14-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: every wheel the daemon needs, ours included --------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README* LICENSE* ./
COPY npu_plugin ./npu_plugin
# --prefer-binary: grpcio, protobuf and friends come as manylinux wheels for amd64 and arm64, so
# this stage needs no compiler either; a dependency without a wheel fails here, loudly.
RUN pip wheel --prefer-binary . -w /wheels

# ---- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="npu-plugin" \
      org.opencontainers.image.description="Kubernetes Device Plugin (v1beta1) and DRA kubelet plugin for Huawei Ascend NPUs, sharing one device inventory" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="docs/deploy.md, docs/operations.md" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# LD_LIBRARY_PATH: where the host's driver libraries appear once the DaemonSet mounts
# /usr/local/Ascend/driver and /usr/local/dcmi read-only; the dcmi backend dlopens libdcmi.so from
# there and the host's npu-smi needs the rest. The directories are empty in the image itself.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:/usr/local/dcmi
# Wheels only, from the build stage, no index: nothing is compiled or fetched in this stage.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels npu-plugin \
    && npu-plugin version
# Root on purpose (docs/deploy.md): /dev/davinci* and the kubelet's socket directories are root's.
USER 0
ENTRYPOINT ["npu-plugin"]
CMD ["serve"]
