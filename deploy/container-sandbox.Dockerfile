# The image each `container` tool session runs in (docker backend). What an image needs to work
# there: `python3` (the toolfleet agent is passed on the command line and uses only the standard
# library), `sh` with `env` and `pwd` (coreutils) for shell state, and a passwd entry for the
# default user (uid 1000 here). Everything else is for the model: bash, git, pip, procps, ...
# Build with deploy/build-images.sh (it tags a debootstrap base as python:3.11-slim-bookworm where
# no registry is reachable). minbase has no useradd, so the user is written into /etc/passwd.
# Login shells (`bash -lc`, what models send) keep ~/.local/bin on PATH (pip install --user).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends bash coreutils procps git python3-pip curl ca-certificates \
      less file findutils grep sed gawk xz-utils unzip >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && echo 'sandbox:x:1000:1000:sandbox:/workspace:/bin/bash' >>/etc/passwd \
 && echo 'sandbox:x:1000:' >>/etc/group \
 && echo 'case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$HOME/.local/bin:$PATH" ;; esac' \
      >/etc/profile.d/toolfleet-local-bin.sh \
 && mkdir -p /workspace && chown 1000:1000 /workspace
ENV PATH=/workspace/.local/bin:/usr/local/bin:/usr/bin:/bin HOME=/workspace LANG=C.UTF-8 \
    PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONDONTWRITEBYTECODE=1
USER 1000:1000
WORKDIR /workspace
HEALTHCHECK NONE
LABEL org.opencontainers.image.title="toolfleet container sandbox"
