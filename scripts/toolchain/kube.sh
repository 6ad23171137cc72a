#!/usr/bin/env bash
# Build / install the local Kubernetes + docker toolchain used by devtools/:
#   * apt packages: etcd-server (etcd 3.4), docker.io (dockerd + runc + containerd),
#     busybox-static (base image rootfs), openssl, golang-go (Go 1.19, needed for
#     the old vendored Kubernetes tree), rsync, jq, dpkg-dev
#   * kube-apiserver, kube-controller-manager, kube-scheduler, kubectl built from
#     Debian's `kubernetes` source package (1.20.2) into
#     ~/.cache/gcu-stack/kubernetes-<version>/bin/
#   * kwok (sigs.k8s.io/kwok) built with the modern Go toolchain from the Go module
#     proxy into ~/.cache/gcu-stack/kwok-<version>/bin/kwok
#
# Idempotent: every step is skipped when its result is already present.
# Environment overrides:
#   GCU_CACHE_DIR   (default ~/.cache/gcu-stack)
#   KWOK_VERSION    (default v0.8.0)
#   MODERN_GO       (default /usr/local/go/bin/go; the Go used to build kwok)
#   OLD_GO_BIN      (default /usr/lib/go-1.19/bin; the Go used for Kubernetes 1.20)
#   SKIP_APT=1      skip the apt step (packages must already be installed)
set -euo pipefail

CACHE_DIR="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}"
K8S_VERSION="${K8S_VERSION:-1.20.2}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
MODERN_GO="${MODERN_GO:-/usr/local/go/bin/go}"
OLD_GO_BIN="${OLD_GO_BIN:-/usr/lib/go-1.19/bin}"

K8S_DIR="$CACHE_DIR/kubernetes-$K8S_VERSION"
K8S_BIN="$K8S_DIR/bin"
K8S_SRC_PARENT="$K8S_DIR/src"
KWOK_DIR="$CACHE_DIR/kwok-$KWOK_VERSION"
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

APT_PACKAGES=(etcd-server etcd-client docker.io runc containerd busybox-static openssl
              golang-go rsync jq dpkg-dev iproute2 procps)

