# The gateway as a container image: a Debian 12 build stage with the system DPDK 22.11 and a
# pinned Rust, and a slim runtime stage with only the DPDK libraries and drivers it loads.
#
#   docker build -t gateway .
#   docker run -d --name gateway --network host \
#       --cap-drop ALL --cap-add SYS_NICE --ulimit memlock=-1:-1 \
#       --security-opt no-new-privileges --read-only --tmpfs /run --tmpfs /tmp \
#       --device /dev/vfio/vfio --device /dev/vfio/<group> -v /dev/hugepages:/dev/hugepages \
#       -v /var/lib/gateway:/var/lib/gateway \
#       -v /etc/gateway:/etc/gateway:ro gateway
#   docker kill -s HUP gateway     # reload the config
#
# Mount the config directory, not the file: an editor saves by writing a new file and renaming
# it over the old one, and a single-file bind mount stays on the old inode, so neither the
# gateway's file watcher nor SIGHUP would ever see the edit. (The directory mount hides the
# example configs the image carries in /etc/gateway/; it must hold gateway.toml and whatever
# the config names there, e.g. metrics.web_config and its certificates.)
#
# Capabilities (least privilege, as deploy/systemd/gateway.service). With the ports on vfio-pci
# and an IOMMU (the host's deploy/systemd/gateway-setup.sh binds them), DPDK needs one:
#   SYS_NICE    NUMA placement: mbind, set_mempolicy, get_mempolicy, which Docker's default
#               seccomp profile allows only with this capability
# i.e. --cap-drop ALL --cap-add SYS_NICE, plus --ulimit memlock=-1:-1 (vfio counts DMA-mapped
# memory against RLIMIT_MEMLOCK; with the limit lifted, IPC_LOCK is not needed). Not needed:
#   SYS_ADMIN   IOVAs are virtual addresses under the IOMMU (no /proc/self/pagemap), the host
#               mounts hugetlbfs, and --in-memory allocates hugepages anonymously
#   SYS_RAWIO   PCI config space goes through vfio; only vfio's no-IOMMU mode would need it
#   IPC_LOCK    the memlock ulimit above
# The device grant is --device for /dev/vfio/vfio and each port's IOMMU group
# (readlink /sys/bus/pci/devices/<pci>/iommu_group), not all of /dev/vfio. The process is root
# in the container only so that it can open those root-owned device nodes without chown; with
# every capability dropped that root cannot override file permissions. --privileged is not
# needed and gives all of the above and every device.
# Kernel twins (the X550 configs give the LAN one; docs/configuration.md "Kernel twins") are tap devices that
# `ip` (iproute2, installed below) addresses: add --cap-add NET_ADMIN --device /dev/net/tun.
# Lab configs on af_packet, af_xdp or tap vdevs (kernel interfaces) add
#   --cap-add NET_RAW --cap-add NET_ADMIN (and --device /dev/net/tun for tap)
# docs/deployment.md has the whole line for the X550.

# ---------------------------------------------------------------------------------------------
# Build stage
# ---------------------------------------------------------------------------------------------
FROM debian:bookworm AS build

# The build packages scripts/deps.sh installs (tests/e2e/test_deploy_kit.sh keeps the two
# lists in step), plus curl and ca-certificates for rustup.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libdpdk-dev \
        clang \
        libclang-dev \
        pkg-config \
        build-essential \
        curl \
        ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# Rust via rustup: a pinned toolchain, minimal profile (rustc, cargo, rust-std).
ARG RUST_TOOLCHAIN=1.95.0
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
        | sh -s -- -y --no-modify-path --profile minimal --default-toolchain "${RUST_TOOLCHAIN}" \
    && rustc --version && cargo --version

WORKDIR /src

