# The oomwatch node agent image (also runs the kmsg relay; see daemonset/daemonset.yaml).
#   docker build -t oomwatch:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY oomwatch ./oomwatch
# The agent needs no torch/TensorFlow: the trainer probe runs inside training pods.
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim-bookworm
COPY --from=build /install /usr/local
# Non-root by default; the DaemonSet runs only the relay and the init step as root.
RUN groupadd --gid 65532 oomwatch && useradd --uid 65532 --gid 65532 --no-create-home oomwatch
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9717
ENTRYPOINT ["oomwatch"]
CMD ["run", "--help"]
