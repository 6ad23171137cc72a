#!/usr/bin/env bash
# The local Kubernetes toolchain behind devtools/ (the embedded cluster of `scripts/gcu-stack` and the tests):
#
#   apt         Debian packages: docker.io, runc, containerd (private dockerd/containerd instances), busybox-static
#               (a base image without a registry), containernetworking-plugins + iproute2 (real test nodes),
#               openssl (the local cluster's certificates), jq, procps
#   go          a Go toolchain >= every build module's `go` line (the one on the machine, else fetched: go.sh)
#   kubernetes  kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl <version> built from Go
#               modules with devtools/go (k8s.io/kubernetes + one replace per staging module; go.sum committed)
#               into $CACHE/kubernetes-<version>/bin/
#   kube-proxy  kube-proxy <version> (the real test nodes' Services) built the same way from a module of its own,
#               devtools/kube-proxy, into the same directory: adding it did not change the others' build id
#   coredns     CoreDNS <version> (the real test nodes' cluster DNS) built from devtools/coredns (its main.go links the
#               plugins a kubeadm Corefile uses) into $CACHE/coredns-<version>/bin/coredns
#   containerd2 containerd <version> 2.x (the real test nodes' container runtime: containerd, containerd-shim-runc-v2,
#               ctr) built from devtools/containerd2 into $CACHE/containerd-<version>/bin/; its `config dump` also
#               proves the config versions 3 and 4 the runtime activation writes (tests/test_containerd_host.py).
#               Debian's containerd 1.6 stays for the private containerd of the runtime tests and for real nodes
#               with GCU_NODE_CONTAINERD=1.6
#   nfd         Node Feature Discovery <version> (nfd-master, nfd-worker: what images/nfd puts in the real nodes' NFD
#               image) built from devtools/nfd into $CACHE/nfd-<version>/bin/
#   etcd        etcd server <version> built from Go modules with devtools/etcd into $CACHE/etcd-<version>/bin/etcd
#               (if that fails: Debian's etcd-server 3.4, with a loud warning)
#   kwok        sigs.k8s.io/kwok (simulated nodes) into $CACHE/kwok-<version>/bin/kwok, plus its default stages
#
# Usage:
#   scripts/toolchain/kube.sh [build]      build what is missing (each part timed; cached parts take well under 1 s)
#   scripts/toolchain/kube.sh status       what is built, with versions
#   scripts/toolchain/kube.sh regen-go-mod [K8S_VERSION [ETCD_VERSION]]
#                                          regenerate devtools/go/go.mod (+ go.sum) from kubernetes' own go.mod: one
#                                          `replace k8s.io/X => k8s.io/X v0.<minor>.<patch>` per ./staging/src/k8s.io/X,
#                                          and devtools/etcd/go.mod (+ go.sum); commit both go.sum files.
#
# Versions come from the build modules: `require k8s.io/kubernetes vX` in devtools/go/go.mod and
# `require go.etcd.io/etcd/server/v3 vY` in devtools/etcd/go.mod. Kubernetes binaries are rebuilt only when the build
# id (a hash of devtools/go/go.mod, go.sum and the build flags) changes; each binary already built under the same id is
# kept. Caches: $GCU_CACHE_DIR (default ~/.cache/gcu-stack), GOMODCACHE/GOCACHE in $GCU_CACHE_DIR/go/{mod,build}
# (shared with pulumi.sh).
#
# Environment: GCU_CACHE_DIR, GCU_KUBERNETES (newest | oldest: which Kubernetes to build, below), KWOK_VERSION
# (default v0.8.0), GO (a go binary to use), SKIP_APT=1 (packages are installed already), GCU_TIMINGS_FILE (append
# "part seconds what" lines, read by .ci/run).
#
# Gotchas:
#  * The checksum database mirror here answers 404 for some k8s.io/sigs.k8s.io module versions, hence
#    GONOSUMDB=k8s.io,sigs.k8s.io; the committed go.sum files pin their hashes, and the builds run with -mod=readonly.
#  * Kubernetes patch versions are served unevenly (k8s.io/externaljwt v0.33.2 and v0.33.5 are refused); 1.33.4 is
#    served whole.
#  * etcd's server module root is package main; its go.mod replaces its sibling modules with ../ paths, so it is built
#    from devtools/etcd, which requires it. reflect2 is lifted to v1.0.2 there: v1.0.1 (what etcd 3.5 lists) crashes
#    when built with Go >= 1.18.
#  * kwok v0.8.0 needs Go >= 1.26 and k8s.io libraries 0.36, so it is built in a throwaway module of its own.
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_DIR="$(cd "$(dirname "$SELF")/../.." && pwd)"
# shellcheck source=go.sh
. "$(dirname "$SELF")/go.sh"

