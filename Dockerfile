# The cifar10-dp image: mpi-operator v2 launcher and workers, the data-prep Job and the test Job.
#
#   docker build -t cifar10-dp:cpu .                          CPU flavour (Debian 12 slim)
#   docker build --build-arg FLAVOUR=gpu -t cifar10-dp:gpu .  GPU flavour (nvidia/cuda cuDNN runtime)
#
# Build stage: scripts/install-deps.sh, then the project's Makefile: the two steps .ci/run takes
# (tests/test_dockerfile.sh runs this stage's RUN lines and checks the runtime stage against them).
# Runtime stage: the three programs, get-data.sh, the Open MPI runtime and an sshd set up for
# mpi-operator v2: user mpiuser (uid 1000), port 2222, host key = the mounted ssh key. No build
# tools, no secrets: mpi-operator mounts the job's ssh key at run time.
ARG FLAVOUR=cpu
ARG CUDA_TAG=13.0.2-cudnn

FROM debian:12 AS build-cpu
ENV MAKE_FLAGS="CUDA=0"
FROM nvidia/cuda:${CUDA_TAG}-devel-ubuntu24.04 AS build-gpu
# CUDA=1: the build fails, instead of quietly leaving the CUDA backend out, if nvcc or cuDNN is
# missing. Kernels for sm_75..sm_90 plus PTX (the Makefile's CUDA_ARCH).
ENV MAKE_FLAGS="CUDA=1"

FROM build-${FLAVOUR} AS build
WORKDIR /src
COPY . .
RUN scripts/install-deps.sh
RUN make -j"$(nproc)" $MAKE_FLAGS all

FROM debian:12-slim AS runtime-cpu
# cifar10-predict's picture libraries, by their names in each base distribution.
ENV IMAGE_LIBS="libpng16-16 libjpeg62-turbo"
FROM nvidia/cuda:${CUDA_TAG}-runtime-ubuntu24.04 AS runtime-gpu
ENV IMAGE_LIBS="libpng16-16t64 libjpeg-turbo8"

FROM runtime-${FLAVOUR}
# openmpi-bin brings libopenmpi3 and the ssh client; libgomp1, zlib1g and IMAGE_LIBS are the
# binaries' other libraries; curl and ca-certificates are get-data.sh's download; dumb-init is
# the launcher's PID 1 (it turns the pod's SIGTERM into the SIGUSR1 mpirun forwards) and procps
# the workers' preStop hook (pkill, pgrep): see k8s/base/train/mpijob.yaml. Installing
# openssh-server generates host keys, which every container of the image would share: they go
# (sshd uses the mounted job key as its host key, k8s/image/sshd_config).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openmpi-bin libgomp1 zlib1g $IMAGE_LIBS openssh-server openssh-client curl ca-certificates \
      dumb-init procps \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*
# uid 1000 is taken by "ubuntu" in the Ubuntu 24.04 base images.
RUN if id -u ubuntu >/dev/null 2>&1; then userdel -r ubuntu; fi \
 && useradd --create-home --uid 1000 --shell /bin/bash mpiuser \
 && mkdir -p /run/sshd
COPY k8s/image/ssh_config /etc/ssh/ssh_config.d/mpi-operator.conf
COPY --chown=mpiuser:mpiuser k8s/image/sshd_config /home/mpiuser/.sshd_config
COPY --from=build /src/build/cifar10-train /src/build/cifar10-test /src/build/cifar10-predict /src/scripts/get-data.sh /usr/local/bin/
# The CUDA backend, a plugin the programs open where a GPU driver is (empty in the CPU flavour).
COPY --from=build /src/build/lib/ /usr/local/lib/
# Ranks sharing a pod talk through /dev/shm; the single-copy (CMA) mode would need ptrace,
# which pods do not grant. mpirun passes OMPI_MCA_* settings on to every rank.
ENV OMPI_MCA_btl_vader_single_copy_mechanism=none
USER 1000
WORKDIR /home/mpiuser
EXPOSE 2222
# Workers run sshd (the MPIJob sets their command); this default prints the usage.
CMD ["cifar10-train", "--help"]