SCRIPT_START=$(date +%s)
step_start=0
step() { step_start=$(date +%s); echo "==> [kube.sh] $*"; }
step_done() { echo "    done in $(( $(date +%s) - step_start ))s"; }
die() { echo "kube.sh: ERROR: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

mkdir -p "$CACHE_DIR"

# ---------------------------------------------------------------- apt packages
ensure_deb_src() {
  # apt-get source needs a deb-src entry for bookworm main.
  if grep -rqsE '^\s*(Types:.*deb-src|deb-src\s)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
    return 1   # already present, nothing changed
  fi
  $SUDO tee /etc/apt/sources.list.d/gcu-stack-deb-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  return 0
}

apt_step() {
  step "apt packages + deb-src entry"
  local changed=0 missing=()
  if ensure_deb_src; then changed=1; fi
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "$changed" = 1 ] || [ "${#missing[@]}" -gt 0 ] || ! apt-cache showsrc kubernetes >/dev/null 2>&1; then
    $SUDO apt-get update -qq
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "    installing: ${missing[*]}"
    # Never let package postinst scripts start system services (etcd, docker):
    # devtools starts its own private instances.
    local policy_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
      $SUDO chmod +x /usr/sbin/policy-rc.d
      policy_created=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      || { [ "$policy_created" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
    if [ "$policy_created" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
  else
    echo "    all packages already installed"
  fi
  [ -x "$OLD_GO_BIN/go" ] || die "$OLD_GO_BIN/go not found (Debian golang-go 1.19 expected)"
  step_done
}

# ------------------------------------------------------------ kubernetes build
# Binaries are rebuilt when this changes (patches applied to the Debian source tree).
K8S_BUILD_ID="reflect2-v1.0.2"

kube_have_all() {
  local b
  [ "$(cat "$K8S_BIN/.build-id" 2>/dev/null)" = "$K8S_BUILD_ID" ] || return 1
  for b in "${KUBE_BINS[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done
  return 0
}

patch_reflect2() {
  # The 1.20 tree vendors modern-go/reflect2 v1.0.1, whose map iteration segfaults when built
  # with Go >= 1.18 (seen: kube-apiserver dies with SIGSEGV in json-iterator's sorted map
  # encoder on the first custom-resource PATCH). v1.0.2 is the upstream fix (Kubernetes 1.23
  # took it); swap it into vendor/ from the Go module proxy.
  local src="$1" vendor="$1/vendor/github.com/modern-go/reflect2" dir
  grep -q "=> github.com/modern-go/reflect2 v1.0.2" "$src/vendor/modules.txt" && return 0
  dir=$(cd /tmp && GOTOOLCHAIN=local GOFLAGS=-mod=mod "$MODERN_GO" mod download -json github.com/modern-go/reflect2@v1.0.2 | jq -r .Dir)
  [ -d "$dir" ] || die "could not download github.com/modern-go/reflect2@v1.0.2"
  rm -rf "$vendor" && mkdir -p "$vendor"
  (cd "$dir" && find . -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' -o -name LICENSE \) ! -name '*_test.go' -exec cp {} "$vendor/" \;)
  chmod -R u+w "$vendor"
  sed -i 's#github.com/modern-go/reflect2 v1.0.1#github.com/modern-go/reflect2 v1.0.2#g' "$src/go.mod" "$src/vendor/modules.txt"
  echo "    patched vendor/github.com/modern-go/reflect2 to v1.0.2"
}

kube_step() {
  step "kubernetes $K8S_VERSION binaries (${KUBE_BINS[*]}) -> $K8S_BIN"
  if kube_have_all; then
    echo "    cached"; step_done; return
  fi
  mkdir -p "$K8S_SRC_PARENT" "$K8S_BIN"
  local src
  src=$(find "$K8S_SRC_PARENT" -maxdepth 1 -mindepth 1 -type d -name "kubernetes-*" | head -n1 || true)
  if [ -z "$src" ] || [ ! -f "$src/Makefile" ]; then
    echo "    apt-get source kubernetes (into $K8S_SRC_PARENT)"
    (cd "$K8S_SRC_PARENT" && apt-get source -qq kubernetes) || die "apt-get source kubernetes failed"
    src=$(find "$K8S_SRC_PARENT" -maxdepth 1 -mindepth 1 -type d -name "kubernetes-*" | head -n1)
  fi
  [ -n "$src" ] && [ -f "$src/Makefile" ] || die "kubernetes source tree not found under $K8S_SRC_PARENT"
  case "$src" in
    *"$K8S_VERSION"*) ;;
    *) die "source tree $src does not look like version $K8S_VERSION (set K8S_VERSION)";;
  esac
  echo "    source tree: $src"
  patch_reflect2 "$src"
  if [ "$(cat "$K8S_BIN/.build-id" 2>/dev/null)" != "$K8S_BUILD_ID" ]; then
    rm -f "${KUBE_BINS[@]/#/$K8S_BIN/}"
  fi
  # GOPATH layout expected by hack/lib/golang.sh for the 1.20 tree.
  mkdir -p "$src/.go/src/k8s.io"
  ln -sfn "$src" "$src/.go/src/k8s.io/kubernetes"
  # One make call per binary (prints per-binary timing; later ones reuse the Go build
  # cache of the earlier ones, so only the first pays for the shared packages).
  local b t0 out cand
  for b in "${KUBE_BINS[@]}"; do
    [ -x "$K8S_BIN/$b" ] && { echo "    $b: cached"; continue; }
    t0=$(date +%s)
    echo "    make WHAT=cmd/$b  ($("$OLD_GO_BIN/go" version))"
    (
      cd "$src/.go/src/k8s.io/kubernetes"
      export GOPATH="$src/.go"
      export PATH="$OLD_GO_BIN:$PATH"
      export GOTOOLCHAIN=local GOFLAGS= GO111MODULE=
      # No .git in the Debian tree: give the version explicitly so /version reports it.
      export KUBE_GIT_VERSION="v$K8S_VERSION" KUBE_GIT_TREE_STATE=clean \
             KUBE_GIT_COMMIT="debian-$K8S_VERSION" KUBE_GIT_MAJOR=1 \
             KUBE_GIT_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
      make WHAT="cmd/$b"
    ) || die "make WHAT=cmd/$b failed (Go: $OLD_GO_BIN/go; Go >= 1.23 cannot build this 1.20 tree)"
    out=""
    for cand in "$src/_output/bin/$b" "$src/_output/local/bin/linux/amd64/$b" "$src/_output/local/go/bin/$b"; do
      if [ -x "$cand" ]; then out="$cand"; break; fi
    done
    [ -n "$out" ] || die "build did not produce $b (look in $src/_output)"
    cp -f "$out" "$K8S_BIN/$b.tmp" && mv -f "$K8S_BIN/$b.tmp" "$K8S_BIN/$b"
    echo "    $b built in $(( $(date +%s) - t0 ))s"
  done
  echo "$K8S_BUILD_ID" > "$K8S_BIN/.build-id"
  "$K8S_BIN/kube-apiserver" --version
  step_done
}

# ----------------------------------------------------------------- kwok build
kwok_stages() {
  # kwok itself has no built-in stages (kwokctl normally writes them): assemble the
  # same defaults kwokctl uses -- node-initialize, node-heartbeat-with-lease,
  # pod-ready, pod-complete, pod-delete -- from the module source of this version.
  local out="$KWOK_DIR/kwok.yaml"
  [ -s "$out" ] && return 0
  local dir
  dir=$(cd /tmp && GOTOOLCHAIN=local GOFLAGS=-mod=mod "$MODERN_GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | jq -r .Dir)
  [ -d "$dir/kustomize/stage" ] || die "kwok module source not found ($dir)"
  {
    echo "# Default kwok stages for $KWOK_VERSION (copied from sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage,"
    echo "# Apache-2.0), the set kwokctl uses: node-fast + heartbeat-with-lease + pod-fast."
    local f first=1
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      [ -f "$dir/kustomize/stage/$f" ] || die "missing kwok stage $f in $dir"
      [ "$first" = 1 ] || echo "---"
      first=0
      cat "$dir/kustomize/stage/$f"
    done
  } > "$out.tmp"
  mv -f "$out.tmp" "$out"
  echo "    wrote $out"
}

kwok_step() {
  step "kwok $KWOK_VERSION -> $KWOK_DIR/bin/kwok (+ stages $KWOK_DIR/kwok.yaml)"
  if [ -x "$KWOK_DIR/bin/kwok" ]; then
    kwok_stages
    echo "    cached"; step_done; return
  fi
  [ -x "$MODERN_GO" ] || die "modern Go not found at $MODERN_GO (set MODERN_GO)"
  mkdir -p "$KWOK_DIR/bin"
  # Throwaway module: works whether or not kwok's go.mod carries replace directives
  # (v0.6.1..v0.8.0 carry none; if a future version does, copy them here).
  local mod="$KWOK_DIR/build-mod"
  rm -rf "$mod"; mkdir -p "$mod"
  (
    cd "$mod"
    export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
    cat > go.mod <<EOF
module gcu-stack.local/kwok-build

go 1.26
EOF
    cat > tools.go <<'EOF'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
EOF
    "$MODERN_GO" get "sigs.k8s.io/kwok@$KWOK_VERSION"
    local replaces
    replaces=$("$MODERN_GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | jq -r .GoMod)
    if grep -qE '^\s*replace' "$replaces"; then
      echo "    kwok go.mod has replace directives; copying them into the throwaway module"
      awk '/^replace \(/{f=1;print;next} f{print; if($0 ~ /^\)/) f=0; next} /^replace /{print}' "$replaces" >> go.mod
      "$MODERN_GO" mod tidy
    fi
    "$MODERN_GO" build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
      -o "$KWOK_DIR/bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
  )
  mv -f "$KWOK_DIR/bin/kwok.tmp" "$KWOK_DIR/bin/kwok"
  rm -rf "$mod"
  kwok_stages
  "$KWOK_DIR/bin/kwok" --version || true
  step_done
}

# ------------------------------------------------------------- sanity summary
summary_step() {
  step "summary"
  echo "    etcd:            $(command -v etcd || echo MISSING) ($(etcd --version 2>/dev/null | head -n1 || true))"
  echo "    dockerd:         $(command -v dockerd || echo MISSING)"
  echo "    docker CLI:      $( [ -x /usr/bin/docker ] && echo "/usr/bin/docker (Debian 20.10, used by devtools)" || echo MISSING); first in PATH: $(command -v docker || true)"
  echo "    runc:            $(command -v runc || echo MISSING)"
  echo "    busybox static:  $( [ -x /bin/busybox ] && echo /bin/busybox || echo MISSING)"
  for b in "${KUBE_BINS[@]}"; do echo "    $b: $K8S_BIN/$b"; done
  echo "    kubectl (use this one, matches the server): $K8S_BIN/kubectl"
  echo "    kwok:            $KWOK_DIR/bin/kwok"
  echo "    kwok stages:     $KWOK_DIR/kwok.yaml"
  step_done
}

if [ "${SKIP_APT:-0}" = 1 ]; then echo "==> [kube.sh] SKIP_APT=1: apt step skipped"; else apt_step; fi
kube_step
kwok_step
summary_step
echo "==> [kube.sh] total $(( $(date +%s) - SCRIPT_START ))s"
