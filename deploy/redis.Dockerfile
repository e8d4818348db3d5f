# Redis for the fleet's shared state: the gateway's session pins and the orchestrator's response store,
# so both can run several replicas. Debian's redis-server on the same BASE as every other image (no
# registry needed). Persistence is off: the pins and stored responses are caches of live sessions.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && install -d -o 10001 -g 10001 /data
USER 10001:10001
WORKDIR /data
EXPOSE 6379
HEALTHCHECK --interval=5s --timeout=3s --retries=20 CMD ["redis-cli", "ping"]
ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
LABEL org.opencontainers.image.title="toolfleet redis"
