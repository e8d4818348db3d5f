# The image each `python` tool session runs in (docker backend): the interpreter and the scientific
# stack. The toolfleet kernel is passed on the command line, so any image with `python3` works.
# Build with deploy/build-images.sh, which puts the host's CA bundle in the context as ca.crt
# (needed where PyPI is reached through a TLS-inspecting proxy). Sessions run as uid 65534 (numeric:
# the locally built base image has no passwd package) with a read-only root; no service runs in it,
# so there is nothing to health-check.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
COPY ca.crt /tmp/ca.crt
RUN export PIP_CERT=/tmp/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir numpy==2.4.6 matplotlib==3.11.2 pandas==3.1.1
# cloudpickle: session snapshots are pickled and loaded inside the sandbox (a layer of its own, so adding it kept
# the scientific stack's layer)
RUN PIP_CERT=/tmp/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 /opt/venv/bin/pip install --no-cache-dir cloudpickle==3.1.1

FROM ${BASE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin \
    MPLBACKEND=Agg MPLCONFIGDIR=/tmp/matplotlib HOME=/mnt/data \
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
USER 65534:65534
WORKDIR /mnt/data
HEALTHCHECK NONE
LABEL org.opencontainers.image.title="toolfleet python sandbox"
