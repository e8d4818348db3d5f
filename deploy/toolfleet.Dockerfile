# One image for every toolfleet service; the compose file picks the service by command
# (`toolfleet python`, `toolfleet gateway`, ...). Build: deploy/build-images.sh (context: repo root,
# with the host's CA bundle copied in as deploy/.ca.crt for TLS-inspecting proxies).
FROM python:3.11-slim-bookworm
COPY deploy/.ca.crt /tmp/ca.crt
COPY pyproject.toml README.md /src/
COPY toolkit /src/toolkit
COPY gateway /src/gateway
COPY tools /src/tools
COPY orchestrator /src/orchestrator
RUN export PIP_CERT=/tmp/ca.crt \
 && python3 -m venv /opt/toolfleet \
 && /opt/toolfleet/bin/pip install --no-cache-dir /src \
 && rm -rf /tmp/ca.crt /src \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin toolfleet
ENV PATH=/opt/toolfleet/bin:/usr/local/bin:/usr/bin:/bin PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["toolfleet"]
LABEL org.opencontainers.image.title="toolfleet"
