# The sandbox service image for deploy/k8s/: `python -m sandbox serve` with bubblewrap.
#   docker build -f deploy/service.Dockerfile -t REGISTRY/gspo-sandbox-service:VERSION .
#   docker push REGISTRY/gspo-sandbox-service:VERSION   # prints the digest for deploy/k8s
# Only the sandbox package goes in (it imports neither torch nor the trainer). The minimal root
# the programs run in is built at image build time (debootstrap, needs the Debian mirror) into
# GSPO_SANDBOX_CACHE, read-only at run time.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap debootstrap util-linux iproute2 \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir httpx starlette uvicorn
ENV GSPO_SANDBOX_CACHE=/opt/gspo-sandbox-cache PYTHONPATH=/opt/gspo
COPY sandbox /opt/gspo/sandbox
RUN python -c "from sandbox.isolation import image; print(image.ensure_rootfs())"
WORKDIR /tmp
# deploy/k8s runs it as this uid (runAsNonRoot); bubblewrap needs no privileges
USER 10001:10001
ENTRYPOINT ["python", "-m", "sandbox"]
CMD ["serve", "--help"]
