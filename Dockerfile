# apf's image: the sealed runner, the verifier and the workloads' datasets,
# built and unit-tested from this tree.
#
#   podman build -t apf .                      (or docker build; BASE below)
#   podman build -t apf --build-arg BASE=debian:12 .      (a CPU-only image)
#
# The default base is NVIDIA's CUDA + cuDNN development image (Ubuntu), so
# one image serves CPU and GPU runs; any Debian 12 or Ubuntu 24.04 image
# works, the packages coming from its own distribution (scripts/deps.sh).
# How to run it sealed (the seccomp profile, /proc, APF_IMAGE_DIGEST): see
# "Containers" in README.md and containers/README.md.
ARG BASE=docker.io/nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
FROM ${BASE}

# APF_TEST=0 skips the unit tests of the build (they take about a minute).
ARG APF_TEST=1
ARG APF_JOBS=
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8

# The distribution's packages first, in a layer of their own, so that a
# change to apf's sources rebuilds apf and not the packages.
COPY scripts/deps.sh /usr/src/apf/scripts/deps.sh
RUN sh /usr/src/apf/scripts/deps.sh build runtime \
        $([ "$APF_TEST" = 0 ] || echo unit) \
 && rm -rf /var/lib/apt/lists/*

COPY . /usr/src/apf
WORKDIR /usr/src/apf
RUN make -j"${APF_JOBS:-$(nproc)}" all \
 && if [ "$APF_TEST" != 0 ]; then \
      make -j"${APF_JOBS:-$(nproc)}" unit-tests \
      && python3 tests/run.py --build build -j"${APF_JOBS:-$(nproc)}" --kind unit ; \
    fi \
 && make -o all install PREFIX=/usr/local \
 && rm -rf build

# Keys and trust live in $APF_HOME: mount it (a volume) so that the runner
# key outlives the container, e.g. -v apf-home:/apf.
ENV APF_HOME=/apf
WORKDIR /work
ENTRYPOINT ["apf"]
CMD ["--help"]