CACHE_DIR="${GCU_CACHE_DIR:-$HOME/.cache/gcu-stack}"
# GCU_KUBERNETES=newest (default) builds the Kubernetes the suite runs on; =oldest the oldest one supported, from build
# modules of its own (scripts/test-oldest-kubernetes.sh). devtools.kubernetes_version() reads the same modules.
case "${GCU_KUBERNETES:-newest}" in
  newest) KUBE_MOD_DIR="$REPO_DIR/devtools/go" PROXY_MOD_DIR="$REPO_DIR/devtools/kube-proxy" ;;
  oldest) KUBE_MOD_DIR="$REPO_DIR/devtools/oldest-kubernetes/go" PROXY_MOD_DIR="$REPO_DIR/devtools/oldest-kubernetes/kube-proxy" ;;
  *) echo "[kube.sh] GCU_KUBERNETES='$GCU_KUBERNETES': it is newest or oldest" >&2; exit 2 ;;
esac
COREDNS_MOD_DIR="$REPO_DIR/devtools/coredns"
ETCD_MOD_DIR="$REPO_DIR/devtools/etcd"
CONTAINERD_MOD_DIR="$REPO_DIR/devtools/containerd2"
CONTAINERD_BINS=(containerd containerd-shim-runc-v2 ctr)
NFD_MOD_DIR="$REPO_DIR/devtools/nfd"
NFD_BINS=(nfd-master nfd-worker)
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
KWOK_GO_MIN=1.26.0          # sigs.k8s.io/kwok v0.8.0's go line
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
APT_PACKAGES=(docker.io runc containerd containernetworking-plugins busybox-static openssl jq iproute2 procps iptables)

REPORT_TAG=kube.sh REPORT_WIDTH=12
# shellcheck source=report.sh
. "$(dirname "$SELF")/report.sh"

required_version() {   # required_version GO.MOD MODULE -> the version in `require MODULE vX`
  sed -n "s#^[[:space:]]*\(require[[:space:]]\{1,\}\)\{0,1\}$2[[:space:]]\{1,\}v\([^[:space:]]*\).*#\2#p" "$1" | head -n1
}
K8S_VERSION="$(required_version "$KUBE_MOD_DIR/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(required_version "$ETCD_MOD_DIR/go.mod" go.etcd.io/etcd/server/v3)"
COREDNS_VERSION="$(required_version "$COREDNS_MOD_DIR/go.mod" github.com/coredns/coredns)"
CONTAINERD_VERSION="$(required_version "$CONTAINERD_MOD_DIR/go.mod" github.com/containerd/containerd/v2)"
NFD_VERSION="$(required_version "$NFD_MOD_DIR/go.mod" sigs.k8s.io/node-feature-discovery)"
[ -n "$NFD_VERSION" ] || die "no 'require sigs.k8s.io/node-feature-discovery vX' in $NFD_MOD_DIR/go.mod"
[ -n "$CONTAINERD_VERSION" ] || die "no 'require github.com/containerd/containerd/v2 vX' in $CONTAINERD_MOD_DIR/go.mod"
[ -n "$COREDNS_VERSION" ] || die "no 'require github.com/coredns/coredns vX' in $COREDNS_MOD_DIR/go.mod"
[ -n "$K8S_VERSION" ] || die "no 'require k8s.io/kubernetes vX' in $KUBE_MOD_DIR/go.mod"
[ -n "$ETCD_VERSION" ] || die "no 'require go.etcd.io/etcd/server/v3 vX' in $ETCD_MOD_DIR/go.mod"
K8S_BIN="$CACHE_DIR/kubernetes-$K8S_VERSION/bin"
ETCD_DIR="$CACHE_DIR/etcd-$ETCD_VERSION"
KWOK_DIR="$CACHE_DIR/kwok-$KWOK_VERSION"
COREDNS_BIN="$CACHE_DIR/coredns-$COREDNS_VERSION/bin"
CONTAINERD_BIN="$CACHE_DIR/containerd-$CONTAINERD_VERSION/bin"
NFD_BIN="$CACHE_DIR/nfd-$NFD_VERSION/bin"
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
# What `kube-apiserver --version` and the /version endpoint report (as in an upstream release build).
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR \
-X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=2025-08-12T00:00:00Z \
-X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

