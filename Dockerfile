# The oomwatch node agent image (also runs the kmsg relay; see daemonset/daemonset.yaml).
#   docker build -t oomwatch:0.1.0 .
# Every Python package comes from requirements.lock / requirements-build.lock, pinned by
# version and sha256 (pip refuses any file whose hash differs).  Pin the base image too:
#   docker build --build-arg BASE=python:3.11-slim-bookworm@sha256:<digest> ...
# Regenerate the locks after changing dependencies in pyproject.toml:
#   pip-compile --extra agent --strip-extras --generate-hashes --allow-unsafe \
#     -o requirements.lock pyproject.toml
#   pip-compile --strip-extras --generate-hashes --allow-unsafe --all-build-deps \
#     --only-build-deps -o requirements-build.lock pyproject.toml
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE} AS build
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements-build.lock \
 && pip install --no-cache-dir --require-hashes --no-deps --prefix=/install -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY oomwatch ./oomwatch
# The agent needs no torch/TensorFlow: the trainer probe runs inside training pods.  Its own
# libraries (the `agent` extra) come from requirements.lock above.
RUN pip install --no-cache-dir --no-deps --no-build-isolation --prefix=/install .

FROM ${BASE}
COPY --from=build /install /usr/local
# Non-root by default; the DaemonSet runs only the relay and the init step as root.
RUN groupadd --gid 65532 oomwatch && useradd --uid 65532 --gid 65532 --no-create-home oomwatch
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9717 9718
ENTRYPOINT ["oomwatch"]
CMD ["run", "--help"]
