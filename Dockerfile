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

COPY . .
RUN pip install . \
    && useradd --create-home --uid 1000 stepstream \
    && mkdir -p /results /config \
    && chown stepstream:stepstream /results

# The results volume (docker-compose.yml) starts empty and takes this folder's owner, so trainers can write to it.
USER stepstream

# The processor's port (the AgentProcessor and gRPC health services) and TensorBoard's.
EXPOSE 50051 6006

ENTRYPOINT ["stepstream"]
CMD ["--help"]