go_env() {
  export GOMODCACHE="$CACHE_DIR/go/mod" GOCACHE="$CACHE_DIR/go/build"
  export GOTOOLCHAIN=local CGO_ENABLED=0
  export GOFLAGS="-mod=readonly -buildvcs=false"
  export GONOSUMDB="k8s.io,sigs.k8s.io"
  export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
}

# ------------------------------------------------------------------------------------------------ apt
apt_install() {   # apt_install PKG... (never lets a package's postinst start a system service)
  local policy_created=0 rc=0
  $SUDO apt-get update -qq >&2 || warn "apt-get update failed; trying the install anyway"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    policy_created=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >&2 || rc=$?
  if [ "$policy_created" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
  [ "$rc" = 0 ] || die "apt-get install $* failed"
}

apt_step() {
  local t0 missing=() p
  t0="$(now)"
  if [ "${SKIP_APT:-0}" = 1 ]; then timing apt "$(elapsed "$t0")" "skipped (SKIP_APT=1)"; return; fi
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then timing apt "$(elapsed "$t0")" "all installed"; return; fi
  log "installing: ${missing[*]}"
  apt_install "${missing[@]}"
  timing apt "$(elapsed "$t0")" "installed ${missing[*]}"
}

# ------------------------------------------------------------------------------------------------ go
GO_BIN=""
go_step() {   # go_step MIN
  local t0 min="$1"
  t0="$(now)"
  GO_BIN="$(go_pick "$min")"
  if [ -n "$GO_BIN" ]; then
    timing go "$(elapsed "$t0")" "$GO_BIN (go$(go_version_of "$GO_BIN"))"
  else
    GO_BIN="$(go_fetch)" || die "no go >= $min on this machine and fetching go$GO_DOWNLOAD_VERSION failed"
    timing go "$(elapsed "$t0")" "fetched go$GO_DOWNLOAD_VERSION"
  fi
  export PATH="$(dirname "$GO_BIN"):$PATH"
}

go_min_for_builds() {
  local m="$KWOK_GO_MIN" v
  for v in "$(go_mod_go_line "$KUBE_MOD_DIR/go.mod")" "$(go_mod_go_line "$ETCD_MOD_DIR/go.mod")" "$(go_mod_go_line "$COREDNS_MOD_DIR/go.mod")" \
           "$(go_mod_go_line "$CONTAINERD_MOD_DIR/go.mod")" "$(go_mod_go_line "$NFD_MOD_DIR/go.mod")"; do
    if [ -n "$v" ] && ! ver_ge "$m" "$v"; then m="$v"; fi
  done
  echo "$m"
}

# ------------------------------------------------------------------------------------------------ kubernetes
# Comment lines of go.mod do not count: editing a comment must not cost a rebuild.
kube_build_id() {
  { grep -v '^[[:space:]]*//' "$KUBE_MOD_DIR/go.mod"; cat "$KUBE_MOD_DIR/go.sum"
    echo "CGO_ENABLED=0 -trimpath $K8S_LDFLAGS"; } | sha256sum | cut -c1-16
}

stale_or_missing() {   # stale_or_missing DIR ID BIN... : the BINs DIR lacks; all of them when its build id is not ID
  local dir="$1" id="$2" b
  shift 2
  mkdir -p "$dir"
  if [ "$(cat "$dir/.build-id" 2>/dev/null)" != "$id" ]; then
    for b in "$@"; do rm -f "$dir/$b"; done
    echo "$id" > "$dir/.build-id"
  fi
  for b in "$@"; do [ -x "$dir/$b" ] || echo "$b"; done
}

build_into() {   # build_into DIR MOD_DIR CMD_PREFIX BIN... : one `go build "${GO_BUILD_ARGS[@]}"` of CMD_PREFIX/BIN...
  local dir="$1" mod="$2" prefix="$3" tmp b
  shift 3
  tmp="$dir/.tmp-$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  # One go build for all of them: the shared packages compile once and the links run side by side.
  (cd "$mod" && go build "${GO_BUILD_ARGS[@]}" -o "$tmp/" "${@/#/$prefix}") \
    || { rm -rf "$tmp"; die "building $* from $mod failed (see above)"; }
  for b in "$@"; do mv -f "$tmp/$b" "$dir/$b"; done
  rm -rf "$tmp"
}

go_binaries_step() {   # go_binaries_step PART VERSION DIR ID MOD_DIR CMD_PREFIX NOTE CHECK BIN...
  # Build the BINs DIR lacks under build id ID (GO_BUILD_ARGS set by the caller) from MOD_DIR's CMD_PREFIX/BIN, then
  # run CHECK (a binary of DIR and its version flag) to show the build runs.
  local part="$1" version="$2" dir="$3" id="$4" mod="$5" prefix="$6" note="$7" check="$8" t0 missing=()
  shift 8
  t0="$(now)"
  mapfile -t missing < <(stale_or_missing "$dir" "$id" "$@")
  if [ "${#missing[@]}" -eq 0 ]; then timing "$part" "$(elapsed "$t0")" "v$version cached (build id $id)"; return; fi
  log "building ${missing[*]} v$version from Go modules (${mod#"$REPO_DIR/"}, build id $id)$note"
  build_into "$dir" "$mod" "$prefix" "${missing[@]}"
  # shellcheck disable=SC2086 # CHECK is a binary and its flag
  "$dir"/$check >&2 || die "the ${check%% *} just built does not run"
  timing "$part" "$(elapsed "$t0")" "built ${missing[*]} v$version (build id $id)"
}

kube_step() {
  GO_BUILD_ARGS=(-trimpath -ldflags "$K8S_LDFLAGS")
  go_binaries_step kubernetes "$K8S_VERSION" "$K8S_BIN" "$(kube_build_id)" "$KUBE_MOD_DIR" k8s.io/kubernetes/cmd/ \
    "; cold: 11 to 17 min on 2 cores" "kube-apiserver --version" "${KUBE_BINS[@]}"
}

# ------------------------------------------------------------------------------------------------ kube-proxy
proxy_build_id() {
  { grep -v '^[[:space:]]*//' "$PROXY_MOD_DIR/go.mod"; cat "$PROXY_MOD_DIR/go.sum"
    echo "CGO_ENABLED=0 -trimpath $K8S_LDFLAGS"; } | sha256sum | cut -c1-16
}

kube_proxy_step() {
  local t0 id tmp
  t0="$(now)"
  id="$(proxy_build_id)"
  mkdir -p "$K8S_BIN"
  if [ -x "$K8S_BIN/kube-proxy" ] && [ "$(cat "$K8S_BIN/.kube-proxy-build-id" 2>/dev/null)" = "$id" ]; then
    timing kube-proxy "$(elapsed "$t0")" "v$K8S_VERSION cached (build id $id)"; return
  fi
  log "building kube-proxy v$K8S_VERSION from Go modules (devtools/kube-proxy, build id $id)"
  tmp="$K8S_BIN/.tmp-proxy-$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$PROXY_MOD_DIR" && go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$tmp/" k8s.io/kubernetes/cmd/kube-proxy) \
    || { rm -rf "$tmp"; die "building kube-proxy from $PROXY_MOD_DIR failed (see above)"; }
  mv -f "$tmp/kube-proxy" "$K8S_BIN/kube-proxy"
  rm -rf "$tmp"
  echo "$id" > "$K8S_BIN/.kube-proxy-build-id"
  timing kube-proxy "$(elapsed "$t0")" "built v$K8S_VERSION (build id $id)"
}

# ------------------------------------------------------------------------------------------------ coredns
coredns_build_id() {
  { grep -v '^[[:space:]]*//' "$COREDNS_MOD_DIR/go.mod"; cat "$COREDNS_MOD_DIR/go.sum" "$COREDNS_MOD_DIR/main.go"
    echo "CGO_ENABLED=0 -trimpath -s -w"; } | sha256sum | cut -c1-16
}

coredns_step() {
  local t0 id
  t0="$(now)"
  id="$(coredns_build_id)"
  if [ -x "$COREDNS_BIN/coredns" ] && [ "$(cat "$COREDNS_BIN/.build-id" 2>/dev/null)" = "$id" ]; then
    timing coredns "$(elapsed "$t0")" "v$COREDNS_VERSION cached (build id $id)"; return
  fi
  log "building CoreDNS v$COREDNS_VERSION from Go modules (devtools/coredns, build id $id)"
  mkdir -p "$COREDNS_BIN"
  (cd "$COREDNS_MOD_DIR" && go build -trimpath -ldflags "-s -w" -o "$COREDNS_BIN/coredns.tmp" .) \
    || { rm -f "$COREDNS_BIN/coredns.tmp"; die "building CoreDNS from $COREDNS_MOD_DIR failed (see above)"; }
  "$COREDNS_BIN/coredns.tmp" -version >&2 || die "the CoreDNS just built does not run"
  mv -f "$COREDNS_BIN/coredns.tmp" "$COREDNS_BIN/coredns"
  echo "$id" > "$COREDNS_BIN/.build-id"
  timing coredns "$(elapsed "$t0")" "built v$COREDNS_VERSION (build id $id)"
}

# ------------------------------------------------------------------------------------------------ containerd 2
containerd_build_id() {
  { grep -v '^[[:space:]]*//' "$CONTAINERD_MOD_DIR/go.mod"; cat "$CONTAINERD_MOD_DIR/go.sum"
    echo "CGO_ENABLED=0 -trimpath -s -w $CONTAINERD_TAGS"; } | sha256sum | cut -c1-16
}
# No cgo: the btrfs snapshotter (the one part that needs it) is left out, as the real nodes use native/overlayfs.
CONTAINERD_TAGS="no_btrfs"

containerd_step() {
  # version.Version: what `containerd --version` and the CRI report, as in a release build
  GO_BUILD_ARGS=(-trimpath -tags "$CONTAINERD_TAGS"
                 -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION")
  go_binaries_step containerd2 "$CONTAINERD_VERSION" "$CONTAINERD_BIN" "$(containerd_build_id)" "$CONTAINERD_MOD_DIR" \
    github.com/containerd/containerd/v2/cmd/ "" "containerd --version" "${CONTAINERD_BINS[@]}"
}

# ------------------------------------------------------------------------------------------------ nfd
# As NFD's own image build does: version.version is what `nfd-master -version` and the NodeFeature objects report, and
# hostpath.pathPrefix=/host- makes the worker read the node's /sys, /boot, ... where its DaemonSet mounts them.
NFD_LDFLAGS="-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=v$NFD_VERSION \
-X sigs.k8s.io/node-feature-discovery/pkg/utils/hostpath.pathPrefix=/host-"
nfd_build_id() {
  { grep -v '^[[:space:]]*//' "$NFD_MOD_DIR/go.mod"; cat "$NFD_MOD_DIR/go.sum"
    echo "CGO_ENABLED=0 -trimpath $NFD_LDFLAGS"; } | sha256sum | cut -c1-16
}

nfd_step() {
  GO_BUILD_ARGS=(-trimpath -ldflags "$NFD_LDFLAGS")
  go_binaries_step nfd "$NFD_VERSION" "$NFD_BIN" "$(nfd_build_id)" "$NFD_MOD_DIR" sigs.k8s.io/node-feature-discovery/cmd/ \
    "" "nfd-master -version" "${NFD_BINS[@]}"
}

# ------------------------------------------------------------------------------------------------ etcd
etcd_build_id() { { grep -v '^[[:space:]]*//' "$ETCD_MOD_DIR/go.mod"; cat "$ETCD_MOD_DIR/go.sum"; } | sha256sum | cut -c1-16; }

etcd_step() {
  local t0 id
  t0="$(now)"
  id="$(etcd_build_id)"
  if [ -x "$ETCD_DIR/bin/etcd" ] && [ "$(cat "$ETCD_DIR/bin/.build-id" 2>/dev/null)" = "$id" ]; then
    timing etcd "$(elapsed "$t0")" "v$ETCD_VERSION cached"; return
  fi
  mkdir -p "$ETCD_DIR/bin"
  rm -f "$ETCD_DIR/bin/etcd"
  log "building etcd v$ETCD_VERSION from Go modules (devtools/etcd)"
  if (cd "$ETCD_MOD_DIR" && go build -trimpath -ldflags "-s -w" -o "$ETCD_DIR/bin/etcd.tmp" go.etcd.io/etcd/server/v3) \
     && "$ETCD_DIR/bin/etcd.tmp" --version >&2; then
    mv -f "$ETCD_DIR/bin/etcd.tmp" "$ETCD_DIR/bin/etcd"
    echo "$id" > "$ETCD_DIR/bin/.build-id"
    timing etcd "$(elapsed "$t0")" "built v$ETCD_VERSION"
    return
  fi
  rm -f "$ETCD_DIR/bin/etcd.tmp"
  warn "################################################################################################"
  warn "etcd v$ETCD_VERSION could not be built from Go modules (see above). FALLING BACK to Debian's"
  warn "etcd-server (3.4), which Kubernetes $K8S_VERSION does not support officially (it wants etcd >= 3.5)."
  warn "The local cluster will use /usr/bin/etcd. Fix the build to get etcd $ETCD_VERSION back."
  warn "################################################################################################"
  dpkg-query -W -f='${Status}' etcd-server 2>/dev/null | grep -q "install ok installed" || apt_install etcd-server
  timing etcd "$(elapsed "$t0")" "FALLBACK: Debian etcd-server $(/usr/bin/etcd --version 2>/dev/null | head -n1)"
}

# ------------------------------------------------------------------------------------------------ kwok
kwok_stages() {
  # kwok has no built-in stages (kwokctl writes them): assemble the defaults kwokctl uses -- node-initialize,
  # node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete -- from this version's module source.
  local out="$KWOK_DIR/kwok.yaml" dir f first=1
  [ -s "$out" ] && return 0
  dir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | jq -r .Dir)"
  [ -d "$dir/kustomize/stage" ] || die "kwok module source not found ($dir)"
  {
    echo "# Default kwok stages for $KWOK_VERSION (copied from sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage,"
    echo "# Apache-2.0), the set kwokctl uses: node-fast + heartbeat-with-lease + pod-fast."
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      [ -f "$dir/kustomize/stage/$f" ] || die "missing kwok stage $f in $dir"
      [ "$first" = 1 ] || echo "---"
      first=0
      cat "$dir/kustomize/stage/$f"
    done
  } > "$out.tmp"
  mv -f "$out.tmp" "$out"
}

kwok_step() {
  local t0 mod gomod
  t0="$(now)"
  if [ -x "$KWOK_DIR/bin/kwok" ]; then
    kwok_stages
    timing kwok "$(elapsed "$t0")" "$KWOK_VERSION cached"; return
  fi
  mkdir -p "$KWOK_DIR/bin"
  # Throwaway module (kwok's go.mod carries no replace directives up to v0.8.0; if a later one does, copy them).
  mod="$KWOK_DIR/build-mod"
  rm -rf "$mod"; mkdir -p "$mod"
  (
    cd "$mod"
    export GOFLAGS="-mod=mod -buildvcs=false"
    printf 'module gcu-stack.local/kwok-build\n\ngo %s\n' "$KWOK_GO_MIN" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' > tools.go
    go get "sigs.k8s.io/kwok@$KWOK_VERSION"
    gomod="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | jq -r .GoMod)"
    if grep -qE '^\s*replace' "$gomod"; then
      log "kwok's go.mod has replace directives; copying them into the throwaway module"
      awk '/^replace \(/{f=1;print;next} f{print; if($0 ~ /^\)/) f=0; next} /^replace /{print}' "$gomod" >> go.mod
      go mod tidy
    fi
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
      -o "$KWOK_DIR/bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
  ) || die "building kwok $KWOK_VERSION failed (see above)"
  mv -f "$KWOK_DIR/bin/kwok.tmp" "$KWOK_DIR/bin/kwok"
  rm -rf "$mod"
  kwok_stages
  timing kwok "$(elapsed "$t0")" "built $KWOK_VERSION"
}

# ------------------------------------------------------------------------------------------------ status
status() {
  local b etcd_bin
  echo "kubernetes v$K8S_VERSION ($K8S_BIN, build id $(cat "$K8S_BIN/.build-id" 2>/dev/null || echo none);" \
       "current $(kube_build_id)):"
  for b in "${KUBE_BINS[@]}"; do
    if [ -x "$K8S_BIN/$b" ]; then echo "  $b"; else echo "  $b MISSING"; fi
  done
  if [ -x "$K8S_BIN/kube-proxy" ]; then echo "  kube-proxy (build id $(cat "$K8S_BIN/.kube-proxy-build-id" 2>/dev/null || echo none);" \
       "current $(proxy_build_id))"; else echo "  kube-proxy MISSING"; fi
  if [ -x "$COREDNS_BIN/coredns" ]; then echo "coredns: $COREDNS_BIN/coredns (v$COREDNS_VERSION, build id" \
       "$(cat "$COREDNS_BIN/.build-id" 2>/dev/null || echo none); current $(coredns_build_id))"; else echo "coredns: MISSING"; fi
  for b in "${CONTAINERD_BINS[@]}"; do
    if [ -x "$CONTAINERD_BIN/$b" ]; then echo "containerd2: $CONTAINERD_BIN/$b"; else echo "containerd2: $b MISSING"; fi
  done
  for b in "${NFD_BINS[@]}"; do
    if [ -x "$NFD_BIN/$b" ]; then echo "nfd: $NFD_BIN/$b (v$NFD_VERSION)"; else echo "nfd: $b MISSING"; fi
  done
  etcd_bin="$ETCD_DIR/bin/etcd"
  if [ -x "$etcd_bin" ]; then echo "etcd: $etcd_bin ($("$etcd_bin" --version 2>/dev/null | head -n1))"
  elif [ -x /usr/bin/etcd ]; then echo "etcd: FALLBACK /usr/bin/etcd ($(/usr/bin/etcd --version 2>/dev/null | head -n1))"
  else echo "etcd: MISSING"; fi
  if [ -x "$KWOK_DIR/bin/kwok" ]; then echo "kwok: $KWOK_DIR/bin/kwok ($KWOK_DIR/kwok.yaml)"; else echo "kwok: MISSING"; fi
  for b in dockerd containerd runc; do echo "$b: $(command -v "$b" || echo MISSING)"; done
  echo "busybox (static): $( [ -x /bin/busybox ] && echo /bin/busybox || echo MISSING)"
  echo "CNI plugins: $( [ -x /usr/lib/cni/bridge ] && echo /usr/lib/cni || echo MISSING)"
}

# ------------------------------------------------------------------------------------------------ regen-go-mod
regen_go_mod() {
  local kv="${1:-$K8S_VERSION}" ev="${2:-$ETCD_VERSION}" kmod staging tmp
  kv="${kv#v}"; ev="${ev#v}"
  go_env
  export GOFLAGS="-mod=mod -buildvcs=false"
  go_step "$(go_min_for_builds)"
  kmod="$(cd /tmp && go mod download -json "k8s.io/kubernetes@v$kv" | jq -r .GoMod)"
  [ -f "$kmod" ] || die "cannot download k8s.io/kubernetes@v$kv's go.mod"
  staging="$(sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s.io/.*#\1#p' "$kmod" | sort -u)"
  [ -n "$staging" ] || die "no ./staging/src/k8s.io replaces in $kmod"
  tmp="$(mktemp -d)"
  {
    echo "// Build module for the local test toolchain: Kubernetes $(echo "$kv" | cut -d. -f1-2) binaries (kube-apiserver,"
    echo "// kube-controller-manager, kube-scheduler, kubelet, kubectl)."
    echo "// Generated by scripts/toolchain/kube.sh regen-go-mod; go.sum is committed because the"
    echo "// checksum database mirror here lacks some k8s.io entries (GONOSUMDB=k8s.io,sigs.k8s.io)."
    echo "module gcu-stack/devtools"
    echo
    echo "go $(go_mod_go_line "$kmod")"
    echo
    echo "require k8s.io/kubernetes v$kv"
    echo
    echo "replace ("
    for m in $staging; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${kv#*.}"; done
    echo ")"
  } > "$tmp/go.mod"
  cp "$tmp/go.mod" "$KUBE_MOD_DIR/go.mod"
  rm -rf "$tmp"
  (cd "$KUBE_MOD_DIR" && go mod tidy) || die "go mod tidy in $KUBE_MOD_DIR failed"
  log "wrote $KUBE_MOD_DIR/go.mod ($(echo "$staging" | wc -l) staging replaces) and go.sum"
  # kube-proxy: the same requirement and replaces, a module of its own (its own build id, its own go.sum).
  { echo "// Build module for kube-proxy (the real test nodes' Services), the Kubernetes version of devtools/go."
    echo "// Generated by scripts/toolchain/kube.sh regen-go-mod; go.sum is committed (see devtools/go/go.mod)."
    grep -v '^//' "$KUBE_MOD_DIR/go.mod" | sed -n '/^module /,$p' | sed 's#^module gcu-stack/devtools$#module gcu-stack/devtools/kube-proxy#' \
      | sed '/^require (/,/^)/d'; } > "$PROXY_MOD_DIR/go.mod"
  (cd "$PROXY_MOD_DIR" && go mod tidy) || die "go mod tidy in $PROXY_MOD_DIR failed"
  log "wrote $PROXY_MOD_DIR/go.mod and go.sum"
  {
    echo "// Build module for etcd's server command (the local cluster's etcd). Generated by"
    echo "// scripts/toolchain/kube.sh regen-go-mod. reflect2 v1.0.1 (what etcd 3.5 lists) crashes when built with"
    echo "// Go >= 1.18, hence the explicit v1.0.2."
    echo "module gcu-stack/devtools/etcd"
    echo
    echo "go $(go_mod_go_line "$(cd /tmp && go mod download -json "go.etcd.io/etcd/server/v3@v$ev" | jq -r .GoMod)")"
    echo
    echo "require ("
    printf '\tgo.etcd.io/etcd/server/v3 v%s\n' "$ev"
    printf '\tgithub.com/modern-go/reflect2 v1.0.2\n'
    printf '\tgithub.com/json-iterator/go v1.1.12\n'
    echo ")"
  } > "$ETCD_MOD_DIR/go.mod"
  (cd "$ETCD_MOD_DIR" && go mod tidy) || die "go mod tidy in $ETCD_MOD_DIR failed"
  log "wrote $ETCD_MOD_DIR/go.mod and go.sum"
}

# ------------------------------------------------------------------------------------------------ main
cmd="${1:-build}"
case "$cmd" in
  build)
    T_ALL="$(now)"
    mkdir -p "$CACHE_DIR"
    go_env
    apt_step
    go_step "$(go_min_for_builds)"
    kube_step
    kube_proxy_step
    coredns_step
    containerd_step
    nfd_step
    etcd_step
    kwok_step
    timing total "$(elapsed "$T_ALL")" "local Kubernetes toolchain ready"
    print_timings
    ;;
  status) status ;;
  regen-go-mod) shift; regen_go_mod "$@" ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "$SELF" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (build | status | regen-go-mod [K8S_VERSION [ETCD_VERSION]])" ;;
esac
