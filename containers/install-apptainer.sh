#!/usr/bin/env bash
# Install a working Apptainer on Debian 12 (bookworm), whose distribution has no package for it.
#   sudo bash containers/install-apptainer.sh      (idempotent: a second run only checks, in well under a second)
#
# sid's apptainer needs glibc >= 2.38 (bookworm has 2.36), so: download sid's apptainer and libc6 through a private
# apt configuration that names this machine's own mirror (read from its apt sources at run time, never written
# here), keep sid's glibc in a private directory and point apptainer's two ELF executables at it with a DT_RPATH.
#
# Root on VMs whose bounding set lacks CAP_SYS_RESOURCE (Firecracker): apptainer asks for every capability and fails
# ("Requesting capability set 0x000001ffffffffff while permitted capability set is 0x000001fffeffffff"). This script
# fixes `exec` (root default capabilities = file, plus every capability but that one granted to root). Builds as
# root run %post with full capabilities regardless, so they also need this in their environment:
#   export APPTAINER_DROP_CAPS=CAP_SYS_RESOURCE
# The Makefile exports it for its builds; this script deliberately writes no environment file.
set -euo pipefail

GLIBC_DIR=/opt/apptainer/glibc
CONF=/etc/apptainer/apptainer.conf
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEPS=(patchelf squashfs-tools uidmap debootstrap libseccomp2 libsqlite3-0 containernetworking-plugins
      ca-certificates)
APT=(apt-get -y -q -o DPkg::Lock::Timeout=120)
WORK=""  # staging directory, removed on exit

main() {
  [ "$(id -u)" = 0 ] || die "run as root (sudo bash $0)"
  if installed && configured; then
    echo "$(apptainer --version) already installed and configured"
    return 0
  fi
  installed || install_binary
  configure_root
  apptainer --version
}

die() { echo "install-apptainer: $*" >&2; exit 1; }

installed() { command -v apptainer >/dev/null && apptainer --version >/dev/null 2>&1; }

configured() {
  grep -q '^root default capabilities = file' "$CONF" 2>/dev/null &&
    apptainer capability list root 2>/dev/null | grep -q CAP_MKNOD
}

install_deps() {
  # Update the package lists only when an install from the current ones fails (a fresh machine has none).
  "${APT[@]}" install --no-install-recommends "${DEPS[@]}" >/dev/null 2>&1 && return
  "${APT[@]}" update >/dev/null
  "${APT[@]}" install --no-install-recommends "${DEPS[@]}" >/dev/null
}

install_binary() {
  install_deps
  local exe work
  WORK=$(mktemp -d)
  work=$WORK
  trap 'rm -rf "$WORK"' EXIT
  download_from_sid "$work"
  dpkg -x "$work"/debs/apptainer_*.deb "$work/root"
  dpkg -x "$work"/debs/libc6_*.deb "$work/glibc"
  rm -rf "$GLIBC_DIR" && mkdir -p "$GLIBC_DIR"
  cp -a "$work"/glibc/usr/lib/x86_64-linux-gnu/. "$GLIBC_DIR/"
  # DT_RPATH, not RUNPATH: apptainer re-executes itself with LD_LIBRARY_PATH set (non-root SIF runs), which
  # overrides a RUNPATH and then fails with "GLIBC_2.38 not found".
  for exe in usr/bin/apptainer usr/lib/x86_64-linux-gnu/apptainer/bin/starter; do
    patchelf --set-interpreter "$GLIBC_DIR/ld-linux-x86-64.so.2" --force-rpath \
      --set-rpath "$GLIBC_DIR:/lib/x86_64-linux-gnu" "$work/root/$exe"
  done
  cp -a "$work"/root/. /
  # The package's postinst: `singularity` as an alternative name for apptainer.
  update-alternatives --install /usr/bin/singularity singularity /usr/bin/apptainer 10 >/dev/null
}

download_from_sid() {
  local work=$1 mirror
  mirror=$(bash "$HERE/apt-mirror.sh")
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
  echo "deb $mirror sid main" >"$work/sources.list"
  # A private apt configuration: the machine's own sources, lists and cache stay untouched. sid's Release expires
  # after a week, so a snapshot mirror serves an "expired" one: its signature is still checked, its age is not.
  local opts=(-q -o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-"
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root"
              -o "Acquire::Check-Valid-Until=false")
  apt-get "${opts[@]}" update >/dev/null
  (cd "$work/debs" && apt-get "${opts[@]}" download apptainer libc6 >/dev/null)
}

configure_root() {
  # Root on this VM may not hold CAP_SYS_RESOURCE: start containers with the capabilities granted in the file
  # (all but that one) instead of "full". With `file` alone root would get none (unsquashfs could not mknod).
  if grep -q '^root default capabilities' "$CONF"; then
    sed -i 's/^root default capabilities = .*/root default capabilities = file/' "$CONF"
  else
    echo 'root default capabilities = file' >>"$CONF"
  fi
  local caps
  caps=$(apptainer capability avail | awk -F: '/^CAP_[A-Z_]+:/ && $1 != "CAP_SYS_RESOURCE" {print $1}' | paste -sd, -)
  [ -n "$caps" ] || die "apptainer capability avail listed no capabilities"
  # It warns once per capability that root could escalate on the host (that is the point here): show only failures.
  local out
  out=$(apptainer capability add --user root "$caps" 2>&1) || die "capability add failed: $out"
}

main "$@"