# Dependency layer: the manifests and the lock file with stub sources, built once, so a change
# to the gateway's code does not rebuild the crates.io dependencies. dpdk-sys (bindgen over
# the DPDK headers, the C shim) changes rarely and goes in whole.
COPY Cargo.toml Cargo.lock ./
COPY dpdk-sys/ dpdk-sys/
COPY pipeline/Cargo.toml pipeline/Cargo.toml
COPY gateway/Cargo.toml gateway/Cargo.toml
RUN mkdir -p pipeline/src gateway/src \
    && touch pipeline/src/lib.rs gateway/src/lib.rs \
    && echo 'fn main() {}' > gateway/src/main.rs \
    && cargo build --release --locked -p gateway \
    && rm -rf pipeline/src gateway/src

# The real sources. COPY keeps the files' modification times, which can be older than the stub
# build above: touch them so cargo rebuilds the two crates.
COPY pipeline/ pipeline/
COPY gateway/ gateway/
RUN find pipeline gateway -name '*.rs' -exec touch {} + \
    && cargo build --release --locked -p gateway \
    && cp target/release/gateway /usr/local/bin/gateway

# ---------------------------------------------------------------------------------------------
# Runtime stage
# ---------------------------------------------------------------------------------------------
FROM debian:bookworm-slim
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The DPDK 22.11 (ABI 23) runtime. Linked by the binary (`ldd target/release/gateway`): eal,
# ethdev, mbuf, mempool, ring, kvargs, telemetry, net, meter, pci, the PCI and vdev buses,
# pdump with what it needs (pcapng, bpf: `eal.pdump`), and the bonding and ring PMDs the
# gateway calls directly (dpdk-sys links rte_net_bond and rte_net_ring). The capture tools
# themselves (dpdk-dumpcap, which `gateway ctl capture` runs) are in dpdk-dev, not here. Loaded by the EAL from /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0: the buses, the
# mempool ring driver (every mbuf pool needs it), and the PMDs: ixgbe (X550), bonding,
# af_packet, af_xdp, tap, ring and null. Other drivers are left out on purpose: the EAL loads
# every driver it finds there. tests/e2e/test_deploy_kit.sh checks this list against ldd.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        librte-eal23 \
        librte-ethdev23 \
        librte-mbuf23 \
        librte-mempool23 \
        librte-ring23 \
        librte-kvargs23 \
        librte-telemetry23 \
        librte-net23 \
        librte-meter23 \
        librte-pci23 \
        librte-hash23 \
        librte-rcu23 \
        librte-ip-frag23 \
        librte-sched23 \
        librte-pdump23 \
        librte-pcapng23 \
        librte-bpf23 \
        librte-bus-pci23 \
        librte-bus-vdev23 \
        librte-mempool-ring23 \
        librte-net-ixgbe23 \
        librte-net-bond23 \
        librte-net-af-packet23 \
        librte-net-af-xdp23 \
        librte-net-tap23 \
        librte-net-ring23 \
        librte-net-null23 \
        iproute2 \
    && rm -rf /var/lib/apt/lists/*

COPY --from=build /usr/local/bin/gateway /usr/local/bin/gateway
COPY configs/ /etc/gateway/

# Fail the image build, not the first start, if a shared library is missing or a shipped
# config (every one in configs/: lab, x550, x550-lacp, ...) no longer matches the schema.
RUN if ldd /usr/local/bin/gateway | grep 'not found'; then exit 1; fi \
    && for config in /etc/gateway/*.toml; do \
        gateway check-config "$config" || exit 1; \
    done

# Prometheus metrics: metrics.listen in the config, 127.0.0.1:9469 by default (9100 is
# node_exporter's). The health check is the gateway itself: `gateway healthcheck` reads the same
# config as CMD, fetches http://<metrics.listen>/metrics and succeeds if gateway_build_info is
# there (with metrics.web_config it only checks that the address accepts a connection), so it
# follows metrics.listen to a management address without an edit here. No curl, and no
# ca-certificates: nothing else in the image makes an HTTP or TLS client connection.
EXPOSE 9469
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["gateway", "healthcheck", "--config", "/etc/gateway/gateway.toml"]

# Mount the operator's config directory over /etc/gateway (read-only, see the header): it
# replaces the example configs copied there.
ENTRYPOINT ["gateway"]
CMD ["run", "--config", "/etc/gateway/gateway.toml"]
